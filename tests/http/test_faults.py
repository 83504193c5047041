"""Upstream faults the proxy must survive visibly: a stream cut off, garbage mid-stream, a summarizer that hangs."""

from __future__ import annotations

import asyncio
import time

import httpx
import orjson
import pytest

from tests.compaction.test_compactor import agent_conversation
from tests.conftest import ProxyFactory
from tests.support.raw import raw_upstream, read_request
from tests.support.upstream import UpstreamApp

STREAM_HEAD = (
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
    b"%x\r\n%s\r\n" % (len(b'data: {"n": 1}\n\n'), b'data: {"n": 1}\n\n')
)


@pytest.mark.parametrize(
    "after_first_event",
    [b"", b"zz\r\nnot a chunk\r\n"],
    ids=["connection-dropped", "garbage-chunk"],
)
def test_a_stream_the_upstream_breaks_ends_for_the_client_and_nothing_hangs(
    start_proxy: ProxyFactory, after_first_event: bytes
) -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, number: int) -> None:
        await read_request(reader)
        writer.write(STREAM_HEAD + after_first_event)
        await writer.drain()
        await asyncio.sleep(0.2)
        writer.transport.abort()  # gone, without the last chunk

    body = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}], "stream": True}
    with raw_upstream(handler) as url, start_proxy(url, upstream={"read_timeout_s": 30}) as proxy_url:
        started = time.monotonic()
        received = b""
        with (
            pytest.raises(httpx.RemoteProtocolError),  # cut short, as the client can tell: not a clean end
            httpx.stream("POST", f"{proxy_url}/chat/completions", json=body, timeout=10) as response,
        ):
            assert response.status_code == 200
            for chunk in response.iter_raw():
                received += chunk
        assert received == b'data: {"n": 1}\n\n'
        assert time.monotonic() - started < 5
        # The proxy is still fine: the next request gets its own (equally broken) stream, not a stuck pool.
        with (
            pytest.raises(httpx.RemoteProtocolError),
            httpx.stream("POST", f"{proxy_url}/chat/completions", json=body, timeout=10) as response,
        ):
            for _ in response.iter_raw():
                pass


def test_a_summarizer_that_hangs_times_out_and_the_local_digest_stands_in(
    upstream: tuple[UpstreamApp, str], start_proxy: ProxyFactory
) -> None:
    app, url = upstream
    app.summarizer_delay = 60.0
    messages = agent_conversation(40, output_lines=5)
    overrides = {
        "models": {"gpt-4o-mini": {"context_window": 1_500}, "summarizer": {"context_window": 32_000}},
        "compaction": {"reserve_tokens": 0, "summarize": {"timeout_s": 1, "model": "summarizer"}},
    }
    with start_proxy(url, **overrides) as proxy_url:
        started = time.monotonic()
        response = httpx.post(
            f"{proxy_url}/chat/completions", json={"model": "gpt-4o-mini", "messages": messages}, timeout=30
        )
        seconds = time.monotonic() - started
    assert response.status_code == 200, response.text
    assert "fallback" in response.headers["x-inflight-actions"]
    assert 0.9 < seconds < 10  # the timeout, not the summarizer's minute
    forwarded = orjson.loads(app.chat_requests()[-1].body)["messages"]
    assert any("[Previous conversation summary]" in str(m.get("content")) for m in forwarded)
