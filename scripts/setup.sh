#!/usr/bin/env bash
# Installs what the test command needs on a fresh machine, and nothing else. Idempotent.
# Later stages (SDK peers, redis-server, Node 22) add their installs here, into target/peers/.
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
