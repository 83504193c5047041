"""What a turn costs at the upstream's prices, said per turn and per conversation; and the reply's reserve learned
from the answers where `max_tokens` does not count against the window."""

from __future__ import annotations

import logging
import re

import anthropic
import httpx
import pytest

from tests.compaction.test_compactor import agent_conversation
from tests.conftest import ProxyFactory
from tests.http.test_archive import archived
from tests.http.test_metrics import scrape_when
from tests.support.logs import log_lines
from tests.support.upstream import UpstreamApp

WINDOW = {"models": {"gpt-4o": {"context_window": 4000}}}  # budget 3000: the conversation outgrows it
COST = re.compile(r" cached=[\d.]+(?: rewrite=1)? cost=(\d+) cost_client=(\d+) ")


def test_each_turn_logs_its_estimated_cost_beside_what_the_clients_request_would_have_cost(
    upstream: tuple[UpstreamApp, str], start_proxy: ProxyFactory, caplog: pytest.LogCaptureFixture
) -> None:
    _, url = upstream
    turns = range(6, 40)
    with caplog.at_level(logging.INFO, logger="inflight"), start_proxy(url, **WINDOW) as proxy_url:
        with httpx.Client(base_url=proxy_url, timeout=30) as http:
            responses = [
                http.post("/chat/completions", json={"model": "gpt-4o", "messages": agent_conversation(n)})
                for n in turns
            ]
        lines = log_lines(caplog, "POST /v1/chat/completions", count=len(turns))
        base = proxy_url.removesuffix("/v1")
        metrics = scrape_when(base, lambda s: s.get("inflight_cost_units_total", side="client") > 0)
    costs = []
    for response, line in zip(responses, lines, strict=True):
        found = COST.search(line)
        assert found is not None, line
        cost, client = int(found[1]), int(found[2])
        if response.headers["x-inflight-actions"] == "none":
            assert cost == client, line  # sent as it came: the same prompt, the same bill
        costs.append((cost, client))
    assert any(cost < client for cost, client in costs)  # what compaction sent costs less than the request
    assert sum(cost for cost, _ in costs) < sum(client for _, client in costs)
    sent_units, client_units = (metrics.get("inflight_cost_units_total", side=side) for side in ("sent", "client"))
    assert sent_units == sum(cost for cost, _ in costs) and client_units == sum(c for _, c in costs)


def test_an_anthropic_cache_write_costs_more_than_an_openai_one(
    upstream: tuple[UpstreamApp, str], start_proxy: ProxyFactory, caplog: pytest.LogCaptureFixture
) -> None:
    """A first turn is all written: 1.25 an input token on the Messages API, 1 on Chat Completions; `pricing:`
    changes it."""
    _, url = upstream
    pricing = {"formats": {"chat_completions": {"cache_write": 2.0}}}
    with caplog.at_level(logging.INFO, logger="inflight"), start_proxy(url, pricing=pricing) as proxy_url:
        chat = httpx.post(
            f"{proxy_url}/chat/completions", json={"model": "gpt-4o", "messages": agent_conversation(3)}, timeout=30
        )
        client = anthropic.Anthropic(base_url=proxy_url.removesuffix("/v1"), api_key="sk-ant", max_retries=0)
        message = client.messages.with_raw_response.create(
            model="claude-opus-5-5", max_tokens=100, messages=[{"role": "user", "content": "hello " * 200}]
        )
        [chat_line] = log_lines(caplog, "POST /v1/chat/completions")
        [messages_line] = log_lines(caplog, "POST /v1/messages")
    for line, response, price in ((chat_line, chat.headers, 2.0), (messages_line, message.headers, 1.25)):
        found = COST.search(line)
        assert found is not None, line
        assert int(found[1]) == round(int(response["x-inflight-tokens-after"]) * price), line


def test_the_reply_reserve_follows_the_answers_where_max_tokens_is_not_binding(
    upstream: tuple[UpstreamApp, str], start_proxy: ProxyFactory
) -> None:
    """Claude Code asks `max_tokens` of 32k on every request: the budget first keeps the configured reserve (a
    quarter of the window at most), then, once answers were seen, what they needed (at least 4,096 tokens)."""
    _, url = upstream
    models = {"claude-opus-5-5": {"context_window": 40_000}}
    with start_proxy(url, models=models) as proxy_url:
        client = anthropic.Anthropic(base_url=proxy_url.removesuffix("/v1"), api_key="sk-ant", max_retries=0)
        budgets = [budget(client, f"turn {n}") for n in range(5)]
        other = anthropic.Anthropic(base_url=proxy_url.removesuffix("/v1"), api_key="sk-ant-other", max_retries=0)
        theirs = budget(other, "hello")
    assert budgets[:3] == [30_000] * 3  # a quarter of the window kept for the reply: no answer seen yet
    assert budgets[3:] == [40_000 - 4_096] * 2  # answers of 20 tokens: the least reserve
    assert theirs == 30_000  # another client's answers are its own


def budget(client: anthropic.Anthropic, text: str) -> int:
    """The budget inflight gave a streamed request asking `max_tokens` 32,000 (as Claude Code asks), read to its end."""
    with client.messages.with_streaming_response.create(
        model="claude-opus-5-5", max_tokens=32_000, messages=[{"role": "user", "content": text}], stream=True
    ) as response:
        for _ in response.iter_lines():
            pass
        return int(response.headers["x-inflight-budget"])


def conversation(task: str, turns: int) -> list[dict[str, object]]:
    """A Responses-API conversation: the task, then `turns` shell calls with their outputs (about 400 tokens each)."""
    items: list[dict[str, object]] = [{"type": "message", "role": "user", "content": task}]
    for n in range(turns):
        call = f"call_{n}"
        items.append({"type": "function_call", "call_id": call, "name": "shell", "arguments": f'{{"cmd": "cat {n}"}}'})
        output = "\n".join(f"file_{n}.py line {i}: nothing to change here" for i in range(40))
        items.append({"type": "function_call_output", "call_id": call, "output": output})
    return items


def test_a_refusal_without_numbers_is_met_once_per_client_and_model(
    upstream: tuple[UpstreamApp, str], start_proxy: ProxyFactory
) -> None:
    """The Responses API refuses without numbers ("Your input exceeds the context window"): the first refusal
    brackets the window, and that client's later turns, and its next conversation, are compacted below it; a
    client with another key has its own bracket, and meets its own first refusal."""
    app, url = upstream
    app.responses.windows["gpt-5.1-codex"] = 8_000

    def converse(client: httpx.Client, task: str) -> list[httpx.Response]:
        return [
            client.post("/responses", json={"model": "gpt-5.1-codex", "input": conversation(task, turns)})
            for turns in range(2, 40, 2)
        ]

    with start_proxy(url) as proxy_url:
        with httpx.Client(base_url=proxy_url, timeout=30, headers={"authorization": "Bearer sk-one"}) as one:
            first = converse(one, "Fix the parser.")
            refused_first = app.responses.refused
            second = converse(one, "Fix the lexer.")
        assert refused_first == 1 and app.responses.refused == 1  # one refusal, then none
        with httpx.Client(base_url=proxy_url, timeout=30, headers={"authorization": "Bearer sk-two"}) as two:
            other = converse(two, "Fix the parser.")
    assert all(r.status_code == 200 for r in [*first, *second, *other])
    assert [r.headers.get("x-inflight-retried") for r in first].count("1") == 1
    assert not any(r.headers.get("x-inflight-retried") for r in second)
    assert app.responses.refused == 2  # the other key met its own first refusal


def test_the_archive_says_where_the_next_compaction_comes_and_what_each_turn_cost(
    upstream: tuple[UpstreamApp, str], start_proxy: ProxyFactory
) -> None:
    """Scheduled by cost with `goal: fit`, a turn past `prune_at` that went as it came is archived with the point
    its compaction waits for, not the configured one it passed; every turn with its cost beside what the client's
    request would have cost, and the conversation with their totals (without inflight, of the turns that fit)."""
    _, url = upstream
    turns = range(2, 30)
    with start_proxy(url, **WINDOW, archive={"enabled": True}, compaction={"goal": "fit"}) as proxy_url:
        with httpx.Client(base_url=proxy_url, timeout=30, headers={"x-inflight-session": "s-1"}) as http:
            for n in turns:
                messages = agent_conversation(n, output_lines=20)  # about 300 tokens a turn
                http.post("/chat/completions", json={"model": "gpt-4o", "messages": messages})
        listed = archived(proxy_url, "/inflight/conversations", until=lambda j: j["conversations"])
        conversation_id = listed["conversations"][0]["id"]
        view = archived(
            proxy_url, f"/inflight/conversations/{conversation_id}", until=lambda j: len(j["turns"]) == len(turns)
        )
    waited = [t for t in view["turns"] if t["actions"] == "none" and t["sent"] > int(0.7 * 3000)]
    assert waited, [(t["sent"], t["actions"]) for t in view["turns"]]  # past the configured prune_at, sent as it came
    assert all(t["next_at"] >= t["sent"] for t in waited)
    assert all(t["cost"] is not None and t["cost_client"] is not None for t in view["turns"])
    assert view["cost"] == sum(t["cost"] for t in view["turns"])
    # Without inflight, the turns over the window are refused, and nobody bills them.
    within = [t for t in view["turns"] if t["tokens"] <= t["window"]]
    assert len(within) < len(view["turns"]) and view["cost_client"] == sum(t["cost_client"] for t in within)
