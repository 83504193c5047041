"""Clients that leave while the upstream is still thinking give their upstream connection back at once."""

from __future__ import annotations

import asyncio
import time
from urllib.parse import urlsplit

import httpx
import orjson

from tests.conftest import ProxyFactory
from tests.support.upstream import UpstreamApp

BODY = orjson.dumps({"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "think hard"}]})


async def leave_early(proxy_url: str, path: str, count: int) -> None:
    """`count` clients send a whole request, wait a moment, and disconnect before any answer."""
    parts = urlsplit(proxy_url)

    async def one() -> None:
        _reader, writer = await asyncio.open_connection(parts.hostname, parts.port)
        head = (
            f"POST {path} HTTP/1.1\r\nHost: proxy\r\nContent-Type: application/json\r\nx-scenario: slow\r\n"
            f"Content-Length: {len(BODY)}\r\n\r\n"
        )
        writer.write(head.encode() + BODY)
        await writer.drain()
        await asyncio.sleep(0.2)
        writer.close()

    await asyncio.gather(*(one() for _ in range(count)))


def test_clients_that_leave_before_the_headers_release_their_upstream_slots(
    upstream: tuple[UpstreamApp, str], start_proxy: ProxyFactory
) -> None:
    _, url = upstream
    # 20 upstream connections, and a pool wait of 2 s: if the 200 departed clients still held theirs
    # while the upstream thinks (3 s each), every request after them would wait, then fail with 504.
    options = {"upstream": {"max_connections": 20, "connect_timeout_s": 2}, "discover_context_window": False}
    with start_proxy(url, **options) as proxy_url:
        asyncio.run(leave_early(proxy_url, "/v1/chat/completions", 200))
        time.sleep(0.3)
        durations = []
        with httpx.Client(timeout=10) as client:
            for _ in range(20):
                started = time.monotonic()
                response = client.post(f"{proxy_url}/chat/completions", content=BODY)
                durations.append(time.monotonic() - started)
                assert response.status_code == 200, response.text
    assert max(durations) < 2.0, durations  # none waited out the pool (2 s) for a slot a departed client held
