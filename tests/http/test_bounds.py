"""What a hostile client or upstream can make the proxy hold is bounded: a request's headers, a held
stream's first event, a line the usage reader keeps, what it inflates. Against real servers on loopback,
with raw sockets for what no well-behaved peer sends.
"""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import socket
import tracemalloc
from urllib.parse import urlsplit

import httpx
import orjson

from inflight.formats import CHAT_COMPLETIONS, UsageReader
from tests.conftest import ProxyFactory
from tests.support.raw import raw_upstream, read_post
from tests.support.upstream import UpstreamApp

MiB = 1024 * 1024
CHAT = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}]}


def connect(proxy_url: str, *, timeout: float = 30) -> socket.socket:
    parts = urlsplit(proxy_url)
    sock = socket.create_connection((parts.hostname, parts.port))
    sock.settimeout(timeout)
    return sock


def read_until_closed(sock: socket.socket) -> bytes:
    received = b""
    with contextlib.suppress(ConnectionResetError):  # closed with our unread bytes in its buffer: a reset
        while chunk := sock.recv(65536):
            received += chunk
    return received


# --- K: request headers ---------------------------------------------------------------------------


def test_request_headers_past_the_bound_get_431_before_any_key_check(
    upstream: tuple[UpstreamApp, str], start_proxy: ProxyFactory
) -> None:
    head = b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nx-big: " + b"a" * (200 * 1024)  # never ends
    with (
        start_proxy(upstream[1], access={"keys": ["sk-inbound"]}, upstream={"api_key": "sk-up"}) as proxy_url,
        connect(proxy_url) as sock,
    ):
        with contextlib.suppress(OSError):  # the proxy may close before it read it all
            sock.sendall(head)
        received = read_until_closed(sock)
    status_line, _, body = received.partition(b"\r\n\r\n")
    assert status_line.startswith(b"HTTP/1.1 431"), received[:200]
    assert b"connection: close" in status_line.lower()
    error = orjson.loads(body)["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["code"] == "request_header_fields_too_large" and error["type"] == "invalid_request_error"
    assert not upstream[0].requests


def test_a_100_mb_header_is_refused_after_about_the_bound_not_buffered(
    upstream: tuple[UpstreamApp, str], start_proxy: ProxyFactory
) -> None:
    piece = b"a" * MiB
    sent = 0
    with start_proxy(upstream[1]) as proxy_url, connect(proxy_url) as sock:
        sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nx-big: ")
        with contextlib.suppress(OSError):  # the proxy closed on us: what matters is how much it took
            while sent < 100 * MiB:
                sock.sendall(piece)
                sent += len(piece)
        assert httpx.get(proxy_url.removesuffix("/v1") + "/healthz").status_code == 200
    # What the proxy read (64 KB) plus what the two sockets' buffers hold, nowhere near 100 MB.
    assert sent < 32 * MiB


def test_headers_within_the_bound_still_pass(upstream: tuple[UpstreamApp, str], start_proxy: ProxyFactory) -> None:
    with start_proxy(upstream[1]) as proxy_url:
        response = httpx.post(f"{proxy_url}/chat/completions", json=CHAT, headers={"x-big": "a" * 60_000})
    assert response.status_code == 200, response.text
    assert upstream[0].chat_requests()[-1].headers["x-big"] == "a" * 60_000


def test_trailer_fields_of_a_chunked_request_are_dropped_not_forwarded_as_headers(
    upstream: tuple[UpstreamApp, str], start_proxy: ProxyFactory
) -> None:
    body = orjson.dumps(CHAT)
    request = (
        b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
        b"transfer-encoding: chunked\r\nconnection: close\r\n\r\n"
        b"%x\r\n%b\r\n0\r\nx-trailer-field: smuggled\r\n\r\n" % (len(body), body)
    )
    with start_proxy(upstream[1]) as proxy_url, connect(proxy_url) as sock:
        sock.sendall(request)  # in one read, as the quirk needed
        received = read_until_closed(sock)
    assert received.startswith(b"HTTP/1.1 200"), received[:300]
    forwarded = upstream[0].chat_requests()[-1]
    assert "x-trailer-field" not in forwarded.headers
    assert orjson.loads(forwarded.body) == CHAT


# --- B: a held stream, and the usage reader -------------------------------------------------------


def test_a_first_sse_line_of_tens_of_mb_is_relayed_as_it_comes_not_held(start_proxy: ProxyFactory) -> None:
    line = b"data: " + b"x" * (24 * MiB)  # no newline, and the upstream then says nothing more

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, number: int) -> None:
        await read_post(reader, writer)
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n")
        for start in range(0, len(line), MiB):
            piece = line[start : start + MiB]
            writer.write(b"%x\r\n%b\r\n" % (len(piece), piece))
            await writer.drain()
        await asyncio.sleep(3600)  # the stream stays open: a proxy that holds it gives the client nothing

    received = bytearray()
    with raw_upstream(handler) as url, start_proxy(url) as proxy_url:
        stream = {**CHAT, "stream": True}
        with httpx.stream("POST", f"{proxy_url}/chat/completions", json=stream, timeout=30) as response:
            assert response.status_code == 200
            for chunk in response.iter_raw():
                received += chunk
                if len(received) >= len(line):
                    break
    assert bytes(received) == line
    assert "x-inflight-retried" not in response.headers


def test_a_gzip_stream_that_inflates_hugely_is_relayed_intact(start_proxy: ProxyFactory) -> None:
    bomb = gzip.compress(b"\0" * (200 * MiB), compresslevel=9)  # about 200 KB

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, number: int) -> None:
        await read_post(reader, writer)
        writer.write(
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-encoding: gzip\r\n"
            b"content-length: %d\r\n\r\n%b" % (len(bomb), bomb)
        )
        await writer.drain()

    with raw_upstream(handler) as url, start_proxy(url) as proxy_url:
        stream = {**CHAT, "stream": True}
        with httpx.stream("POST", f"{proxy_url}/chat/completions", json=stream, timeout=30) as response:
            body = response.read()  # as it came: httpx's `read` leaves the encoding alone only with iter_raw
    assert response.status_code == 200, body
    assert response.headers["content-encoding"] == "gzip"
    assert len(body) == 200 * MiB  # the client inflated it; the proxy relayed the gzip bytes as they were


def test_the_usage_reader_inflates_a_bomb_only_up_to_its_bound_and_reads_no_usage() -> None:
    bomb = gzip.compress(b"\0" * (200 * MiB), compresslevel=9)
    reader = UsageReader(CHAT_COMPLETIONS, event_stream=True, content_encoding=b"gzip")
    tracemalloc.start()
    try:
        for start in range(0, len(bomb), 16 * 1024):
            reader.feed(bomb[start : start + 16 * 1024])
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert reader.finish() is None
    assert peak < 8 * MiB  # a line's bound and a piece, not the 200 MB it inflates to


def test_the_usage_reader_stops_at_the_inflate_bound_even_when_every_line_is_short() -> None:
    lines = b"data: {}\n" * (4 * MiB)  # 36 MB of short lines
    reader = UsageReader(
        CHAT_COMPLETIONS, event_stream=True, content_encoding=b"gzip", max_inflate_bytes=MiB, max_event_bytes=4096
    )
    compressed = gzip.compress(lines + b'data: {"usage": {"prompt_tokens": 7}}\n\n')
    for start in range(0, len(compressed), 16 * 1024):
        reader.feed(compressed[start : start + 16 * 1024])
    assert reader.finish() is None  # the usage line lay past the bound: not read


def test_the_usage_reader_gives_up_on_a_line_past_the_bound() -> None:
    reader = UsageReader(CHAT_COMPLETIONS, event_stream=True, content_encoding=None, max_event_bytes=64 * 1024)
    reader.feed(b'data: {"usage": {"prompt_tokens": 5}}\n\n')
    for _ in range(64):
        reader.feed(b"x" * 16 * 1024)
        assert len(reader._events) <= 64 * 1024 + 16 * 1024
    reader.feed(b'\n\ndata: {"usage": {"prompt_tokens": 9}}\n\n')
    assert reader.finish() is None


def test_the_usage_reader_still_reads_usage_from_a_gzip_stream() -> None:
    events = b'data: {"choices": []}\n\n' * 10_000 + b'data: {"choices": [], "usage": {"prompt_tokens": 42}}\n\n'
    reader = UsageReader(CHAT_COMPLETIONS, event_stream=True, content_encoding=b"gzip")
    compressed = gzip.compress(events)
    for start in range(0, len(compressed), 1000):
        reader.feed(compressed[start : start + 1000])
    assert reader.finish() == 42


# --- after review: trailers, pipelining ------------------------------------------------------------


def test_a_chunked_request_whose_trailer_never_ends_is_cut_off_after_about_the_bound(
    upstream: tuple[UpstreamApp, str], start_proxy: ProxyFactory
) -> None:
    piece = b"a" * MiB
    sent = 0
    head = (
        b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
        b"transfer-encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\nx-t: "
    )
    with start_proxy(upstream[1]) as proxy_url, connect(proxy_url) as sock:
        sock.sendall(head)
        with contextlib.suppress(OSError):  # the proxy closed on us: what matters is how much it took
            while sent < 100 * MiB:
                sock.sendall(piece)
                sent += len(piece)
    assert sent < 32 * MiB
    assert not upstream[0].chat_requests()


def test_pipelined_requests_past_the_bound_in_one_read_are_each_answered(
    upstream: tuple[UpstreamApp, str], start_proxy: ProxyFactory
) -> None:
    """The bound is on bytes that bring no progress: 1,600 small requests in one send (67 KB) all pass."""
    one = b"GET /healthz HTTP/1.1\r\nhost: 127.0.0.1\r\n\r\n"
    with start_proxy(upstream[1]) as proxy_url, connect(proxy_url) as sock:
        sock.sendall(one * 1_599 + b"GET /healthz HTTP/1.1\r\nhost: 127.0.0.1\r\nconnection: close\r\n\r\n")
        received = read_until_closed(sock)
    assert received.count(b"HTTP/1.1 200 ") == 1_600
