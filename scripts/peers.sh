#!/usr/bin/env bash
# Installs the pinned MCP peers that the interop tests run against (docs/PEERS.md)
# into target/peers/, which git ignores, and nothing globally:
#   target/peers/py    Python venv: interop/python/requirements.txt (mcp 2.3.0, fully pinned)
#   target/peers/node  npm ci of interop/package.json + package-lock.json: the TypeScript SDK,
#                      the TypeScript SDK v2 client and server, the conformance suites (0.1.16 for the 2025
#                      era, 0.2.0-alpha.12 as conformance-2026), server-everything, mcp-proxy
#                      and Node 22 itself
#                      (the `node` package ships the binary: node_modules/node/bin/node)
#   interop/node_modules -> target/peers/node/node_modules, so interop/ts/*.mjs resolve the SDK
#   target/peers/rmcp-target  cargo build --locked of interop/rmcp (its own workspace, rmcp =3.11.0,
#                      fully pinned by its Cargo.lock): release/rmcp-peer, the Rust SDK's server
#                      with `count` in either era (`--era legacy|modern`)
# Only PyPI, the npm registry and crates.io are used. Idempotent: a stamp holds a hash of the
# pins, of interop/rmcp's sources and of this script; when it matches, nothing is run and the
# recorded versions are printed.
set -euo pipefail
cd "$(dirname "$0")/.."

peers=target/peers
stamp=$peers/stamp
node=$peers/node/node_modules/node/bin/node
python=$peers/py/bin/python
rmcp_peer=$peers/rmcp-target/release/rmcp-peer

# shellcheck disable=SC2046 # interop/rmcp/src holds no names with spaces
pins=$(cat "$0" interop/python/requirements.txt interop/package.json interop/package-lock.json \
  interop/rmcp/Cargo.toml interop/rmcp/Cargo.lock $(find interop/rmcp/src -type f | LC_ALL=C sort) |
  sha256sum | cut -d' ' -f1)
pins="$pins $(uname -m) $(python3 -c 'import sys; print(sys.version.split()[0])') $(rustc --version | cut -d' ' -f2)"

if [ -f "$stamp" ] && [ "$(head -n1 "$stamp")" = "$pins" ] && [ -x "$node" ] && [ -x "$python" ] &&
  [ -x "$rmcp_peer" ] && [ -L interop/node_modules ]; then
  tail -n +2 "$stamp" | sed 's/^/peers: up to date: /'
  exit 0
fi

start=$SECONDS
rm -f "$stamp"
mkdir -p "$peers"

echo "peers: python venv in $peers/py"
rm -rf "$peers/py"
python3 -m venv "$peers/py"
"$peers/py/bin/pip" install --quiet --disable-pip-version-check -r interop/python/requirements.txt

echo "peers: npm ci in $peers/node"
rm -rf "$peers/node"
mkdir -p "$peers/node"
cp interop/package.json interop/package-lock.json "$peers/node/"
# The node package's preinstall fetches the matching node-linux-* package from the registry;
# package.json's allowScripts approves it (and denies tldjs's optional rules download).
(cd "$peers/node" && npm ci --no-audit --no-fund --loglevel=error)
[ -L interop/node_modules ] || rm -rf interop/node_modules # a stray `npm install` in interop/
ln -sfn ../target/peers/node/node_modules interop/node_modules

# Kept between runs (cargo rebuilds only what changed); --locked: Cargo.lock is the pin.
echo "peers: cargo build of interop/rmcp in $peers/rmcp-target"
cargo build --release --locked --manifest-path interop/rmcp/Cargo.toml --target-dir "$peers/rmcp-target"

mcp_version=$("$python" -c 'import importlib.metadata as m; print(m.version("mcp"))')
node_version=$("$node" --version)
sdk_version=$("$node" -p 'require("./interop/node_modules/@modelcontextprotocol/sdk/package.json").version')
conformance_version=$("$node" -p 'require("./interop/node_modules/@modelcontextprotocol/conformance/package.json").version')
conformance_2026_version=$("$node" -p 'require("./interop/node_modules/conformance-2026/package.json").version')
rmcp_version=$(awk '$0 == "name = \"rmcp\"" { getline; gsub(/"/, "", $3); print $3 }' interop/rmcp/Cargo.lock)
case "$node_version" in
  v22.*) ;;
  *) echo "peers: expected Node 22 at $node, got $node_version" >&2; exit 1 ;;
esac

{
  echo "$pins"
  echo "python mcp $mcp_version ($python)"
  echo "node $node_version ($node)"
  echo "@modelcontextprotocol/sdk $sdk_version, conformance $conformance_version and $conformance_2026_version (interop/node_modules)"
  echo "rmcp $rmcp_version ($rmcp_peer)"
} >"$stamp.tmp"
mv "$stamp.tmp" "$stamp"
tail -n +2 "$stamp" | sed 's/^/peers: installed: /'
echo "peers: done in $((SECONDS - start))s"
