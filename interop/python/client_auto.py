"""Dual-era Python clients in their default `auto` mode, reference peers for `tether serve --eras`.

`--library mcp` (the default) is the Python SDK 2.3.0's high-level `mcp.Client`; `--library
fastmcp` is fastmcp 4.1.6's `fastmcp.Client`. Both probe `server/discover` and adopt
2026-07-28 when the server offers it, else fall back to `initialize` and a 2025 session, in
which the SDK resumes a cut stream with GET + Last-Event-ID. Neither is told which era to
pick: the server's answer decides.
Prints one JSON line per event, the same lines as client_2026.py:
  {"event":"connected","protocolVersion":V,"library":L}
  {"event":"progress","progress":p,"total":t}           (one per progress notification)
  {"event":"result","text":T}                           (first text content of `count`)
`count` is called with `{"n": N, "interval_ms": MS}` (MS from `--interval-ms`, default 0).
Exits 0 on success; on any error (a tool result with isError included) prints
{"event":"error","message":...} and exits 1. Usage errors go to stderr with exit 2.
Usage: client_auto.py URL N [--interval-ms MS] [--library mcp|fastmcp]
"""

import argparse
import json
import sys
import warnings

import anyio

warnings.filterwarnings("ignore")  # deprecation warnings for 2025-era features


def emit(line: dict) -> None:
    print(json.dumps(line, separators=(",", ":")), flush=True)


def number(x: float | None) -> float | int | None:
    """Progress arrives as float; print 3, not 3.0, as the TypeScript client does."""
    return int(x) if x is not None and float(x).is_integer() else x


def first_text(result) -> str:
    """The first text content block of a CallToolResult; a tool error fails the run."""
    if result.is_error:
        raise RuntimeError(f"count failed: {result.content!r}")
    for block in result.content:
        text = getattr(block, "text", None)
        if isinstance(text, str):
            return text
    raise RuntimeError(f"count returned no text content: {result.content!r}")


async def on_progress(progress, total, message) -> None:
    emit({"event": "progress", "progress": number(progress), "total": number(total)})


async def with_mcp(args: argparse.Namespace) -> None:
    from mcp import Client

    async with Client(args.url) as client:
        emit({"event": "connected", "protocolVersion": client.session.protocol_version, "library": "mcp"})
        result = await client.call_tool(
            "count", {"n": args.n, "interval_ms": args.interval_ms}, progress_callback=on_progress
        )
        emit({"event": "result", "text": first_text(result)})


async def with_fastmcp(args: argparse.Namespace) -> None:
    from fastmcp import Client

    async with Client(args.url, progress_handler=on_progress) as client:
        emit({"event": "connected", "protocolVersion": client.protocol_version, "library": "fastmcp"})
        result = await client.call_tool("count", {"n": args.n, "interval_ms": args.interval_ms}, raise_on_error=False)
        emit({"event": "result", "text": first_text(result)})


async def main(args: argparse.Namespace) -> int:
    try:
        await (with_fastmcp if args.library == "fastmcp" else with_mcp)(args)
    except Exception as error:  # noqa: BLE001 - every failure is reported as one line
        emit({"event": "error", "message": f"{type(error).__name__}: {error}"})
        return 1
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("url")
    parser.add_argument("n", type=int)
    parser.add_argument("--interval-ms", type=int, default=0)
    parser.add_argument("--library", choices=["mcp", "fastmcp"], default="mcp")
    sys.exit(anyio.run(main, parser.parse_args()))
