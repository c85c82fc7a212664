"""Python SDK (mcp 2.3.0) client that tether's tests use as a reference peer.

Connects to a Streamable HTTP endpoint, calls a tool (`count` unless `--tool` says otherwise)
with a progress callback and prints one JSON line per received progress notification
(`{"progress": p, "total": t}`) or log message (`{"log": data}`), then the result
(`{"result": CallToolResult}`). The SDK resumes a cut stream with GET + Last-Event-ID by
itself. Exits 0 on success, 1 if the tool failed, 3 if `--terminate` could not end the
session.

`--list-tools` calls `tools/list` after initialize and prints `{"tools": [names...]}` before
anything else. The session always ends with DELETE when the client closes (the SDK's
`terminate_on_close`); `--terminate` also prints `{"terminated": "<session id>", "status":
<DELETE's HTTP status>}` after the result, so a test can check that the id is gone.

The tool's arguments are `{"n": N, "interval_ms": MS}` (what `count` takes) unless
`--arguments JSON` replaces them; N may then be omitted, and is ignored if given.
Usage: client.py URL [N] [--interval-ms MS] [--no-progress] [--tool NAME] [--arguments JSON]
                 [--list-tools] [--terminate]
"""

import argparse
import json
import sys
import warnings
from contextlib import AsyncExitStack

import anyio
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

warnings.filterwarnings("ignore")  # the logging capability is deprecated for 2026-07-28


def emit(line: dict) -> None:
    print(json.dumps(line), flush=True)


def number(x: float | None) -> float | int | None:
    """Progress arrives as float; print 3, not 3.0, as the TypeScript client does."""
    return int(x) if x is not None and float(x).is_integer() else x


async def main(args: argparse.Namespace) -> int:
    async def on_progress(progress, total, message):
        emit({"progress": number(progress), "total": number(total)})

    async def on_log(params):
        emit({"log": params.data})

    # What the HTTP exchanges showed: the session id the server issued and the status of
    # the DELETE the SDK sends on close (the SDK exposes neither).
    seen: dict[str, str | int | None] = {"session": None, "deleted": None}

    async def on_response(response) -> None:
        session_id = response.headers.get("mcp-session-id")
        if session_id and seen["session"] is None:
            seen["session"] = session_id
        if response.request.method == "DELETE":
            seen["deleted"] = response.status_code

    # The default client unless --terminate needs to watch the responses.
    http_client = None
    if args.terminate:
        http_client = create_mcp_http_client()
        http_client.event_hooks["response"].append(on_response)

    async with AsyncExitStack() as stack:
        if http_client is not None:
            await stack.enter_async_context(http_client)
        async with streamable_http_client(args.url, http_client=http_client) as (read, write):
            async with ClientSession(read, write, logging_callback=on_log) as session:
                await session.initialize()
                if args.list_tools:
                    listed = await session.list_tools()
                    emit({"tools": [tool.name for tool in listed.tools]})
                result = await session.call_tool(
                    args.tool,
                    args.arguments,
                    progress_callback=None if args.no_progress else on_progress,
                )
        # Leaving streamable_http_client sent the DELETE.
    emit({"result": result.model_dump(mode="json", by_alias=True, exclude_none=True)})
    if args.terminate:
        emit({"terminated": seen["session"], "status": seen["deleted"]})
        deleted = seen["deleted"]
        if not (isinstance(deleted, int) and 200 <= deleted < 300):
            print(f"client: DELETE answered {deleted}", file=sys.stderr)
            return 3
    return 1 if result.is_error else 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("url")
    parser.add_argument("n", type=int, nargs="?", help="count to N (unless --arguments)")
    parser.add_argument("--interval-ms", type=int, default=0)
    parser.add_argument("--no-progress", action="store_true", help="send no progressToken")
    parser.add_argument("--tool", default="count", help="the tool to call (default: count)")
    parser.add_argument(
        "--arguments", type=json.loads, help="the tool's arguments as a JSON object"
    )
    parser.add_argument(
        "--list-tools", action="store_true", help='print {"tools": [names]} after initialize'
    )
    parser.add_argument(
        "--terminate",
        action="store_true",
        help='print {"terminated": SESSION_ID, "status": S} once the DELETE on close is answered',
    )
    args = parser.parse_args()
    if args.arguments is None:
        if args.n is None:
            parser.error("N is required unless --arguments is given")
        args.arguments = {"n": args.n, "interval_ms": args.interval_ms}
    elif not isinstance(args.arguments, dict):
        parser.error("--arguments must be a JSON object")
    sys.exit(anyio.run(main, args))
