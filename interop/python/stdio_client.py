"""Python SDK (mcp 2.3.0) stdio client that tether's tests use: it launches a stdio MCP
server (in the tests, `tether connect URL`) and calls `count` several times in one session.

Usage: stdio_client.py CALLS -- COMMAND ARGS...
CALLS is a comma-separated list of NAME:N:INTERVAL_MS (for example A:40:25,B:2000:20,C:5:0).
Prints one JSON line per event: {"call": NAME, "progress": p}, then {"call": NAME, "result":
text} or {"call": NAME, "error": message}; log notifications as {"log": data}. A call that
fails does not stop the next. Exits 0 when every line was printed.
"""

import json
import sys
import warnings

import anyio
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.shared.exceptions import MCPError

warnings.filterwarnings("ignore")


def emit(line: dict) -> None:
    print(json.dumps(line), flush=True)


async def main(calls: list[tuple[str, int, int]], command: list[str]) -> int:
    async def on_log(params):
        emit({"log": params.data})

    server = StdioServerParameters(command=command[0], args=command[1:])
    async with stdio_client(server) as (read, write):
        async with ClientSession(read, write, logging_callback=on_log) as session:
            await session.initialize()
            for name, n, interval_ms in calls:
                async def on_progress(progress, total, message, name=name):
                    emit({"call": name, "progress": int(progress)})

                try:
                    result = await session.call_tool(
                        "count", {"n": n, "interval_ms": interval_ms},
                        progress_callback=on_progress,
                    )
                    emit({"call": name, "result": result.content[0].text})
                except MCPError as error:
                    emit({"call": name, "error": error.error.message,
                          "data": error.error.data})
    return 0


if __name__ == "__main__":
    split = sys.argv.index("--")
    plan = []
    for item in sys.argv[1].split(","):
        name, n, interval = item.split(":")
        plan.append((name, int(n), int(interval)))
    sys.exit(anyio.run(main, plan, sys.argv[split + 1:]))
