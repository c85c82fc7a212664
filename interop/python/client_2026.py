"""Python SDK (mcp 2.3.0) client for the 2026-07-28 ("modern", stateless) era, a reference peer.

The Python counterpart of interop/ts/client-2026.mjs, pinned to 2026-07-28 the way that one is:
it sends no initialize, probes with `server/discover` (`ClientSession.discover()`, which sends
the `_meta` envelope and the MCP-Protocol-Version / Mcp-Method headers) and fails unless the
server offers exactly that version. (The high-level `Client(url, mode="2026-07-28")` would
adopt the version without any probe, so this uses `ClientSession` directly.)
Prints one JSON line per event, the same lines as client-2026.mjs:
  {"event":"connected","protocolVersion":V,"server":{"name":..,"version":..}}
  {"event":"tools","names":[...]}                       (tools/list)
  {"event":"progress","progress":p,"total":t}           (one per progress notification)
  {"event":"result","text":T}                           (first text content of `count`)
`count` is called with `{"n": N, "interval_ms": MS}` (MS from `--interval-ms`, default 0).
Exits 0 on success; on any error (a tool result with isError included) prints
{"event":"error","message":...} and exits 1. Usage errors go to stderr with exit 2.
Usage: client_2026.py URL N [--interval-ms MS]
"""

import argparse
import json
import sys
import warnings

import anyio
import mcp_types as types
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client

warnings.filterwarnings("ignore")  # deprecation warnings for 2025-era features
PINNED_VERSION = "2026-07-28"


def emit(line: dict) -> None:
    print(json.dumps(line, separators=(",", ":")), flush=True)


def number(x: float | None) -> float | int | None:
    """Progress arrives as float; print 3, not 3.0, as the TypeScript client does."""
    return int(x) if x is not None and float(x).is_integer() else x


def first_text(name: str, result: types.CallToolResult) -> str:
    """The first text content block of a CallToolResult; a tool error fails the run."""
    content = [c.model_dump(mode="json", by_alias=True, exclude_none=True) for c in result.content]
    if result.is_error:
        raise RuntimeError(f"tool {name} failed: {json.dumps(content)}")
    for block in result.content:
        if isinstance(block, types.TextContent):
            return block.text
    raise RuntimeError(f"tool {name} returned no text content: {json.dumps(content)}")


async def main(args: argparse.Namespace) -> None:
    async def on_progress(progress, total, message):
        emit({"event": "progress", "progress": number(progress), "total": number(total)})

    client_info = types.Implementation(name="tether-interop-py-client-2026", version="1.0.0")
    async with streamable_http_client(args.url) as (read, write):
        async with ClientSession(read, write, client_info=client_info) as session:
            discovered = await session.discover()
            if session.protocol_version != PINNED_VERSION:
                raise RuntimeError(
                    f"the server did not offer {PINNED_VERSION} via server/discover: {discovered.supported_versions}"
                )
            server = session.server_info
            emit(
                {
                    "event": "connected",
                    "protocolVersion": session.protocol_version,
                    "server": server.model_dump(mode="json", by_alias=True, exclude_none=True) if server else None,
                }
            )
            listed = await session.list_tools()
            emit({"event": "tools", "names": [tool.name for tool in listed.tools]})
            counted = await session.call_tool(
                "count", {"n": args.n, "interval_ms": args.interval_ms}, progress_callback=on_progress
            )
            emit({"event": "result", "text": first_text("count", counted)})


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("url")
    parser.add_argument("n", type=int, help="count to N")
    parser.add_argument("--interval-ms", type=int, default=0)
    args = parser.parse_args()
    try:
        anyio.run(main, args)
    except Exception as error:  # noqa: BLE001 - every failure is one error line
        while isinstance(error, BaseExceptionGroup) and error.exceptions:  # anyio's task groups
            error = error.exceptions[0]
        emit({"event": "error", "message": str(error) or repr(error)})
        sys.exit(1)
    sys.exit(0)
