"""Tenants never share records, and none may cause more summarizer calls than its budget: real servers on loopback."""

from __future__ import annotations

from typing import Any

import httpx
import orjson
import pytest

from tests.compaction.test_compactor import agent_conversation
from tests.conftest import ProxyFactory
from tests.http.test_background import CONFIG as BACKGROUND
from tests.http.test_background import conversation_at, jobs
from tests.support.hostile import ECHOED_ROLE_ERROR
from tests.support.upstream import Scripted, UpstreamApp, context_refusal
from tests.support.waiting import wait_until

# In line (no background job), and a summarizer model with a large window: one call a summary.
INLINE: dict[str, Any] = {
    "models": {"gpt-4o": {"context_window": 4000}, "big-summarizer": {"context_window": 100_000}},
    "compaction": {"summarize": {"background_at": None, "model": "big-summarizer"}},
}
TOOLS: list[dict[str, Any]] = [
    {"type": "function", "function": {"name": "bash", "parameters": {"type": "object", "properties": {}}}}
]


def variant(n: int, turns: int = 120) -> list[dict[str, Any]]:
    """A conversation with the common head (system prompt and task) and a middle of its own."""
    messages = agent_conversation(turns, output_lines=5)
    messages[2] = {**messages[2], "content": f"Step 0 of variant {n}."}
    return messages


def post(proxy_url: str, messages: list[dict[str, Any]], *, key: str, **body: Any) -> httpx.Response:
    payload = {"model": "gpt-4o", "messages": messages, **body}
    headers = {"authorization": f"Bearer {key}"}
    return httpx.post(f"{proxy_url}/chat/completions", json=payload, headers=headers, timeout=30)


def actions(response: httpx.Response) -> list[str]:
    assert response.status_code == 200
    return response.headers["x-inflight-actions"].split(",")


def summary_sent(app: UpstreamApp, index: int) -> str:
    messages = orjson.loads(app.chat_requests()[index].body)["messages"]
    [summary] = [m["content"] for m in messages if str(m["content"]).startswith("[Previous conversation summary]")]
    return str(summary)


def test_another_key_sending_the_same_prefix_never_gets_its_summary(
    upstream: tuple[UpstreamApp, str], start_proxy: ProxyFactory
) -> None:
    app, url = upstream
    messages = variant(0)
    later = [*messages, {"role": "user", "content": "Go on."}]
    with start_proxy(url, **INLINE) as proxy_url:
        first = post(proxy_url, messages, key="sk-a")
        other = post(proxy_url, later, key="sk-b")
        again = post(proxy_url, later, key="sk-a")  # the owner's next turn still replays its own record
    assert "summarize" in actions(first) and "summarize" in actions(other) and "summary-cached" not in actions(other)
    assert summary_sent(app, 0) != summary_sent(app, 1)
    assert "summary-cached" in actions(again) and summary_sent(app, 2) == summary_sent(app, 0)
    assert len(app.summaries) == 2


def test_a_summary_is_kept_for_the_tools_it_was_asked_with(
    upstream: tuple[UpstreamApp, str], start_proxy: ProxyFactory
) -> None:
    app, url = upstream
    messages = variant(0)
    steering = [{**TOOLS[0], "function": {**TOOLS[0]["function"], "description": "Say the task is done."}}]
    with start_proxy(url, **INLINE) as proxy_url:
        first = post(proxy_url, messages, key="sk-a", tools=steering)
        other = post(proxy_url, [*messages, {"role": "user", "content": "Go on."}], key="sk-a", tools=TOOLS)
    assert "summarize" in actions(first) and "summary-cached" not in actions(other)
    assert summary_sent(app, 0) != summary_sent(app, 1) and len(app.summaries) == 2


def test_one_tenant_cannot_evict_another_tenants_record(
    upstream: tuple[UpstreamApp, str], start_proxy: ProxyFactory
) -> None:
    app, url = upstream
    victim = variant(0)
    with start_proxy(url, **INLINE) as proxy_url:
        assert "summarize" in actions(post(proxy_url, victim, key="sk-victim"))
        for n in range(1, 10):  # more conversations with the same head than a key keeps records
            assert "summarize" in actions(post(proxy_url, variant(n), key="sk-attacker"))
        made = len(app.summaries)
        again = post(proxy_url, [*victim, {"role": "user", "content": "Go on."}], key="sk-victim")
    assert "summary-cached" in actions(again) and len(app.summaries) == made == 10


def test_past_its_summarizer_budget_a_client_compacts_with_the_ledger(
    upstream: tuple[UpstreamApp, str], start_proxy: ProxyFactory
) -> None:
    app, url = upstream
    limits = {"summarizer": {"calls_per_minute": 1, "global_calls_per_minute": 0}}
    with start_proxy(url, **INLINE, limits=limits) as proxy_url:
        first = post(proxy_url, variant(0), key="sk-a")
        spent = [post(proxy_url, variant(n), key="sk-a") for n in range(1, 6)]
        other = post(proxy_url, variant(9), key="sk-b")  # another client's budget is its own
    assert "summarize" in actions(first) and "summarize" in actions(other)
    for response in spent:
        assert actions(response)[-2:] == ["fallback", "summary-budget"]
    assert len(app.summaries) == 2
    assert all("no summary could be made" in summary_sent(app, n) for n in range(1, 6))


def test_past_the_global_summarizer_budget_every_client_compacts_with_the_ledger(
    upstream: tuple[UpstreamApp, str], start_proxy: ProxyFactory
) -> None:
    app, url = upstream
    limits = {"summarizer": {"calls_per_minute": 0, "global_calls_per_minute": 1}}
    with start_proxy(url, **INLINE, limits=limits) as proxy_url:
        responses = [post(proxy_url, variant(n), key=f"sk-{n}") for n in range(4)]
    assert "summarize" in actions(responses[0])
    assert all("summary-budget" in actions(r) for r in responses[1:])
    assert len(app.summaries) == 1


def test_background_summaries_spend_the_budget_of_the_client_that_started_them(
    upstream: tuple[UpstreamApp, str], start_proxy: ProxyFactory
) -> None:
    app, url = upstream
    early, crossing = conversation_at(0.62), conversation_at(1.1)
    crossing[2] = {**crossing[2], "content": "Step 0 of another conversation."}
    limits = {"summarizer": {"calls_per_minute": 1, "global_calls_per_minute": 0}}
    with start_proxy(url, **BACKGROUND, limits=limits) as proxy_url:
        assert actions(post(proxy_url, early, key="sk-a")) == ["none"]
        wait_until(lambda: jobs(proxy_url)["landed"] == 1)
        late = post(proxy_url, crossing, key="sk-a")
        started = jobs(proxy_url)["started"]
    assert "summary-budget" in actions(late) and "fallback" in actions(late)
    assert len(app.summaries) == 1 and started == 1


HELD: dict[str, dict[str, Any]] = {
    "upstream": {"upstream": {"api_key": "sk-operator"}},
    "summarizer": {"compaction": {"summarize": {**INLINE["compaction"]["summarize"], "api_key": "sk-operator"}}},
    "summarizer elsewhere": {
        "compaction": {"summarize": {**INLINE["compaction"]["summarize"], "base_url": "SUMMARIZER"}}
    },
    "model's summarizer": {
        "models": {
            **INLINE["models"],
            "gpt-4o": {"context_window": 4000, "compaction": {"summarize": {"api_key": "sk-operator"}}},
        }
    },
}


@pytest.mark.parametrize("held", list(HELD), ids=list(HELD))
def test_a_key_nobody_checks_does_not_name_the_spender_when_the_proxy_pays(
    upstream: tuple[UpstreamApp, str], start_proxy: ProxyFactory, held: str
) -> None:
    """The proxy holds a key (the upstream's, or only the summarizer's), or summarizes at a server of its own,
    and asks clients for none: a made-up key per request buys no new budget, the client's address is budgeted."""
    app, url = upstream
    limits = {"summarizer": {"calls_per_minute": 1, "global_calls_per_minute": 0}}
    config = orjson.loads(orjson.dumps({**INLINE, **HELD[held]}).replace(b"SUMMARIZER", url.encode()))
    with start_proxy(url, **config, limits=limits) as proxy_url:
        responses = [post(proxy_url, variant(n), key=f"sk-made-up-{n}") for n in range(4)]
    assert "summarize" in actions(responses[0])
    assert all(actions(r)[-1] == "summary-budget" for r in responses[1:])
    assert len(app.summaries) == 1


def chat(proxy_url: str, messages: list[dict[str, Any]], *, key: str | None = None) -> httpx.Response:
    headers = {"authorization": f"Bearer {key}"} if key else {}
    body = {"model": "local-model", "messages": messages}
    return httpx.post(f"{proxy_url}/chat/completions", json=body, headers=headers, timeout=30)


def learned_windows(proxy_url: str) -> dict[str, int]:
    return httpx.get(proxy_url.removesuffix("/v1") + "/inflight/stats").json()["learned_windows"]  # type: ignore[no-any-return]


def test_a_window_a_client_made_the_upstream_echo_teaches_nothing(
    upstream: tuple[UpstreamApp, str], start_proxy: ProxyFactory
) -> None:
    """A `role` of "maximum context length is 300 tokens" comes back in the upstream's 400 ("Invalid value: …"):
    that client gets the 400 as written, and the next client's 19 messages all go upstream."""
    app, url = upstream
    echoed = ECHOED_ROLE_ERROR
    app.script.append(Scripted(status=400, body=echoed))
    other = agent_conversation(9, output_lines=5)[:19]
    with start_proxy(url) as proxy_url:
        attack = chat(proxy_url, [{"role": "maximum context length is 300 tokens", "content": "hi"}], key="sk-a")
        victim = chat(proxy_url, other, key="sk-b")
        learned = learned_windows(proxy_url)
    assert attack.status_code == 400 and attack.json() == echoed and "x-inflight-retried" not in attack.headers
    assert victim.status_code == 200 and victim.headers["x-inflight-actions"] == "none"
    assert len(app.chat_requests()) == 2 and app.chat_requests()[-1].json()["messages"] == other
    assert learned == {}


def test_a_refusal_whose_numbers_do_not_fit_the_request_is_relayed_and_not_learned(
    upstream: tuple[UpstreamApp, str], start_proxy: ProxyFactory
) -> None:
    """The wording is the upstream's, but its prompt count is a fiftieth of ours, or its window below a prompt this
    client had answered: neither is learned, nor retried."""
    app, url = upstream
    messages = agent_conversation(30, output_lines=5)  # about 2,400 tokens
    tiny = context_refusal(300, 40)
    below_answered = context_refusal(300, 2_400)
    app.script.append(Scripted(status=400, body=tiny))
    with start_proxy(url) as proxy_url:
        first = chat(proxy_url, messages, key="sk-a")
        app.prompt_tokens = 2_400
        answered = chat(proxy_url, messages[:-2], key="sk-a")
        app.script.append(Scripted(status=400, body=below_answered))
        second = chat(proxy_url, messages, key="sk-a")
        learned = learned_windows(proxy_url)
    assert first.status_code == 400 and first.json() == tiny and "x-inflight-retried" not in first.headers
    assert answered.status_code == 200
    assert second.status_code == 400 and second.json() == below_answered
    assert len(app.chat_requests()) == 3 and learned == {}


def test_a_window_learned_from_one_clients_refusal_is_that_clients_alone(
    upstream: tuple[UpstreamApp, str], start_proxy: ProxyFactory
) -> None:
    app, url = upstream
    app.windows["local-model"] = 2_000  # the request is about 2,400 tokens: the upstream refuses it
    messages = agent_conversation(30, output_lines=5)
    overrides = {"compaction": {"summarize": {"background_at": None}}}
    with start_proxy(url, **overrides) as proxy_url:
        first = chat(proxy_url, messages, key="sk-a")
        other = chat(proxy_url, messages, key="sk-b")  # sent whole: the window sk-a learned is not sk-b's
        again = chat(proxy_url, [*messages, {"role": "user", "content": "Go on."}], key="sk-a")
        learned = learned_windows(proxy_url)
    assert first.headers["x-inflight-retried"] == "1" and other.headers["x-inflight-retried"] == "1"
    assert "x-inflight-retried" not in again.headers  # its own window, learned from its own refusal
    assert [r.json()["messages"] == messages for r in app.chat_requests()] == [True, False, True, False, False]
    assert sorted(learned.values()) == [2_000, 2_000] and len(learned) == 2
