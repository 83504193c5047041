"""Clients that leave while the upstream is still thinking give their upstream connection back at once."""

from __future__ import annotations

import asyncio
import time
from urllib.parse import urlsplit

import httpx
import orjson
import pytest
from starlette.requests import Request
from starlette.types import Message, Receive, Scope, Send
from uvicorn.config import Config
from uvicorn.server import ServerState

from inflight.config import Limits
from inflight.http.body import read_limited
from inflight.http.disconnect import DISCONNECT, CancelledOnDisconnect, ClientGone, Disconnect, on_disconnect
from inflight.http.server import BoundedHttpProtocol
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


async def never_answered() -> None:
    await asyncio.sleep(3600)


async def test_the_connection_that_tells_of_the_disconnect_cancels_the_block_at_once() -> None:
    disconnect = Disconnect(asyncio.get_running_loop())
    scope = {DISCONNECT: disconnect}

    async def receive() -> Message:
        raise AssertionError("no task waits on receive() when the connection tells")

    async def answer() -> None:
        async with CancelledOnDisconnect(scope, receive):
            await never_answered()

    task = asyncio.ensure_future(answer())
    await asyncio.sleep(0)
    disconnect.happen()
    with pytest.raises(ClientGone):
        await task


async def test_a_client_gone_before_the_block_cancels_it_once_it_waits() -> None:
    disconnect = Disconnect(asyncio.get_running_loop())
    disconnect.happen()
    with pytest.raises(ClientGone):
        async with CancelledOnDisconnect({DISCONNECT: disconnect}, never_called):
            await never_answered()


async def test_under_another_server_a_task_waits_on_receive() -> None:
    messages: asyncio.Queue[Message] = asyncio.Queue()
    with pytest.raises(ClientGone):
        async with CancelledOnDisconnect({}, messages.get):
            messages.put_nowait({"type": "http.request", "body": b"", "more_body": False})
            messages.put_nowait({"type": "http.disconnect"})
            await never_answered()


async def test_after_the_block_a_disconnect_calls_nobody() -> None:
    disconnect = Disconnect(asyncio.get_running_loop())
    called: list[int] = []
    with on_disconnect({DISCONNECT: disconnect}, never_called, lambda: called.append(1)):
        await asyncio.sleep(0)
    disconnect.happen()
    await asyncio.sleep(0)
    assert called == []


async def never_called() -> Message:
    raise AssertionError("receive() is not awaited when the connection tells of the disconnect")


async def test_the_connection_says_when_a_body_is_all_in() -> None:
    """A body that came with its head is marked in (then read with no clock); one that follows later is not, and is
    still read whole."""
    seen: list[tuple[bool, bytes]] = []

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        request = Request(scope, receive)
        body_in = scope[DISCONNECT].body_in
        chunks = await read_limited(request, Limits(client_body_timeout_s=5))
        seen.append((body_in, b"".join(chunks)))
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})
        await send({"type": "http.response.body", "body": b"ok"})

    config = Config(app=app, lifespan="off")
    state = ServerState()
    server = await asyncio.get_running_loop().create_server(
        lambda: BoundedHttpProtocol(config=config, server_state=state, app_state={}), "127.0.0.1", 0
    )
    port = server.sockets[0].getsockname()[1]
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    head = b"POST / HTTP/1.1\r\nhost: x\r\ncontent-length: %d\r\n\r\n" % len(BODY)
    try:
        writer.write(head + BODY)
        assert (await reader.readuntil(b"ok")).startswith(b"HTTP/1.1 200")
        writer.write(head)  # the body a moment after its head, on the same connection
        await asyncio.sleep(0.1)
        writer.write(BODY)
        assert (await reader.readuntil(b"ok")).startswith(b"HTTP/1.1 200")
    finally:
        writer.close()
        server.close()
        await server.wait_closed()
    assert seen == [(True, BODY), (False, BODY)]
