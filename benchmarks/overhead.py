"""What inflight costs when it has nothing to do: added latency, throughput and time-to-first-byte.

Starts the fake upstream (zero-latency JSON; SSE with 64 events at a fixed interval) and an
inflight proxy in front of it, each in its own process, then measures direct and proxied
requests interleaved in the same run. Prints a table; it asserts nothing.

    python -m benchmarks.overhead [--requests 2000] [--streams 200] [--archive] [--api responses|messages] [--tools 30]

`--archive` runs the proxy with `archive.enabled` (every turn written to an in-memory SQLite
archive): the cost of keeping the archive, which is off by default. `--api responses` measures
`POST /v1/responses` instead of `/v1/chat/completions` (the fake streams its lifecycle events around
one message, each `INTERVAL_S` apart); `--api messages` measures Anthropic's `POST /v1/messages` (its
events around one text block, spaced the same way). `--tools 30` makes each request offer 30 function tools
(about 35 KB), as a coding agent's do.
"""

from __future__ import annotations

import argparse
import asyncio
import time

import orjson

from benchmarks.harness import (
    CHAT_REQUEST,
    MESSAGES_REQUEST,
    RESPONSES_REQUEST,
    RawConnection,
    median,
    percentile,
    table,
)
from tests.support.processes import fake_upstream, inflight

EVENTS = 64
INTERVAL_S = 0.002
APIS = {  # path, request body
    "chat": ("/chat/completions", CHAT_REQUEST),
    "responses": ("/responses", RESPONSES_REQUEST),
    "messages": ("/messages", MESSAGES_REQUEST),
}


def streaming(body: bytes) -> bytes:
    return orjson.dumps({**orjson.loads(body), "stream": True})


def with_tools(body: bytes, api: str, count: int) -> bytes:
    """`body` offering `count` function tools of about 1.2 KB each, in `api`'s shape, as coding agents' requests do."""
    if count == 0:
        return body
    tools = []
    for i in range(count):
        description = "Reads, searches or edits the files of the project. " * 8
        schema = {
            "type": "object",
            "properties": {f"arg{j}": {"type": "string", "description": "an argument " * 5} for j in range(6)},
            "required": ["arg0"],
        }
        name = f"tool_{i}"
        if api == "chat":
            tools.append(
                {"type": "function", "function": {"name": name, "description": description, "parameters": schema}}
            )
        elif api == "responses":
            tools.append({"type": "function", "name": name, "description": description, "parameters": schema})
        else:
            tools.append({"name": name, "description": description, "input_schema": schema})
    return orjson.dumps({**orjson.loads(body), "tools": tools})


async def sequential(direct: str, proxied: str, count: int, body: bytes = CHAT_REQUEST) -> dict[str, list[float]]:
    results: dict[str, list[float]] = {"direct": [], "proxy": []}
    connections = {"direct": await RawConnection.open(direct, body), "proxy": await RawConnection.open(proxied, body)}
    for connection in connections.values():  # warm-up: connections, caches
        for _ in range(100):
            await connection.post()
    for _ in range(count):
        for name, connection in connections.items():
            results[name].append(await connection.post())
    for connection in connections.values():
        connection.close()
    return results


async def concurrent(
    url: str, *, concurrency: int, seconds: float, body: bytes = CHAT_REQUEST
) -> tuple[list[float], float]:
    latencies: list[float] = []
    connections = [await RawConnection.open(url, body) for _ in range(concurrency)]
    for connection in connections:
        await connection.post()
    deadline = time.perf_counter() + seconds

    async def worker(connection: RawConnection) -> None:
        while time.perf_counter() < deadline:
            latencies.append(await connection.post())

    start = time.perf_counter()
    await asyncio.gather(*(worker(c) for c in connections))
    elapsed = time.perf_counter() - start
    for connection in connections:
        connection.close()
    return latencies, len(latencies) / elapsed


async def streams(
    direct: str, proxied: str, count: int, body: bytes = CHAT_REQUEST
) -> dict[str, tuple[list[float], list[int]]]:
    results: dict[str, tuple[list[float], list[int]]] = {"direct": ([], []), "proxy": ([], []), "no hold": ([], [])}
    request = streaming(body)
    connections = {
        "direct": await RawConnection.open(direct, request),
        "proxy": await RawConnection.open(proxied, request),
        # Compaction off: no retry, so the response is not held for its first event.
        "no hold": await RawConnection.open(proxied, request, "x-inflight-compaction: off\r\n"),
    }
    for connection in connections.values():
        for _ in range(10):
            await connection.stream()
    for _ in range(count):
        for name, connection in connections.items():
            ttfb, events = await connection.stream()
            results[name][0].append(ttfb)
            results[name][1].append(events)
    for connection in connections.values():
        connection.close()
    return results


async def measure(direct: str, proxied: str, args: argparse.Namespace) -> None:
    path, body = APIS[args.api]
    body = with_tools(body, args.api, args.tools)
    api_direct, api_proxy = f"{direct}{path}", f"{proxied}{path}"
    stream = await streams(api_direct, api_proxy, args.streams, body)
    seq = await sequential(api_direct, api_proxy, args.requests, body)
    conc: dict[str, tuple[list[float], list[float]]] = {"direct": ([], []), "proxy": ([], [])}
    for _ in range(args.rounds):  # interleave the two targets in short rounds
        for name, url in (("direct", api_direct), ("proxy", api_proxy)):
            latencies, rps = await concurrent(url, concurrency=32, seconds=args.seconds, body=body)
            conc[name][0].extend(latencies)
            conc[name][1].append(rps)

    def row(label: str, direct_values: list[float], proxy_values: list[float], pct: float) -> list[object]:
        d, p = percentile(direct_values, pct), percentile(proxy_values, pct)
        return [label, f"{d:.3f}", f"{p:.3f}", f"{p - d:+.3f}"]

    rows = [
        row("latency p50, concurrency 1 (ms)", seq["direct"], seq["proxy"], 50),
        row("latency p99, concurrency 1 (ms)", seq["direct"], seq["proxy"], 99),
        row("latency p50, concurrency 32 (ms)", conc["direct"][0], conc["proxy"][0], 50),
        row("latency p99, concurrency 32 (ms)", conc["direct"][0], conc["proxy"][0], 99),
        row("stream TTFB p50 (ms)", stream["direct"][0], stream["proxy"][0], 50),
        row("stream TTFB p99 (ms)", stream["direct"][0], stream["proxy"][0], 99),
        row("stream TTFB p50, not held (ms)", stream["direct"][0], stream["no hold"][0], 50),
    ]
    rps_direct, rps_proxy = median(conc["direct"][1]), median(conc["proxy"][1])
    added_rps = f"{rps_proxy - rps_direct:+.0f}"
    rows.append(["requests/s, concurrency 32", f"{rps_direct:.0f}", f"{rps_proxy:.0f}", added_rps])
    # Chat: the role event, the content events, four tool-call events, the finish event, [DONE]. Responses
    # and Messages: as many as the upstream sent directly.
    sent = EVENTS + 7 if args.api == "chat" else stream["direct"][1][0]
    received = f"{sum(stream['proxy'][1])}/{sent * args.streams}"
    rows.append(["stream events received/sent", f"{sum(stream['direct'][1])}/{sent * args.streams}", received, ""])
    print(table(rows, ["measure", "direct", "via inflight", "added"]))


def arguments() -> argparse.ArgumentParser:
    """The command line (`tests/test_docs.py` checks each command the docs show against it)."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=2000, help="sequential request pairs")
    parser.add_argument("--streams", type=int, default=200, help="stream pairs")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds at concurrency 32")
    parser.add_argument("--seconds", type=float, default=2.0, help="length of each concurrent round")
    parser.add_argument("--archive", action="store_true", help="with archive.enabled (memory://)")
    parser.add_argument("--api", choices=sorted(APIS), default="chat", help="which endpoint (default: chat)")
    parser.add_argument("--tools", type=int, default=0, help="function tools each request offers (default: none)")
    return parser


def main() -> None:
    args = arguments().parse_args()
    config = "archive:\n  enabled: true\n" if args.archive else ""
    with (
        fake_upstream("--stream-chunks", str(EVENTS), "--stream-interval", str(INTERVAL_S)) as direct,
        inflight(direct, config) as proxied,
    ):
        print(f"upstream {direct}, proxy {proxied}; {args.requests} sequential pairs, {args.streams} stream pairs")
        tools = f"; {args.tools} tools a request" if args.tools else ""
        print(f"archive {'on' if args.archive else 'off'}; POST /v1{APIS[args.api][0]}{tools}")
        asyncio.run(measure(direct, proxied, args))


if __name__ == "__main__":
    main()
