#!/usr/bin/env bash
# Installs what the test command needs on a fresh machine, and nothing else. Idempotent.
# Peers (Python and TypeScript SDKs, the conformance suite, Node 22) go into target/peers/.
set -euo pipefail
cd "$(dirname "$0")/.."

for component in rustfmt clippy; do
  if ! rustup component list --installed 2>/dev/null | grep -q "^$component"; then
    rustup component add "$component"
  fi
done
# Fetch every crate once, up front, so that a network problem shows here and not mid-build.
cargo fetch --locked
echo "setup: toolchain $(rustc --version)"

# redis-server, for the Redis store tests and tether-testkit's private servers
# (crates/tether-testkit/src/redis.rs). Tests start their own instances on free loopback
# ports, so the package's system service is kept from starting: a policy-rc.d that exits 101
# ("action forbidden") while dpkg runs, unless the machine already has a policy of its own.
if ! command -v redis-server >/dev/null 2>&1; then
  (
    policy=/usr/sbin/policy-rc.d
    if [ ! -e "$policy" ]; then
      printf '#!/bin/sh\nexit 101\n' >"$policy"
      chmod +x "$policy"
      trap 'rm -f "$policy"' EXIT
    fi
    apt-get update
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends redis-server
  )
fi
echo "setup: $(redis-server --version)"

# `script` (util-linux; Debian's bsdutils) gives tether-cli's progress-bar test a
# pseudo-terminal; that test fails without it.
if [ ! -x /usr/bin/script ]; then
  apt-get update
  DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends bsdutils
fi

# The pinned MCP peers, cached by a stamp of their pins (a warm run takes well under a second).
scripts/peers.sh
