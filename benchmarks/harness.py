"""What the benchmark scripts share: a minimal HTTP/1.1 client and the figures they print.

Servers come from `tests.support` (the fake upstream and the proxy, each in its own process).
Run the scripts from the repository root as `python -m benchmarks.NAME`.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from collections.abc import Sequence
from urllib.parse import urlsplit

import orjson

CHAT_REQUEST = orjson.dumps(
    {
        "model": "gpt-4o-mini",
        "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Say ok."}],
    }
)


# The same exchange through the Responses API: instructions, one input message.
RESPONSES_REQUEST = orjson.dumps(
    {"model": "gpt-4o-mini", "instructions": "Be brief.", "input": [{"role": "user", "content": "Say ok."}]}
)
MESSAGES_REQUEST = orjson.dumps(
    {
        "model": "claude-opus-5-5",
        "max_tokens": 100,
        "system": "Be brief.",
        "messages": [{"role": "user", "content": "Say ok."}],
    }
)


def percentile(values: Sequence[float], pct: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(pct / 100 * (len(ordered) - 1))))
    return ordered[index]


def median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else float("nan")


def table(rows: Sequence[Sequence[object]], header: Sequence[str]) -> str:
    cells = [list(map(str, header))] + [[str(c) for c in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    lines = ["| " + " | ".join(cell.ljust(widths[i]) for i, cell in enumerate(row)) + " |" for row in cells]
    lines.insert(1, "|" + "|".join("-" * (w + 2) for w in widths) + "|")
    return "\n".join(lines)


class RawConnection:
    """A bare keep-alive HTTP/1.1 connection: at concurrency 32 httpx's own pool would be the bottleneck."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, request: bytes) -> None:
        self.reader, self.writer, self.request = reader, writer, request

    @classmethod
    async def open(cls, url: str, body: bytes = CHAT_REQUEST, extra_header: str = "") -> RawConnection:
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
