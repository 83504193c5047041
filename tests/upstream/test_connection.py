"""The upstream connection and pool against servers that misbehave the ways real ones do, on loopback."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import httpx
import pytest
import trustme

from tests.conftest import ProxyFactory
from tests.support.raw import raw_upstream, read_request
from tests.support.servers import serve
from tests.support.upstream import UpstreamApp

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

    with raw_upstream(handler) as url, start_proxy(url) as proxy_url:
        with httpx.stream("POST", f"{proxy_url}/files", content=big) as response:
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
