#!/usr/bin/env bash
# Runs every fuzz target for a bounded time each (default 60 s; FUZZ_SECONDS overrides, or pass
# target names to run only those). Not part of scripts/test.sh. cargo-fuzz needs nightly
# features; RUSTC_BOOTSTRAP=1 unlocks them on the stable toolchain installed here.
# Install once: cargo install cargo-fuzz --locked
set -euo pipefail
cd "$(dirname "$0")/../fuzz"

if ! RUSTC_BOOTSTRAP=1 cargo fuzz --version >/dev/null 2>&1; then
  echo "fuzz: cargo-fuzz is not installed (cargo install cargo-fuzz --locked)" >&2
  exit 2
fi
mkdir -p target
seconds=${FUZZ_SECONDS:-60}
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  mapfile -t targets < <(RUSTC_BOOTSTRAP=1 cargo fuzz list)
fi

for target in "${targets[@]}"; do
  echo "=== fuzz: $target for ${seconds}s"
  start=$SECONDS
  RUSTC_BOOTSTRAP=1 cargo fuzz run "$target" -- -max_total_time="$seconds" -rss_limit_mb=2048 \
    2>&1 | tee "target/fuzz-$target.log" | grep -E '^(#[0-9]+ +DONE|==[0-9]+==|SUMMARY|Done)' || true
  if grep -qE 'ERROR: libFuzzer|panicked|SUMMARY: .*Sanitizer' "target/fuzz-$target.log"; then
    echo "=== fuzz: $target FOUND A CRASH after $((SECONDS - start))s (see fuzz/target/fuzz-$target.log and fuzz/artifacts/$target)"
    exit 1
  fi
  echo "=== fuzz: $target ran $((SECONDS - start))s without a finding"
done
