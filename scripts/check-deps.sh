#!/usr/bin/env bash
# The pure crates stay pure: tether-sse and tether-proto must not reach an async runtime or an
# HTTP stack through any normal or build dependency, on any target, with any feature. Their
# whole point is that protocol logic is tested without I/O (docs/DESIGN.md#habits,
# docs/CONTRIBUTING.md#sans-io).
set -euo pipefail
cd "$(dirname "$0")/.."

# Crate names (exact, or as a prefix followed by '-') that mean I/O has crept in.
forbidden='^(tokio|hyper|axum|reqwest|mio|async-std|smol|async-io|actix)(-.*)?$'

status=0
for crate in tether-sse tether-proto; do
  graph=$(cargo tree -p "$crate" --all-features --target all -e normal,build \
    --prefix none --format '{p}' | awk '{print $1}' | sort -u)
  bad=$(grep -E "$forbidden" <<<"$graph" || true)
  if [ -n "$bad" ]; then
    echo "check-deps: $crate depends on forbidden crates:" >&2
    while read -r name; do
      echo "  $name, reached through:" >&2
      cargo tree -p "$crate" --all-features --target all -e normal,build \
        -i "$name" --prefix indent 2>/dev/null | sed 's/^/    /' >&2 || true
    done <<<"$bad"
    status=1
  else
    echo "check-deps: $crate is free of async runtimes and HTTP stacks ($(wc -l <<<"$graph") crates in its graph)"
  fi
done
exit "$status"
