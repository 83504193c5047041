"""Compaction through the proxy: what the upstream receives, what the client is told, turn after turn."""

from __future__ import annotations

import logging
import re
from typing import Any

import httpx
import openai
import orjson
import pytest

from inflight.compaction.conversation import problems
from inflight.tokens import TokenCounter
from tests.compaction.test_compactor import agent_conversation
from tests.conftest import ProxyFactory
from tests.support.logs import log_lines
from tests.support.servers import serve
from tests.support.upstream import UpstreamApp

WINDOW = {"models": {"gpt-4o": {"context_window": 4000}}}  # budget 3000 (reserve: a quarter)


def post(proxy_url: str, messages: list[dict[str, Any]], **headers: str) -> httpx.Response:
    body = {"model": "gpt-4o", "messages": messages}
    return httpx.post(f"{proxy_url}/chat/completions", json=body, headers=headers, timeout=30)


def sent_messages(app: UpstreamApp) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = app.chat_requests()[-1].json()["messages"]
    return messages


def test_a_long_conversation_is_compacted_to_fit_and_stays_valid(
    upstream: tuple[UpstreamApp, str], start_proxy: ProxyFactory
) -> None:
    app, url = upstream
    messages = agent_conversation(120, output_lines=5)
    with start_proxy(url, **WINDOW) as proxy_url:
        client = openai.OpenAI(base_url=proxy_url, api_key="sk-test", max_retries=0)
        raw = client.chat.completions.with_raw_response.create(model="gpt-4o", messages=messages)  # type: ignore[arg-type]
    assert raw.http_response.status_code == 200
    assert raw.headers["x-inflight-actions"].split(",")[-1] == "summarize"
    assert int(raw.headers["x-inflight-tokens-after"]) <= 3000 < int(raw.headers["x-inflight-tokens-before"])
    sent = sent_messages(app)
    assert problems(sent) == []
    assert sent[:2] == messages[:2] and sent[2]["content"].startswith("[Previous conversation summary]\n## Task")
    # A 4,000-token summarizer cannot read 9,000 tokens at once: it rolls a summary over chunks.
    assert 1 < len(app.summaries) <= 6
    assert app.summaries[0].headers["authorization"] == "Bearer sk-test"  # the client's own key by default


def test_the_next_turn_reuses_the_record_byte_for_byte(
    upstream: tuple[UpstreamApp, str], start_proxy: ProxyFactory
) -> None:
    app, url = upstream
    messages = agent_conversation(120, output_lines=5)
    with start_proxy(url, **WINDOW) as proxy_url:
        first = post(proxy_url, messages)
        summaries = len(app.summaries)
        first_sent = app.chat_requests()[-1].body
        messages = agent_conversation(121, output_lines=5)
        second = post(proxy_url, messages)
    assert second.headers["x-inflight-actions"] == "summary-cached"  # the summary reached the floor: no mask
    assert len(app.summaries) == summaries
    # The rewritten prefix is byte-identical, so the upstream's prompt cache keeps hitting.
    second_sent = app.chat_requests()[-1].body
    prefix = first_sent[: first_sent.index(b"]", first_sent.rindex(b'"tool_call_id"'))]
    assert second_sent.startswith(prefix[: len(prefix) - 200])
    assert first.status_code == second.status_code == 200


def test_a_summarizer_failure_falls_back_and_says_so(
    upstream: tuple[UpstreamApp, str], start_proxy: ProxyFactory
) -> None:
    app, url = upstream
    app.summarizer_status = 503
    with start_proxy(url, **WINDOW) as proxy_url:
        response = post(proxy_url, agent_conversation(120, output_lines=5))
    assert response.status_code == 200
    assert "fallback" in response.headers["x-inflight-actions"]
    sent = sent_messages(app)
    assert "earlier messages were dropped" in sent[2]["content"]
    assert problems(sent) == []


def test_fallback_models_are_tried_before_the_local_digest(
    upstream: tuple[UpstreamApp, str], start_proxy: ProxyFactory
) -> None:
    app, url = upstream
    compaction = {"summarize": {"model": "missing-model", "fallback_models": ["gpt-4o-mini"]}}
    app.summarizer_status = 200
    with start_proxy(url, compaction=compaction, **WINDOW) as proxy_url:
        app.script.clear()
        response = post(proxy_url, agent_conversation(120, output_lines=5))
    assert response.status_code == 200
    assert {r.json()["model"] for r in app.summaries} == {"missing-model"}  # it answered: no fallback needed
    assert response.headers["x-inflight-actions"].endswith("summarize")


def test_compaction_off_forwards_the_exact_bytes_and_force_compacts_a_small_request(
    upstream: tuple[UpstreamApp, str], start_proxy: ProxyFactory
) -> None:
    app, url = upstream
    messages = agent_conversation(120, output_lines=5)
    body = orjson.dumps({"model": "gpt-4o", "messages": messages})
    with start_proxy(url, **WINDOW) as proxy_url:
        off = httpx.post(
            f"{proxy_url}/chat/completions", content=body, headers={"x-inflight-compaction": "off"}, timeout=30
        )
        assert app.chat_requests()[-1].body == body
        assert off.headers["x-inflight-actions"] == "none"
        forced = post(proxy_url, agent_conversation(8, output_lines=5), **{"x-inflight-compaction": "force"})
    assert forced.headers["x-inflight-actions"] != "none"
    assert int(forced.headers["x-inflight-tokens-after"]) < int(forced.headers["x-inflight-tokens-before"])


def test_a_request_that_cannot_fit_is_sent_as_compacted_and_the_upstream_answers(
    start_proxy: ProxyFactory,
) -> None:
    # Fail open: only the upstream knows its limit for sure. The client gets the upstream's own
    # refusal, byte for byte, and no retry is spent on what cannot shrink further.
    app = UpstreamApp(windows={"gpt-4o": 4000})
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "rule " * 5000}]
    with serve(app) as url, start_proxy(url + "/v1", **WINDOW) as proxy_url:
        response = httpx.post(f"{proxy_url}/chat/completions", json={"model": "gpt-4o", "messages": messages})
    [sent] = app.chat_requests()
    assert response.status_code == 400 and response.content == bytes(sent.sent)
    assert response.json()["error"]["code"] == "context_length_exceeded"
    assert "retry" not in response.headers["x-inflight-actions"]


def test_sessions_key_records_apart(upstream: tuple[UpstreamApp, str], start_proxy: ProxyFactory) -> None:
    app, url = upstream
    messages = agent_conversation(120, output_lines=5)
    with start_proxy(url, **WINDOW) as proxy_url:
        post(proxy_url, messages, **{"x-inflight-session": "a"})
        per_compaction = len(app.summaries)
        post(proxy_url, messages, **{"x-inflight-session": "b"})  # another session: its own summary
        assert len(app.summaries) == 2 * per_compaction
        again = post(proxy_url, messages, **{"x-inflight-session": "a"})
    assert len(app.summaries) == 2 * per_compaction
    assert again.headers["x-inflight-actions"].startswith("summary-cached")


def test_a_models_entry_overrides_compaction_and_encoding_for_matching_models(
    upstream: tuple[UpstreamApp, str], start_proxy: ProxyFactory
) -> None:
    app, url = upstream
    messages = agent_conversation(120, output_lines=5)
    messages.append({"role": "user", "content": "检查数据库连接池的配置，然后重新运行测试。" * 20})  # noqa: RUF001
    models = {
        "gpt-4o": {"context_window": 4000},  # exact name: wins over the glob below
        "gpt-4*": {"context_window": 4000, "encoding": "cl100k_base", "compaction": {"enabled": False}},
    }
    with start_proxy(url, models=models) as proxy_url:
        compacted = post(proxy_url, messages)
        body = {"model": "gpt-4o-mini", "messages": messages}
        untouched = httpx.post(f"{proxy_url}/chat/completions", json=body, timeout=30)
    assert compacted.headers["x-inflight-actions"].split(",")[-1] == "summarize"
    # The glob's compaction block turns compaction off: the overlong request goes upstream as sent.
    assert untouched.headers["x-inflight-actions"] == "none"
    assert app.chat_requests()[-1].json()["messages"] == messages
    # Its `encoding:` counts gpt-4o-mini with cl100k_base, not the o200k_base of its family.
    counter = TokenCounter()
    cl100k, o200k = (counter.count_request(body, name).total for name in ("cl100k_base", "o200k_base"))
    assert cl100k != o200k
    assert int(untouched.headers["x-inflight-prompt-tokens"]) == cl100k


def test_each_request_logs_one_line_with_its_budget_and_its_compaction(
    upstream: tuple[UpstreamApp, str], start_proxy: ProxyFactory, caplog: pytest.LogCaptureFixture
) -> None:
    _, url = upstream
    with caplog.at_level(logging.INFO, logger="inflight"), start_proxy(url, **WINDOW) as proxy_url:
        response = post(proxy_url, agent_conversation(120, output_lines=5), **{"x-inflight-session": "s-1"})
        [line] = log_lines(caplog, "POST /v1/chat/completions")
    before, after = response.headers["x-inflight-tokens-before"], response.headers["x-inflight-tokens-after"]
    assert line.startswith("POST /v1/chat/completions 200 model=gpt-4o ")
    assert f" tokens={before}/3000 window=4000 source=config " in line
    assert f" compacted={before}->{after}/3000 key=session:s-1 " in line
    assert re.search(r" actions=[a-z,-]*summarize[a-z,-]* ", line), line
    assert re.search(r" replaced=\d+ summarizer_calls=[1-9]\d* summarizer_ms=\d+ ", line), line
    assert re.search(r" upstream_ms=[\d.]+ total_ms=[\d.]+$", line), line


def test_a_max_tokens_as_large_as_the_window_is_not_the_prompts_fault(
    upstream: tuple[UpstreamApp, str], start_proxy: ProxyFactory
) -> None:
    app, url = upstream
    body = {"model": "gpt-4o", "max_tokens": 4000, "messages": agent_conversation(40, output_lines=5)}
    raw = orjson.dumps(body)
    with start_proxy(url, **WINDOW) as proxy_url:
        response = httpx.post(
            f"{proxy_url}/chat/completions", content=raw, headers={"content-type": "application/json"}
        )
    assert response.status_code == 200
    assert app.chat_requests()[-1].body == raw  # forwarded as sent, not compacted to nothing
    assert response.headers["x-inflight-actions"] == "none" and response.headers["x-inflight-budget"] == "0"
