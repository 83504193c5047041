"""The upstream connection and pool against servers that misbehave the ways real ones do, on loopback."""

from __future__ import annotations

import asyncio
import contextlib
import http.client
import logging
import socket
import struct
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import orjson
import pytest
import trustme

from inflight.upstream.connection import Outgoing
from inflight.upstream.pool import ConnectionPool, Timeouts
from inflight.upstream.response import HIGH_WATER
from tests.conftest import ProxyFactory
from tests.support.hostile import ENCODED_DOT_PATHS
from tests.support.logs import log_lines
from tests.support.raw import raw_upstream, read_request
from tests.support.servers import serve
from tests.support.upstream import UpstreamApp
from tests.support.waiting import wait_until

MODELS = b'{"object": "list", "data": []}'


def ok(body: bytes = MODELS, *, extra: bytes = b"") -> bytes:
    return b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n%b\r\n%b" % (
        len(body),
        extra,
        body,
    )


def test_a_keep_alive_connection_the_upstream_drops_as_a_request_arrives_is_retried_once(
    start_proxy: ProxyFactory,
) -> None:
    # The race every keep-alive client meets: the server times the idle connection out just as the
    # next request goes out on it. Here the first connection answers one request, then reads the
    # second and closes without a word. An idempotent request must be sent again on a new connection.
    seen: list[int] = []

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, number: int) -> None:
        while True:
            await read_request(reader)
            seen.append(number)
            if number == 1 and seen.count(1) == 2:
                return  # closes the connection without answering
            writer.write(ok())
            await writer.drain()

    with raw_upstream(handler) as url, start_proxy(url) as proxy_url:
        assert httpx.get(f"{proxy_url}/models").status_code == 200
        response = httpx.get(f"{proxy_url}/models")
    assert response.status_code == 200, response.text
    assert seen == [1, 1, 2]  # the second request went out twice: on the stale connection, then on a new one


def test_an_idle_connection_closed_by_the_upstream_is_never_handed_out(start_proxy: ProxyFactory) -> None:
    app = UpstreamApp()
    with serve(app, timeout_keep_alive=0.2) as url, start_proxy(url + "/v1") as proxy_url:
        body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
        assert httpx.post(f"{proxy_url}/chat/completions", json=body).status_code == 200
        time.sleep(0.5)  # the upstream closes the idle keep-alive connection meanwhile
        assert httpx.post(f"{proxy_url}/chat/completions", json=body).status_code == 200
        assert httpx.get(f"{proxy_url}/models").status_code == 200
    # Each request reached the upstream once (the first GET /v1/models is the proxy's window discovery).
    paths = ["/v1/models", "/v1/chat/completions", "/v1/chat/completions", "/v1/models"]
    assert [r.path for r in app.requests] == paths


def sockets_in_close_wait_to(port: int) -> int:
    """This machine's TCP sockets in CLOSE-WAIT whose peer is 127.0.0.1:`port` (from /proc/net/tcp)."""
    lines = Path("/proc/net/tcp").read_text().splitlines()[1:]
    return sum(1 for line in lines if line.split()[2] == f"0100007F:{port:04X}" and line.split()[3] == "08")


def test_no_connection_to_the_upstream_is_left_half_closed(start_proxy: ProxyFactory) -> None:
    """Relayed requests and summarizer calls alike: once the upstream closes an idle connection, so do we."""
    app = UpstreamApp()
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Fix it."},
    ]
    for turn in range(40):
        call = {"id": f"c{turn}", "type": "function", "function": {"name": "bash", "arguments": "{}"}}
        messages += [
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": f"c{turn}", "content": f"output {turn} " * 20},
        ]
    small_window = {
        "models": {"m": {"context_window": 600}, "summarizer": {"context_window": 32_000}},
        "compaction": {"reserve_tokens": 0, "summarize": {"model": "summarizer"}},
    }
    with serve(app, timeout_keep_alive=0.2) as url, start_proxy(url + "/v1", **small_window) as proxy_url:
        response = httpx.post(f"{proxy_url}/chat/completions", json={"model": "m", "messages": messages})
        assert response.status_code == 200 and "summarize" in response.headers["x-inflight-actions"]
        # The upstream closes its idle keep-alive connections after 0.2 s; the proxy must close its ends.
        wait_until(lambda: sockets_in_close_wait_to(urlsplit(url).port or 0) == 0)


def test_head_responses_have_no_body_and_the_next_request_still_works(start_proxy: ProxyFactory) -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, number: int) -> None:
        while True:
            request = await read_request(reader)
            if request.startswith(b"HEAD"):
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 1234\r\nX-Head: yes\r\n\r\n")
            else:
                writer.write(ok())
            await writer.drain()

    with raw_upstream(handler) as url, start_proxy(url) as proxy_url:
        head = httpx.head(f"{proxy_url}/models")
        after = httpx.get(f"{proxy_url}/models")
    assert head.status_code == 200 and head.headers["x-head"] == "yes" and head.content == b""
    assert after.content == MODELS


def test_a_body_delimited_by_closing_the_connection_is_relayed_whole(start_proxy: ProxyFactory) -> None:
    body = b"x" * 100_000

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, number: int) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nConnection: close\r\n\r\n" + body)
        await writer.drain()

    with raw_upstream(handler) as url, start_proxy(url) as proxy_url:
        response = httpx.get(f"{proxy_url}/files")
        again = httpx.get(f"{proxy_url}/files")
    assert response.content == body and again.content == body


def test_informational_responses_are_skipped(start_proxy: ProxyFactory) -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, number: int) -> None:
        while True:
            await read_request(reader)
            writer.write(b"HTTP/1.1 103 Early Hints\r\nLink: </x>; rel=preload\r\n\r\n" + ok())
            await writer.drain()

    with raw_upstream(handler) as url, start_proxy(url) as proxy_url:
        response = httpx.get(f"{proxy_url}/models")
        assert httpx.get(f"{proxy_url}/models").content == MODELS
    assert response.status_code == 200 and response.content == MODELS


@pytest.mark.parametrize(
    "reply",
    [b"SMTP ready\r\n\r\n", b"HTTP/1.1 200 OK\r\nContent-Length: 50\r\n\r\ntoo short"],
    ids=["not-http", "cut-short"],
)
def test_garbage_or_a_cut_body_is_an_error_not_a_hang(start_proxy: ProxyFactory, reply: bytes) -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, number: int) -> None:
        await read_request(reader)
        writer.write(reply)
        await writer.drain()

    with raw_upstream(handler) as url, start_proxy(url, upstream={"read_timeout_s": 5}) as proxy_url:
        started = time.monotonic()
        try:
            response = httpx.get(f"{proxy_url}/models")
            failed = response.status_code == 502 or len(response.content) < 50
        except httpx.RemoteProtocolError:  # headers were out: an incomplete body is the only honest signal
            failed = True
    assert failed and time.monotonic() - started < 4


def test_large_bodies_are_relayed_intact_both_ways(start_proxy: ProxyFactory) -> None:
    big = bytes(range(256)) * (64 * 1024)  # 16 MiB: well past the buffer at which reading the upstream pauses
    received: list[bytes] = []

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, number: int) -> None:
        while True:
            received.append(await read_request(reader))
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(big))
            for start in range(0, len(big), 65536):
                writer.write(big[start : start + 65536])
                await writer.drain()

    with (
        raw_upstream(handler) as url,
        start_proxy(url) as proxy_url,
        httpx.stream("POST", f"{proxy_url}/files", content=big) as response,
    ):
        chunks = []
        for chunk in response.iter_raw():
            chunks.append(chunk)
            time.sleep(0.0005)  # a client slower than the upstream
    assert b"".join(chunks) == big
    assert received[0].endswith(big)


def test_an_https_upstream_is_verified_and_used(
    start_proxy: ProxyFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    authority = trustme.CA()
    certificate = authority.issue_cert("127.0.0.1", "localhost")
    key, chain, ca = tmp_path / "key.pem", tmp_path / "chain.pem", tmp_path / "ca.pem"
    certificate.private_key_pem.write_to_path(key)
    certificate.cert_chain_pems[0].write_to_path(chain)
    authority.cert_pem.write_to_path(ca)
    app = UpstreamApp()
    with serve(app, ssl_keyfile=str(key), ssl_certfile=str(chain)) as url:
        https = url.replace("http://", "https://") + "/v1"
        with start_proxy(https) as proxy_url:  # our CA is not trusted: the upstream is refused
            untrusted = httpx.get(f"{proxy_url}/models")
        monkeypatch.setenv("SSL_CERT_FILE", str(ca))
        with start_proxy(https) as proxy_url:
            trusted = httpx.get(f"{proxy_url}/models")
    assert untrusted.status_code == 502 and "unreachable" in untrusted.json()["error"]["message"]
    assert trusted.status_code == 200 and trusted.json()["data"][0]["id"] == "gpt-4o-mini"


async def test_a_connection_whose_reading_was_paused_is_not_reused() -> None:
    # A body one byte over the pause threshold arrives and nobody reads it: the connection stops reading
    # the socket exactly when its last byte lands, so the body is complete in the buffer whatever the
    # chunking; then the response is closed (a client that left). Reading that connection is still
    # paused, so it must not serve another request.
    big = b"y" * (HIGH_WATER + 1)
    served: list[int] = []

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, number: int) -> None:
        while True:
            request = await read_request(reader)
            served.append(number)
            body = big if b"/big" in request.split(b"\r\n")[0] else MODELS
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%b" % (len(body), body))
            await writer.drain()

    timeouts = Timeouts(connect=2, read=2, write=2, pool=2)
    with raw_upstream(handler) as url:
        parts = urlsplit(url)
        pool = ConnectionPool(scheme="http", host=parts.hostname or "", port=parts.port or 80, max_connections=4)
        response = await pool.request(Outgoing(b"GET", b"/v1/big", [(b"host", b"x")], None), timeouts)
        for _ in range(200):
            if response.complete:
                break
            await asyncio.sleep(0.01)
        await response.aclose()
        after = await pool.request(Outgoing(b"GET", b"/v1/models", [(b"host", b"x")], None), timeouts)
        body = await after.aread()
        await after.aclose()
        await pool.aclose()
    assert response.complete and body == MODELS
    assert served == [1, 2]


def test_the_path_goes_upstream_as_the_client_sent_it(upstream: tuple[UpstreamApp, str], proxy: str) -> None:
    app, _ = upstream
    httpx.get(f"{proxy}/models/meta-llama%2FLlama-3.1%208B?x=%2F")
    assert app.requests[-1].raw_path == b"/v1/models/meta-llama%2FLlama-3.1%208B"
    assert app.requests[-1].query == b"x=%2F"


DOT_PATHS = [
    "/v1/%2e%2e/%2e%2e/etc/passwd",
    "/v1/models/%2E%2E/x",
    "/v1/./models",
    *ENCODED_DOT_PATHS,
]


@pytest.mark.parametrize("path", DOT_PATHS)
def test_dot_segments_are_refused_not_forwarded(upstream: tuple[UpstreamApp, str], proxy: str, path: str) -> None:
    app, _ = upstream
    parts = urlsplit(proxy)
    connection = http.client.HTTPConnection(parts.hostname or "", parts.port)  # sends the path verbatim
    connection.request("GET", path)
    response = connection.getresponse()
    error = orjson.loads(response.read())["error"]
    connection.close()
    assert response.status == 400 and error["type"] == "invalid_request_error"
    assert app.requests == []


def test_an_upstream_that_answers_before_taking_the_whole_upload_is_heard(
    start_proxy: ProxyFactory, caplog: pytest.LogCaptureFixture
) -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, number: int) -> None:
        await reader.readuntil(b"\r\n\r\n")  # the headers only: it answers before taking the body
        body = b'{"error": {"message": "too large", "type": "invalid_request_error"}}'
        head = b"HTTP/1.1 413 Payload Too Large\r\nConnection: close\r\nContent-Length: %d\r\n\r\n" % len(body)
        writer.write(head + body)
        await writer.drain()
        # A lingering close, as nginx does: read and drop what still comes, so no reset destroys the answer.
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(5):
                while await reader.read(65536):
                    pass

    def upload() -> Iterator[bytes]:
        for _ in range(400):
            yield b"z" * 65536  # 25 MiB, chunked

    caplog.set_level(logging.INFO, logger="inflight")
    with raw_upstream(handler) as url, start_proxy(url) as proxy_url:
        response = httpx.post(f"{proxy_url}/files", content=upload(), timeout=10)
        [line] = log_lines(caplog, "POST /v1/files")
    assert response.status_code == 413 and b"too large" in response.content
    assert line.startswith("POST /v1/files 413 ")


def test_a_chat_post_the_upstream_may_have_read_is_not_sent_twice(start_proxy: ProxyFactory) -> None:
    seen: list[int] = []
    completion = b'{"id": "c", "object": "chat.completion", "choices": []}'

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, number: int) -> None:
        while True:
            await read_request(reader)
            seen.append(number)
            if number == 1 and seen.count(1) == 2:
                return  # read the second request, then closed without answering
            writer.write(ok(completion))
            await writer.drain()

    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    with raw_upstream(handler) as url, start_proxy(url, discover_context_window=False) as proxy_url:
        assert httpx.post(f"{proxy_url}/chat/completions", json=body).status_code == 200
        second = httpx.post(f"{proxy_url}/chat/completions", json=body)
    assert second.status_code == 502
    assert seen == [1, 1]  # an upstream that read it may be generating it: it was not sent again


def test_a_reset_cuts_a_close_delimited_body_short_visibly(start_proxy: ProxyFactory) -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, number: int) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nConnection: close\r\n\r\n" + b"partial " * 1000)
        await writer.drain()
        await asyncio.sleep(0.1)
        sock = writer.get_extra_info("socket")
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # close with a reset
        writer.transport.abort()

    with (
        raw_upstream(handler) as url,
        start_proxy(url) as proxy_url,
        pytest.raises(httpx.RemoteProtocolError),  # the relay ends without the final chunk
    ):
        httpx.get(f"{proxy_url}/files").raise_for_status()
