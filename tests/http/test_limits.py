"""Request bodies within limits.max_body_bytes: as declared, as streamed, and as decompressed."""

from __future__ import annotations

import gzip
import zlib
from collections.abc import Iterator

import httpx
import orjson
import pytest

from tests.conftest import ProxyFactory
from tests.support.upstream import UpstreamApp

LIMIT = {"limits": {"max_body_bytes": 100_000}}


def chat_body(size: int) -> bytes:
    return orjson.dumps({"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "x" * size}]})


def assert_too_large(response: httpx.Response) -> None:
    assert response.status_code == 413
    error = response.json()["error"]
    assert error["code"] == "request_too_large" and error["type"] == "invalid_request_error"


def test_a_declared_body_over_the_limit_is_refused_before_it_is_read(
    upstream: tuple[UpstreamApp, str], start_proxy: ProxyFactory
) -> None:
    app, url = upstream
    with start_proxy(url, **LIMIT) as proxy_url:
        assert_too_large(httpx.post(f"{proxy_url}/chat/completions", content=chat_body(200_000)))
        assert_too_large(httpx.post(f"{proxy_url}/files", content=b"y" * 200_000))
        assert httpx.post(f"{proxy_url}/chat/completions", content=chat_body(50_000)).status_code == 200
    assert [r.path for r in app.requests] == ["/v1/models", "/v1/chat/completions"]  # discovery, then the one


def test_a_streamed_body_is_cut_off_at_the_limit(upstream: tuple[UpstreamApp, str], start_proxy: ProxyFactory) -> None:
    app, url = upstream

    def chunks() -> Iterator[bytes]:
        body = chat_body(300_000)
        for start in range(0, len(body), 16_384):
            yield body[start : start + 16_384]

    with start_proxy(url, **LIMIT) as proxy_url:
        assert_too_large(httpx.post(f"{proxy_url}/chat/completions", content=chunks()))
    assert not app.chat_requests()


@pytest.mark.parametrize("encoding", ["gzip", "deflate"])
def test_a_decompression_bomb_is_refused_without_inflating_it(
    upstream: tuple[UpstreamApp, str], start_proxy: ProxyFactory, encoding: str
) -> None:
    app, url = upstream
    bomb_body = chat_body(50_000_000)  # 50 MB of one letter: about 50 kB compressed
    bomb = gzip.compress(bomb_body) if encoding == "gzip" else zlib.compress(bomb_body)
    assert len(bomb) < 100_000
    with start_proxy(url, **LIMIT) as proxy_url:
        response = httpx.post(f"{proxy_url}/chat/completions", content=bomb, headers={"content-encoding": encoding})
    assert_too_large(response)
    assert not app.chat_requests()


def test_gzip_members_and_raw_deflate_are_read(upstream: tuple[UpstreamApp, str], proxy: str) -> None:
    app, _ = upstream
    body = chat_body(10)
    two_members = gzip.compress(body[:20]) + gzip.compress(body[20:])
    raw = zlib.compressobj(wbits=-15)
    raw_deflate = raw.compress(body) + raw.flush()
    for content, encoding in ((two_members, "gzip"), (raw_deflate, "deflate")):
        response = httpx.post(f"{proxy}/chat/completions", content=content, headers={"content-encoding": encoding})
        assert response.status_code == 200, response.text
        assert int(response.headers["x-inflight-prompt-tokens"]) > 0
    assert [r.body for r in app.chat_requests()] == [two_members, raw_deflate]  # forwarded as sent


def test_a_truncated_gzip_body_is_a_400(proxy: str) -> None:
    truncated = gzip.compress(chat_body(1000))[:-20]
    response = httpx.post(f"{proxy}/chat/completions", content=truncated, headers={"content-encoding": "gzip"})
    assert response.status_code == 400 and "gzip" in response.json()["error"]["message"]
