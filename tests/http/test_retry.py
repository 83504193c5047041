"""Context-length refusals: recognised from each upstream, learned from, and retried exactly once."""

from __future__ import annotations

import re
from typing import Any

import httpx
import openai
import orjson
import pytest

from inflight.compaction.summary_job import SUMMARY_PREFIX
from inflight.policy.refusals import detect, detect_event
from tests.compaction.test_compactor import agent_conversation
from tests.conftest import ProxyFactory
from tests.fixtures.refusals import NOT_REFUSALS, REFUSALS, Fixture
from tests.support.params import as_params
from tests.support.upstream import Scripted, UpstreamApp

MESSAGES = agent_conversation(30, output_lines=5)  # about 2,400 tokens


def raw(fixture: Fixture) -> bytes:
    return fixture.body if isinstance(fixture.body, bytes) else orjson.dumps(fixture.body)


def fitted(fixture: Fixture, sent: int) -> tuple[bytes, int | None]:
    """The fixture's body with its numbers those of a refusal of a request of `sent` tokens (the upstream's real
    refusal of this request would name them), and the window it then names."""
    body = raw(fixture)
    window = sent * 3 // 4 if fixture.window else None
    for number, replacement in ((fixture.prompt, sent), (fixture.window, window)):
        if number is not None and replacement is not None:
            body = re.sub(rb"\b%d\b" % number, b"%d" % replacement, body)
    return body, window


@pytest.mark.parametrize("fixture", REFUSALS, ids=lambda f: f.name)
def test_each_upstreams_refusal_is_recognised_with_its_numbers(fixture: Fixture) -> None:
    refusal = detect(fixture.status, raw(fixture))
    assert refusal is not None
    assert (refusal.context_window, refusal.prompt_tokens) == (fixture.window, fixture.prompt)


@pytest.mark.parametrize("fixture", NOT_REFUSALS, ids=lambda f: f.name)
def test_other_errors_are_not_refusals(fixture: Fixture) -> None:
    assert detect(fixture.status, raw(fixture)) is None


def test_an_error_event_is_a_refusal_and_a_content_event_is_not() -> None:
    error = orjson.dumps(REFUSALS[0].body)
    assert detect_event(b"data: " + error) is not None
    assert detect_event(b'data: {"choices":[{"delta":{"content":"error: context length"}}]}') is None


def chat(proxy_url: str, *, stream: bool = False, model: str = "local-model") -> httpx.Response:
    body: dict[str, Any] = {"model": model, "messages": MESSAGES, "stream": stream}
    return httpx.post(f"{proxy_url}/chat/completions", json=body, timeout=30)


def stats(proxy_url: str) -> dict[str, Any]:
    return httpx.get(proxy_url.removesuffix("/v1") + "/inflight/stats").json()  # type: ignore[no-any-return]


@pytest.mark.parametrize("fixture", REFUSALS, ids=lambda f: f.name)
def test_a_refusal_is_retried_once_and_the_client_sees_success(
    fixture: Fixture, upstream: tuple[UpstreamApp, str], start_proxy: ProxyFactory
) -> None:
    app, url = upstream
    body, window = fitted(fixture, sent_tokens(orjson.dumps({"model": "local-model", "messages": MESSAGES})))
    app.script.append(Scripted(status=fixture.status, body=body))
    with start_proxy(url) as proxy_url:
        response = chat(proxy_url)
        learned = stats(proxy_url)["learned_windows"]
    assert response.status_code == 200, response.text
    assert response.json()["object"] == "chat.completion"
    assert response.headers["x-inflight-retried"] == "1"
    assert response.headers["x-inflight-actions"].endswith("retry")
    first, second = app.chat_requests()
    assert len(second.json()["messages"]) < len(first.json()["messages"]) or second.body != first.body
    assert learned == ({":local-model": window} if window else {})  # the client's (here: no key) and model's


@pytest.mark.parametrize("fixture", NOT_REFUSALS, ids=lambda f: f.name)
def test_other_errors_pass_through_at_once(
    fixture: Fixture, upstream: tuple[UpstreamApp, str], start_proxy: ProxyFactory
) -> None:
    app, url = upstream
    app.script.append(Scripted(status=fixture.status, body=raw(fixture)))
    with start_proxy(url) as proxy_url:
        response = chat(proxy_url)
    assert response.status_code == fixture.status
    assert response.content == raw(fixture)
    assert "x-inflight-retried" not in response.headers
    assert len(app.chat_requests()) == 1


def test_a_second_refusal_reaches_the_client_unchanged(
    upstream: tuple[UpstreamApp, str], start_proxy: ProxyFactory
) -> None:
    app, url = upstream
    second = raw(REFUSALS[1])
    app.script.extend([Scripted(status=400, body=raw(REFUSALS[0])), Scripted(status=400, body=second)])
    with start_proxy(url) as proxy_url:
        client = openai.OpenAI(base_url=proxy_url, api_key="sk-test", max_retries=0)
        with pytest.raises(openai.BadRequestError) as caught:
            client.chat.completions.create(model="local-model", messages=MESSAGES)  # type: ignore[arg-type]
    assert caught.value.response.content == second
    assert caught.value.response.headers["x-inflight-retried"] == "1"
    assert len(app.chat_requests()) == 2


def test_an_empty_stream_is_a_refusal_and_the_retry_streams(
    upstream: tuple[UpstreamApp, str], start_proxy: ProxyFactory
) -> None:
    app, url = upstream
    app.script.append(Scripted(events=[]))  # llama-cpp-python: 200, and no event at all
    with start_proxy(url) as proxy_url:
        client = openai.OpenAI(base_url=proxy_url, api_key="sk-test", max_retries=0)
        stream = client.chat.completions.create(model="local-model", messages=as_params(MESSAGES), stream=True)
        chunks = list(stream)
    assert chunks and chunks[-1].choices[0].finish_reason == "tool_calls"
    assert len(app.chat_requests()) == 2
    # The retried stream reaches the client byte for byte.
    assert app.chat_requests()[-1].sent.count(b"data: ") == len(chunks) + 1  # + [DONE]


def test_an_error_as_first_event_is_retried_but_a_late_error_is_passed_on(
    upstream: tuple[UpstreamApp, str], start_proxy: ProxyFactory
) -> None:
    app, url = upstream
    error = REFUSALS[5].body
    app.script.append(Scripted(events=[error, "[DONE]"]))
    with start_proxy(url) as proxy_url:
        retried = chat(proxy_url, stream=True)
        assert retried.headers["x-inflight-retried"] == "1"
        assert len(app.chat_requests()) == 2
        content = {"id": "c", "object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {"content": "x"}}]}
        app.script.append(Scripted(events=[content, error, "[DONE]"]))
        late = chat(proxy_url, stream=True)
    assert "x-inflight-retried" not in late.headers
    assert late.content == app.chat_requests()[-1].sent
    assert len(app.chat_requests()) == 3


def test_compaction_off_is_never_retried(upstream: tuple[UpstreamApp, str], start_proxy: ProxyFactory) -> None:
    app, url = upstream
    app.script.append(Scripted(status=400, body=raw(REFUSALS[0])))
    with start_proxy(url) as proxy_url:
        body = {"model": "local-model", "messages": MESSAGES}
        response = httpx.post(f"{proxy_url}/chat/completions", json=body, headers={"x-inflight-compaction": "off"})
    assert response.status_code == 400
    assert len(app.chat_requests()) == 1


def without_summary_text(request_body: bytes) -> list[Any]:
    """The messages sent, the summary's text left out (the fake summarizer numbers its summaries)."""
    messages = orjson.loads(request_body)["messages"]
    return [{**m, "content": "summary"} if str(m.get("content")).startswith(SUMMARY_PREFIX) else m for m in messages]


def sent_tokens(request_body: bytes) -> int:
    from inflight.tokens import TokenCounter

    return TokenCounter().count_request(orjson.loads(request_body), "o200k_base").total


def test_a_refusal_without_numbers_is_retried_at_three_quarters_of_what_was_sent_not_less(
    upstream: tuple[UpstreamApp, str], start_proxy: ProxyFactory
) -> None:
    app, url = upstream
    no_numbers = next(f for f in REFUSALS if f.name == "azure-code-only")
    app.script.append(Scripted(status=no_numbers.status, body=raw(no_numbers)))
    with start_proxy(url, models={"local-model": {"encoding": "o200k_base"}}) as proxy_url:
        response = chat(proxy_url)
    assert response.status_code == 200, response.text
    first, second = (sent_tokens(r.body) for r in app.chat_requests())
    # One shrink (0.75 of what was refused), not the compaction target on top of it (0.5 x 0.75 on the old main).
    assert 0.6 * first < second <= 0.75 * first


def test_a_refusal_naming_the_window_is_retried_as_if_the_window_had_been_known(
    upstream: tuple[UpstreamApp, str], start_proxy: ProxyFactory
) -> None:
    app, url = upstream
    app.windows["local-model"] = 2_000  # the request is about 2,400 tokens; the proxy believes in 128k
    overrides: dict[str, Any] = {"models": {"local-model": {"encoding": "o200k_base"}}}
    # Summaries made on the turn (a retry starts no background job: the known proxy's first turn would wait for one).
    overrides["compaction"] = {"reserve_tokens": 0, "summarize": {"background_at": None}}
    with start_proxy(url, **overrides) as proxy_url:
        response = chat(proxy_url)
        learned = stats(proxy_url)["learned_windows"]
    assert response.status_code == 200, response.text
    assert learned == {":local-model": 2_000}
    overrides["models"]["local-model"]["context_window"] = 2_000
    with start_proxy(url, **overrides) as proxy_url:  # a proxy told the window from the start
        assert chat(proxy_url).status_code == 200
    refused, retried, known = app.chat_requests()
    # No factor on top of what the window gives: the retry is what a proxy knowing the window sends.
    assert sent_tokens(refused.body) > 2_000
    assert without_summary_text(retried.body) == without_summary_text(known.body)
