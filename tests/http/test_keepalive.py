"""A streaming request that waits on its compaction: SSE comments meanwhile, when configured."""

from __future__ import annotations

from typing import Any

import httpx
import openai

from tests.conftest import ProxyFactory
from tests.http.test_background import conversation_at
from tests.support.params import as_params
from tests.support.upstream import UpstreamApp

# Summaries made on the crossing turn (not in the background), so that the turn waits on one.
CONFIG: dict[str, Any] = {
    "models": {"gpt-4o": {"context_window": 8000}},
    # By thresholds: masking alone would bring it under its floor, and the test needs a summary to wait on.
    "compaction": {"schedule": "thresholds", "summarize": {"background_at": None, "keepalive_after_s": 0.3}},
}


def stream(proxy_url: str, **headers: str) -> httpx.Response:
    body = {"model": "gpt-4o", "messages": conversation_at(0.9), "stream": True}
    return httpx.post(f"{proxy_url}/chat/completions", json=body, headers=headers, timeout=30)


def test_a_streaming_request_waiting_on_a_summary_gets_comments_then_its_stream(
    upstream: tuple[UpstreamApp, str], start_proxy: ProxyFactory
) -> None:
    app, url = upstream
    app.summarizer_delay = 1.5
    with start_proxy(url, **CONFIG) as proxy_url:
        response = stream(proxy_url)
        client = openai.OpenAI(base_url=proxy_url, api_key="sk-test", max_retries=0)
        app.summarizer_delay = 1.0
        messages = [*conversation_at(0.9), {"role": "user", "content": "Go on."}]
        chunks = list(client.chat.completions.create(model="gpt-4o", messages=as_params(messages), stream=True))
        client.close()
    assert response.status_code == 200 and response.headers["x-inflight-keepalive"] == "1"
    assert response.content.startswith(b": inflight is compacting")
    upstream_stream = bytes(app.chat_requests()[0].sent)
    assert response.content.endswith(upstream_stream)  # after the comments, the upstream's bytes unchanged
    assert "x-inflight-actions" not in response.headers  # the headers went out before the compaction was done
    assert "Summary number 1" in str(app.chat_requests()[0].json()["messages"])
    assert any(chunk.choices and chunk.choices[0].delta.content for chunk in chunks)  # the SDK skips comments


def test_an_upstream_error_after_the_comments_arrives_as_an_error_event(
    upstream: tuple[UpstreamApp, str], start_proxy: ProxyFactory
) -> None:
    app, url = upstream
    app.summarizer_delay = 1.0
    with start_proxy(url, **CONFIG) as proxy_url:
        response = stream(proxy_url, **{"x-scenario": "status-503"}, authorization="Bearer sk-refused")
        usage = httpx.get(proxy_url.removesuffix("/v1") + "/inflight/usage", timeout=10).json()
    assert response.status_code == 200
    comments, _, last = response.content.rpartition(b"\n\n" + b"data: ")
    assert comments.startswith(b": inflight") and last.startswith(b'{"error":{"message":"upstream says 503"')
    # The 200 went out before the upstream failed: the usage figures count the request, and nothing billed.
    total = usage["total"]
    assert total["requests"] == 1 and total["client_tokens"] == total["saved_tokens"] == total["cost_units"] == 0


def test_without_the_setting_a_slow_compaction_sends_nothing_until_the_answer(
    upstream: tuple[UpstreamApp, str], start_proxy: ProxyFactory
) -> None:
    app, url = upstream
    app.summarizer_delay = 1.0
    config = {**CONFIG, "compaction": {"summarize": {"background_at": None}}}
    with start_proxy(url, **config) as proxy_url:
        response = stream(proxy_url)
    assert response.content == bytes(app.chat_requests()[0].sent)
    assert "summarize" in response.headers["x-inflight-actions"]


def test_a_non_streaming_request_is_never_kept_alive(
    upstream: tuple[UpstreamApp, str], start_proxy: ProxyFactory
) -> None:
    app, url = upstream
    app.summarizer_delay = 1.0
    with start_proxy(url, **CONFIG) as proxy_url:
        body = {"model": "gpt-4o", "messages": conversation_at(0.9), "stream": False}
        response = httpx.post(f"{proxy_url}/chat/completions", json=body, timeout=30)
    assert response.json()["object"] == "chat.completion" and "x-inflight-keepalive" not in response.headers


def test_a_request_with_compaction_off_is_never_kept_alive(
    upstream: tuple[UpstreamApp, str], start_proxy: ProxyFactory
) -> None:
    app, url = upstream
    with start_proxy(url, **CONFIG) as proxy_url:
        headers = {"x-inflight-compaction": "off", "x-scenario": "slow"}  # the upstream takes 3 s to answer
        response = stream(proxy_url, **headers)
    assert "x-inflight-keepalive" not in response.headers
    assert response.content == bytes(app.chat_requests()[0].sent)


def test_a_kept_alive_stream_asks_the_upstream_for_no_encoding(
    upstream: tuple[UpstreamApp, str], start_proxy: ProxyFactory
) -> None:
    app, url = upstream
    app.summarizer_delay = 1.0
    with start_proxy(url, **CONFIG) as proxy_url:
        response = stream(proxy_url, **{"accept-encoding": "gzip"})
    assert response.headers["x-inflight-keepalive"] == "1"
    assert app.chat_requests()[0].headers["accept-encoding"] == "identity"
