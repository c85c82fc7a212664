#!/usr/bin/env bash
# The one test command (README, .ci/run). Each stage prints how long it took. Benchmarks,
# fuzzing, mutation testing and release builds are not part of it: see scripts/fuzz.sh,
# scripts/mutants.sh and `cargo bench`.
set -euo pipefail
cd "$(dirname "$0")/.."

export CARGO_TERM_COLOR="${CARGO_TERM_COLOR:-never}"
export RUST_BACKTRACE="${RUST_BACKTRACE:-1}"
# Property tests draw from a fixed seed so that the test command is reproducible; export
# PROPTEST_RNG_SEED=<another number> to explore further (a failure is saved under
# tests/proptest-regressions/<module>.txt and replayed first on every later run).
export PROPTEST_RNG_SEED="${PROPTEST_RNG_SEED:-20261129}"

total_start=$SECONDS
timings=()

stage() {
  local name=$1
  shift
  echo
  echo "=== stage: $name"
  local start=$SECONDS
  if "$@"; then
    local took=$((SECONDS - start))
    timings+=("$(printf '%-14s %5ds  ok' "$name" "$took")")
    echo "=== stage: $name passed in ${took}s"
  else
    local code=$?
    local took=$((SECONDS - start))
    timings+=("$(printf '%-14s %5ds  FAILED' "$name" "$took")")
    echo "=== stage: $name FAILED (exit $code) after ${took}s"
    summary
    exit "$code"
  fi
}

summary() {
  echo
  echo "=== stage times"
  printf '%s\n' "${timings[@]}"
  echo "total          $((SECONDS - total_start))s"
}

stage setup      scripts/setup.sh
stage fmt        cargo fmt --all -- --check
stage deps       scripts/check-deps.sh
stage docs       scripts/check-docs.sh
stage modules    bash -c 'python3 scripts/check-module-graph.py --self-test $(find crates/tether/src -type d)'
stage features   scripts/check-features.sh
stage clippy     cargo clippy --locked --workspace --all-targets --all-features -- -D warnings
stage doc        env RUSTDOCFLAGS="-D warnings" cargo doc --locked --workspace --all-features --no-deps
# The fuzz targets live outside the workspace (cargo-fuzz needs nightly features, unlocked
# with RUSTC_BOOTSTRAP=1): checked here so that an API change cannot leave them unbuildable.
stage fuzz-check bash -c 'cd fuzz && RUSTC_BOOTSTRAP=1 cargo check --locked --bins'
# The conformance suite runs in a stage of its own, with its output shown, so that its summary
# lines (per scenario, and the totals) appear in the test output.
stage test       cargo test --locked --workspace --all-features -- --skip conformance_suite_ \
                   --skip oauth::
# Authorization against the real authorization servers (oauth2-mock-server, oidc-provider) on
# loopback: every test whose path has `oauth::` (tether's unit tests, tether-cli's `it::oauth`
# for the server and `it::oauth::client` for `tether call`, `connect` and `auth` as OAuth
# clients), in a stage of its own with a budget of 10 minutes (it takes about 4).
stage oauth      timeout 600 cargo test --locked --workspace --all-features -- oauth::
# Each crate has one integration-test binary, `it`; the suite's tests are the ones named
# `conformance_suite_*` in tether-cli's, the same filter the `test` stage skips.
stage conformance cargo test --locked -p tether-cli --all-features \
                   --test it -- conformance_suite_ --nocapture --test-threads=1
summary
