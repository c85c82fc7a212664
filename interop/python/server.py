"""Python SDK (mcp 2.3.0) Streamable HTTP server that tether's tests use as a reference peer.

Serves the `count` demo tool exactly as docs/CONTRACTS.md#demo-count specifies it, with
resumability on: an in-memory event store and a `retry` interval, so cut streams can be
resumed with `Last-Event-ID`.
Usage: server.py --bind 127.0.0.1:0 [--retry-ms 500] [--json-response].
Prints `peer: serving http://127.0.0.1:PORT/mcp` on stdout once listening; logs go to stderr.
With --stdio it is a stdio MCP server instead (the same tool), for tether's gateway tests.
"""

import argparse
import asyncio
import itertools
import logging
import socket
import sys
import warnings

import uvicorn
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.streamable_http import GET_STREAM_KEY, EventCallback, EventMessage, EventStore
from mcp.types import JSONRPCError, JSONRPCMessage, JSONRPCResponse, TextContent

warnings.filterwarnings("ignore")  # the logging capability is deprecated for 2026-07-28


class MemoryEventStore(EventStore):
    """Every event of every stream, in order; ids are `<stream>/<seq>` (seq counts all events).

    A replay of a request's stream follows it until its response is stored, instead of
    handing the live tail back to the SDK: after a replay the SDK re-registers the stream
    only after more awaits, and messages stored in that window (or while an old connection
    is still registered) never reach the new one. The standalone GET stream has no end, so
    its replay returns as soon as it has caught up.

    The store is shared by all sessions and the SDK names a request's stream after the
    request id, so two sessions using the same request id share a stream key: tests that
    open several sessions give their requests distinct ids.
    """

    def __init__(self) -> None:
        self.events: list[tuple[str, str, JSONRPCMessage | None]] = []  # (id, stream, message)
        self.seq = itertools.count()
        self.stored = asyncio.Condition()

    async def store_event(self, stream_id, message):
        event_id = f"{stream_id}/{next(self.seq)}"
        async with self.stored:
            self.events.append((event_id, stream_id, message))
            self.stored.notify_all()
        return event_id

    def ended(self, stream_id: str, before: int) -> bool:
        return any(s == stream_id and is_response(m) for _, s, m in self.events[:before])

    async def replay_events_after(self, last_event_id, send_callback: EventCallback):
        index = next((i for i, e in enumerate(self.events) if e[0] == last_event_id), None)
        if index is None:
            return None
        stream_id = self.events[index][1]
        follow = stream_id != GET_STREAM_KEY and not self.ended(stream_id, index + 1)
        i = index + 1
        while True:
            while i < len(self.events):
                event_id, stream, message = self.events[i]
                i += 1
                if stream == stream_id and message is not None:  # None: a priming event
                    await send_callback(EventMessage(message, event_id))
                    if is_response(message):
                        return stream_id
            if not follow:
                return stream_id
            async with self.stored:
                await self.stored.wait_for(lambda: len(self.events) > i)


def is_response(message: JSONRPCMessage | None) -> bool:
    return isinstance(message, JSONRPCResponse | JSONRPCError)


server = MCPServer("tether-interop-python")


@server.tool(structured_output=False)
async def count(n: int, ctx: Context, interval_ms: int = 0) -> list[TextContent]:
    """Emits n progress notifications (or n log messages without a progressToken), then returns 'counted n'."""
    if not 0 <= n <= 10_000_000 or interval_ms < 0:
        raise ValueError("n must be in 0..=10000000 and interval_ms >= 0")
    has_token = (ctx.request_context.meta or {}).get("progress_token") is not None
    for i in range(1, n + 1):
        if has_token:
            await ctx.report_progress(i, n)
        else:
            await ctx.log("info", {"index": i, "total": n}, logger_name="count")
        if interval_ms and i < n:
            await asyncio.sleep(interval_ms / 1000)
    return [TextContent(type="text", text=f"counted {n}")]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bind", default="127.0.0.1:0", help="HOST:PORT; port 0 picks a free port")
    parser.add_argument("--retry-ms", type=int, default=500)
    parser.add_argument("--json-response", action="store_true")
    parser.add_argument("--stdio", action="store_true", help="serve MCP over stdin/stdout")
    args = parser.parse_args()
    logging.basicConfig(stream=sys.stderr, level=logging.INFO)
    if args.stdio:
        server.run("stdio")
        return

    host, port = args.bind.rsplit(":", 1)
    app = server.streamable_http_app(
        event_store=MemoryEventStore(),
        retry_interval=args.retry_ms,
        json_response=args.json_response,
        host=host,
    )
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, int(port)))
    sock.listen(128)  # connections queue here until uvicorn accepts them
    print(f"peer: serving http://{host}:{sock.getsockname()[1]}/mcp", flush=True)
    config = uvicorn.Config(app, log_level="warning", lifespan="on")
    asyncio.run(uvicorn.Server(config).serve(sockets=[sock]))


if __name__ == "__main__":
    main()
