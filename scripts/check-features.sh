#!/usr/bin/env bash
# Builds the library with each of its features alone and with a short fixed list of
# combinations, so that a feature which forgets a dependency of its own (or code that only
# compiles beside another feature) fails here rather than for a user who picked it. Also
# checks that the toolchain is the declared minimum Rust version (`rust-version` in the
# workspace's Cargo.toml): everything else the test command builds then proves that version.
# `cargo hack --each-feature` would do the first part; a loop needs nothing installed.
set -euo pipefail
cd "$(dirname "$0")/.."

declared=$(sed -n 's/^rust-version = "\(.*\)"$/\1/p' Cargo.toml)
installed=$(rustc --version | sed -n 's/^rustc \([0-9]*\.[0-9]*\).*/\1/p')
if [ "$declared" != "$installed" ]; then
  echo "check-features: rust-version is $declared but the toolchain is $installed;" \
    "declare the toolchain the project is built and tested with" >&2
  exit 1
fi
echo "check-features: toolchain $installed is the declared rust-version"

features=$(sed -n '/^\[features\]/,/^\[/p' crates/tether/Cargo.toml |
  sed -n 's/^\([a-z][a-z0-9_-]*\) = .*/\1/p' | grep -v '^default$')
combinations=(
  ""                    # nothing but the store traits and the memory store
  "server,sqlite"       # the embedded default without the client
  "server,redis"        # many nodes without SQLite
  "client,sqlite"       # a client application that keeps its own SQLite store
  "rmcp,redis"          # the rmcp adapter on a shared store
)
failed=0
for set in $features "${combinations[@]}"; do
  echo "check-features: tether --no-default-features --features '${set}'"
  # `cargo rustc` puts -D warnings on this crate alone: RUSTFLAGS would rebuild every
  # dependency, and a target directory of its own would build them all once more.
  if ! cargo rustc --locked --quiet -p tether --lib --profile check --no-default-features \
      --features "$set" -- -D warnings; then
    echo "check-features: FAILED with features '${set}'" >&2
    failed=1
  fi
done
exit "$failed"
