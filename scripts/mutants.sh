#!/usr/bin/env bash
# Mutation testing of the pure logic that everything else trusts: the SSE decoder and the
# reconnect machine with its backoff. Not part of scripts/test.sh (it takes tens of minutes).
# Install once: cargo install cargo-mutants --locked
# Results land in target/mutants/<name>/mutants.out (missed.txt lists surviving mutants).
set -euo pipefail
cd "$(dirname "$0")/.."

export PROPTEST_CASES=${PROPTEST_CASES:-64}  # keep each mutant run short; the full case count runs in scripts/test.sh

run() {
  local name=$1 package=$2
  shift 2
  local files=()
  for f in "$@"; do files+=(--file "$f"); done
  echo "=== mutants: $name"
  mkdir -p "target/mutants/$name"
  # Exit 2 (some mutants survived) and 3 (some timed out) are the report, not a failed run.
  local code=0
  cargo mutants --package "$package" "${files[@]}" --output "target/mutants/$name" \
    --timeout 60 --test-workspace=false || code=$?
  case $code in 0 | 2 | 3) ;; *) return "$code" ;; esac
  echo "--- missed:"
  cat "target/mutants/$name/mutants.out/missed.txt" 2>/dev/null || true
}

if [ "${1:-all}" != reconnect ]; then
  run sse-decoder tether-sse crates/tether-sse/src/decode.rs
fi
run reconnect tether-proto crates/tether-proto/src/reconnect.rs crates/tether-proto/src/backoff.rs
