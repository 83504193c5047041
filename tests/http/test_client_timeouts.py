"""Slow clients are bounded: a connection that sends nothing, headers or a body a byte at a time, an idle keep-alive.

Each test holds a raw socket the way a slow-loris client would and checks that the proxy answers
408 where a request was under way, and closes the connection in about the configured time.
"""

from __future__ import annotations

import contextlib
import socket
import time
from urllib.parse import urlsplit

import httpx
import orjson

from tests.conftest import ProxyFactory
from tests.support.upstream import UpstreamApp

TIMEOUTS = {"limits": {"client_header_timeout_s": 1.0, "client_body_timeout_s": 1.0, "client_idle_timeout_s": 1}}
# Generous: each test must see the connection closed within this, not merely eventually.
CLOSED_WITHIN_S = 4.0


def connect(proxy_url: str) -> socket.socket:
    parts = urlsplit(proxy_url)
    sock = socket.create_connection((parts.hostname, parts.port))
    sock.settimeout(0.25)
    return sock


def trickle_until_closed(sock: socket.socket, data: bytes) -> tuple[bytes, float]:
    """Send `data` a byte every 0.2 s (then nothing), reading all along; (what came back, seconds until EOF)."""
    started = time.monotonic()
    received = b""
    sent = 0
    while time.monotonic() - started < CLOSED_WITHIN_S:
        if sent < len(data):
            with contextlib.suppress(OSError):  # the proxy closed first: read what it said
                sock.sendall(data[sent : sent + 1])
            sent += 1
        try:
            chunk = sock.recv(65536)
        except TimeoutError:
            continue
        except ConnectionResetError:  # closed with our unread bytes still in its buffer: a reset, not a FIN
            return received, time.monotonic() - started
        if not chunk:
            return received, time.monotonic() - started
        received += chunk
    raise AssertionError(f"connection still open after {CLOSED_WITHIN_S} s (received {received[:200]!r})")


def assert_408(received: bytes) -> None:
    head, _, body = received.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 408"), received[:200]
    error = orjson.loads(body)["error"]
    assert error["code"] == "request_timeout" and error["type"] == "invalid_request_error"


def test_a_connection_that_never_sends_is_closed(upstream: tuple[UpstreamApp, str], start_proxy: ProxyFactory) -> None:
    with start_proxy(upstream[1], **TIMEOUTS) as proxy_url, connect(proxy_url) as sock:
        received, seconds = trickle_until_closed(sock, b"")
    assert received == b"" and 0.8 < seconds < CLOSED_WITHIN_S


def test_headers_sent_a_byte_at_a_time_get_408(upstream: tuple[UpstreamApp, str], start_proxy: ProxyFactory) -> None:
    head = b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\n" + b"x-slow: " + b"a" * 200 + b"\r\n\r\n"
    with start_proxy(upstream[1], **TIMEOUTS) as proxy_url, connect(proxy_url) as sock:
        received, seconds = trickle_until_closed(sock, head)
    assert_408(received)
    assert 0.8 < seconds < 2.5
    assert not upstream[0].chat_requests()


def test_a_body_sent_a_byte_at_a_time_gets_408(upstream: tuple[UpstreamApp, str], start_proxy: ProxyFactory) -> None:
    body = orjson.dumps({"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi " * 100}]})
    head = b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-length: %d\r\n\r\n" % len(body)
    with start_proxy(upstream[1], **TIMEOUTS) as proxy_url, connect(proxy_url) as sock:
        sock.sendall(head)
        received, seconds = trickle_until_closed(sock, body)
    assert_408(received)
    assert 0.8 < seconds < 2.5
    assert not upstream[0].chat_requests()


def test_a_slow_upload_to_another_route_gets_408(upstream: tuple[UpstreamApp, str], start_proxy: ProxyFactory) -> None:
    head = b"POST /v1/files HTTP/1.1\r\nhost: x\r\ncontent-length: 1000\r\n\r\n"
    with start_proxy(upstream[1], **TIMEOUTS) as proxy_url, connect(proxy_url) as sock:
        sock.sendall(head)
        received, seconds = trickle_until_closed(sock, b"y" * 1000)
    assert_408(received)
    assert 0.8 < seconds < 2.5


def test_an_idle_kept_alive_connection_is_closed_and_a_busy_one_is_not(
    upstream: tuple[UpstreamApp, str], start_proxy: ProxyFactory
) -> None:
    body = orjson.dumps({"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}]})
    with start_proxy(upstream[1], **TIMEOUTS) as proxy_url:
        with httpx.Client(base_url=proxy_url) as client:  # requests closer together than the idle time: one connection
            for _ in range(4):
                assert client.post("/chat/completions", content=body).status_code == 200
                time.sleep(0.5)
        with connect(proxy_url) as sock:
            sock.sendall(b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n")
            received, seconds = trickle_until_closed(sock, b"")
    assert received.startswith(b"HTTP/1.1 200") and 0.8 < seconds < CLOSED_WITHIN_S
