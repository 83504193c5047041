"""`compaction.goal` through the proxy: `cost` compacts a conversation long before `prune_at` when that bills less,
keeping the agent's recent work verbatim; `fit` sends it as the client sent it until the window needs it."""

from __future__ import annotations

from typing import Any

import httpx
import orjson

from tests.compaction.test_compactor import agent_conversation
from tests.conftest import ProxyFactory
from tests.support.upstream import UpstreamApp

WINDOW = {"models": {"gpt-4o": {"context_window": 200_000}}}  # budget 183,616: prune_at at about 128k


def conversation() -> list[dict[str, Any]]:
    """About 60k tokens: 60 steps of about a thousand tokens each, far below `prune_at` at this window."""
    return agent_conversation(60, output_lines=100)


def post(proxy_url: str, body: bytes, **headers: str) -> httpx.Response:
    headers = {"content-type": "application/json", **headers}
    return httpx.post(f"{proxy_url}/chat/completions", content=body, headers=headers, timeout=60)


def test_goal_fit_sends_a_request_below_prune_at_as_the_client_sent_it(
    upstream: tuple[UpstreamApp, str], start_proxy: ProxyFactory
) -> None:
    app, url = upstream
    body = orjson.dumps({"model": "gpt-4o", "messages": conversation()})
    with start_proxy(url, **WINDOW, compaction={"goal": "fit"}) as proxy_url:
        configured = post(proxy_url, body)
        configured_sent = app.chat_requests()[-1].body
    with start_proxy(url, **WINDOW) as proxy_url:
        asked = post(proxy_url, body, **{"x-inflight-goal": "fit"})
        asked_sent = app.chat_requests()[-1].body
    assert configured.status_code == asked.status_code == 200
    assert configured_sent == asked_sent == body
    assert "x-inflight-actions" not in asked.headers or asked.headers["x-inflight-actions"] == "none"


def test_goal_cost_compacts_early_and_keeps_the_task_and_the_newest_work_verbatim(
    upstream: tuple[UpstreamApp, str], start_proxy: ProxyFactory
) -> None:
    app, url = upstream
    messages = conversation()
    body = orjson.dumps({"model": "gpt-4o", "messages": messages})
    with start_proxy(url, **WINDOW) as proxy_url:
        response = post(proxy_url, body)
    assert response.status_code == 200
    assert "mask" in response.headers["x-inflight-actions"]
    after, before = int(response.headers["x-inflight-tokens-after"]), int(response.headers["x-inflight-tokens-before"])
    assert after < before / 2
    sent = app.chat_requests()[-1].json()["messages"]
    assert sent[:2] == messages[:2]  # the system prompt and the task
    results = [m for m in messages if m["role"] == "tool"]
    for result in results[-5:]:  # the newest five outputs, with their calls
        assert result in sent
        call = next(m for m in messages if m.get("tool_calls") and m["tool_calls"][0]["id"] == result["tool_call_id"])
        assert call in sent
    sent_calls = {m["tool_calls"][0]["id"] for m in sent if m.get("tool_calls")}
    summary = next((m for m in sent if str(m.get("content", "")).startswith("[Previous conversation summary]")), None)
    for call in (m["tool_calls"][0] for m in messages if m.get("tool_calls")):
        named = summary is not None and f"n={call['function']['arguments']}" in str(summary["content"])
        assert call["id"] in sent_calls or named  # every earlier call is there, or named by the ledger


def test_a_goal_header_that_is_neither_cost_nor_fit_is_refused(
    upstream: tuple[UpstreamApp, str], start_proxy: ProxyFactory
) -> None:
    _, url = upstream
    body = orjson.dumps({"model": "gpt-4o", "messages": conversation()[:4]})
    with start_proxy(url, **WINDOW) as proxy_url:
        response = post(proxy_url, body, **{"x-inflight-goal": "cheap"})
    assert response.status_code == 400
    assert response.json()["error"]["param"] == "x-inflight-goal"


def test_stats_count_the_rewrites_per_conversation(
    upstream: tuple[UpstreamApp, str], start_proxy: ProxyFactory
) -> None:
    _, url = upstream
    with start_proxy(url, **WINDOW) as proxy_url:
        for steps in (20, 60, 61):  # sent as it came, then compacted (a rewrite), then that fold replayed
            body = orjson.dumps({"model": "gpt-4o", "messages": agent_conversation(steps, output_lines=100)})
            assert post(proxy_url, body).status_code == 200
        stats = httpx.get(proxy_url.removesuffix("/v1") + "/inflight/stats").json()["rewrites"]
    assert stats["conversations"] == stats["rewritten_conversations"] == 1
    assert stats["turns"] == 3 and stats["rewrites"] == stats["most_in_one_conversation"] == 1
