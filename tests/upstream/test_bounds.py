"""An upstream's response head is bounded (`limits.max_upstream_header_bytes`): past it the request
fails with a 502 in the wire format's shape, the connection is dropped, and nothing of it is relayed."""

from __future__ import annotations

import asyncio
import contextlib

import httpx
import orjson
import pytest

from inflight.config import load_settings
from inflight.errors import UpstreamUnreachable
from inflight.upstream.client import UpstreamClient
from tests.conftest import ProxyFactory
from tests.support.raw import HEADER_OPENING, TRAILER_OPENING, EndlessField, raw_upstream, read_post, read_request

MiB = 1024 * 1024
CHAT = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}]}
BODY = b'{"object": "list", "data": []}'


def answer_with_header(value: bytes) -> bytes:
    return b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nx-big: %b\r\ncontent-length: %d\r\n\r\n%b" % (
        value,
        len(BODY),
        BODY,
    )


def test_a_1_mb_response_header_fails_the_request_with_502_and_nothing_is_relayed(start_proxy: ProxyFactory) -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, number: int) -> None:
        await read_post(reader, writer)
        writer.write(answer_with_header(b"a" * MiB))
        await writer.drain()

    with raw_upstream(handler) as url, start_proxy(url) as proxy_url:
        response = httpx.post(f"{proxy_url}/chat/completions", json=CHAT, timeout=30)
    assert response.status_code == 502, response.headers
    assert "x-big" not in response.headers
    error = orjson.loads(response.content)["error"]
    assert error["code"] == "upstream_bad_response" and error["type"] == "upstream_error"


def test_a_200_mb_response_header_is_cut_off_after_about_the_bound(start_proxy: ProxyFactory) -> None:
    flood = EndlessField(HEADER_OPENING, 200 * MiB)

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, number: int) -> None:
        await read_post(reader, writer)
        await flood.send(writer)

    with raw_upstream(handler) as url, start_proxy(url, upstream={"read_timeout_s": 60}) as proxy_url:
        response = httpx.post(f"{proxy_url}/chat/completions", json=CHAT, timeout=90)
    assert response.status_code == 502
    assert orjson.loads(response.content)["error"]["code"] == "upstream_bad_response"
    assert flood.sent < 32 * MiB  # what the proxy read (64 KB) and what the sockets' buffers took


@pytest.mark.parametrize("header_bytes", [1000, 1900, 2100, 50_000])
async def test_the_client_takes_a_head_up_to_its_bound_and_refuses_one_past_it(header_bytes: int) -> None:
    # The head and body come in one write, so the bound falls inside one read: split there, the body intact.
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, number: int) -> None:
        while True:
            await read_request(reader)
            writer.write(answer_with_header(b"a" * header_bytes))
            await writer.drain()

    bound = 2048
    with raw_upstream(handler) as url:
        client = UpstreamClient(
            load_settings(None, overrides={"upstream": {"base_url": url}}).upstream, max_header_bytes=bound
        )
        try:
            if len(answer_with_header(b"a" * header_bytes)) - len(BODY) <= bound:
                for _ in range(2):  # and the connection is kept for the next one
                    assert await client.fetch("/v1/models", headers=[]) == (200, BODY)
            else:
                with pytest.raises(UpstreamUnreachable) as refused:
                    await client.fetch("/v1/models", headers=[])
                assert refused.value.code == "upstream_bad_response"
        finally:
            await client.aclose()


def test_an_upstream_trailer_that_never_ends_is_cut_off_after_about_the_bound(start_proxy: ProxyFactory) -> None:
    flood = EndlessField(TRAILER_OPENING, 200 * MiB)

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, number: int) -> None:
        await read_post(reader, writer)
        with contextlib.suppress(OSError):
            await flood.send(writer)

    with raw_upstream(handler) as url, start_proxy(f"{url}/v1") as proxy_url, contextlib.suppress(httpx.HTTPError):
        httpx.post(f"{proxy_url}/chat/completions", json=CHAT, timeout=30)
    assert flood.sent < 64 * MiB  # dropped after about the bound, not read to the end
