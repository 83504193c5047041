"""What inflight costs when it has nothing to do: added latency, throughput and time-to-first-byte.

Starts a minimal upstream (zero-latency JSON; SSE with 64 events at a fixed interval) and an
inflight proxy in front of it, each in its own process, then measures direct and proxied
requests interleaved in the same run. Prints a table; it asserts nothing.

    python benchmarks/overhead.py [--requests 2000] [--streams 200]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

sys.path.insert(0, str(Path(__file__).resolve().parent))

import orjson  # noqa: E402
from harness import free_port, inflight, median, percentile, process, read_body, table  # noqa: E402

EVENTS = 64
INTERVAL_S = 0.002
COMPLETION = orjson.dumps(
    {
        "id": "chatcmpl-bench",
        "object": "chat.completion",
        "created": 1,
        "model": "gpt-4o-mini",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 20, "completion_tokens": 1, "total_tokens": 21},
    }
)
CHUNK = b'data: {"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"tok "}}]}\n\n'
REQUEST = orjson.dumps(
    {
        "model": "gpt-4o-mini",
        "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Say ok."}],
    }
)
STREAM_REQUEST = orjson.dumps({**orjson.loads(REQUEST), "stream": True})


async def upstream_app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] != "http":
        return
    body = await read_body(receive)
    if b'"stream":true' not in body:
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(COMPLETION)).encode())]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": COMPLETION})
        return
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/event-stream")]})
    for _ in range(EVENTS):
        await send({"type": "http.response.body", "body": CHUNK, "more_body": True})
        await asyncio.sleep(INTERVAL_S)
    await send({"type": "http.response.body", "body": b"data: [DONE]\n\n", "more_body": False})


async def sequential(direct: str, proxied: str, count: int) -> dict[str, list[float]]:
    results: dict[str, list[float]] = {"direct": [], "proxy": []}
    connections = {"direct": await RawConnection.open(direct), "proxy": await RawConnection.open(proxied)}
    for connection in connections.values():  # warm-up: connections, caches
        for _ in range(100):
            await connection.post()
    for _ in range(count):
        for name, connection in connections.items():
            results[name].append(await connection.post())
    for connection in connections.values():
        connection.close()
    return results


class RawConnection:
    """A bare keep-alive HTTP/1.1 connection: at concurrency 32 httpx's own pool would be the bottleneck."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, request: bytes) -> None:
        self.reader, self.writer, self.request = reader, writer, request

    @classmethod
    async def open(cls, url: str, body: bytes = REQUEST, extra_header: str = "") -> RawConnection:
        parts = urlsplit(url)
        reader, writer = await asyncio.open_connection(parts.hostname, parts.port)
        head = (
            f"POST {parts.path} HTTP/1.1\r\nHost: {parts.netloc}\r\nContent-Type: application/json\r\n"
            f"{extra_header}Content-Length: {len(body)}\r\n\r\n"
        )
        return cls(reader, writer, head.encode() + body)

    async def post(self) -> float:
        start = time.perf_counter()
        self.writer.write(self.request)
        head = await self.reader.readuntil(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200"), head
        length = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
        await self.reader.readexactly(length)
        return (time.perf_counter() - start) * 1000

    async def stream(self) -> tuple[float, int]:
        """Time to the first body byte of a chunked SSE response, and the number of events in it."""
        start = time.perf_counter()
        self.writer.write(self.request)
        data = b""
        ttfb = 0.0
        while not data.endswith(b"\r\n0\r\n\r\n"):
            data += await self.reader.read(65536)
            if not ttfb and b"\r\n\r\n" in data and not data.endswith(b"\r\n\r\n"):
                ttfb = (time.perf_counter() - start) * 1000
        return ttfb, data.count(b"data: ")

    def close(self) -> None:
        self.writer.close()


async def concurrent(url: str, *, concurrency: int, seconds: float) -> tuple[list[float], float]:
    latencies: list[float] = []
    connections = [await RawConnection.open(url) for _ in range(concurrency)]
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


async def streams(direct: str, proxied: str, count: int) -> dict[str, tuple[list[float], list[int]]]:
    results: dict[str, tuple[list[float], list[int]]] = {"direct": ([], []), "proxy": ([], []), "no hold": ([], [])}
    connections = {
        "direct": await RawConnection.open(direct, STREAM_REQUEST),
        "proxy": await RawConnection.open(proxied, STREAM_REQUEST),
        # Compaction off: no retry, so the response is not held for its first event.
        "no hold": await RawConnection.open(proxied, STREAM_REQUEST, "x-inflight-compaction: off\r\n"),
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
    chat_direct, chat_proxy = f"{direct}/chat/completions", f"{proxied}/chat/completions"
    stream = await streams(chat_direct, chat_proxy, args.streams)
    seq = await sequential(chat_direct, chat_proxy, args.requests)
    conc: dict[str, tuple[list[float], list[float]]] = {"direct": ([], []), "proxy": ([], [])}
    for _ in range(args.rounds):  # interleave the two targets in short rounds
        for name, url in (("direct", chat_direct), ("proxy", chat_proxy)):
            latencies, rps = await concurrent(url, concurrency=32, seconds=args.seconds)
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
    sent = EVENTS + 1
    received = f"{sum(stream['proxy'][1])}/{sent * args.streams}"
    rows.append(["stream events received/sent", f"{sum(stream['direct'][1])}/{sent * args.streams}", received, ""])
    print(table(rows, ["measure", "direct", "via inflight", "added"]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=2000, help="sequential request pairs")
    parser.add_argument("--streams", type=int, default=200, help="stream pairs")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds at concurrency 32")
    parser.add_argument("--seconds", type=float, default=2.0, help="length of each concurrent round")
    parser.add_argument("--serve-upstream", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_upstream:
        import uvicorn

        uvicorn.run(upstream_app, host="127.0.0.1", port=args.serve_upstream, log_level="warning", access_log=False)
        return
    port = free_port()
    with process([sys.executable, __file__, "--serve-upstream", str(port)], port):
        direct = f"http://127.0.0.1:{port}/v1"
        with inflight(direct) as proxied:
            print(f"upstream {direct}, proxy {proxied}; {args.requests} sequential pairs, {args.streams} stream pairs")
            asyncio.run(measure(direct, proxied, args))


if __name__ == "__main__":
    main()
