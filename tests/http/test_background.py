"""Summaries made in the background: started early, once per conversation, used at once, never waited on long."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from inflight.tokens import TokenCounter
from tests.compaction.test_compactor import agent_conversation
from tests.conftest import ProxyFactory
from tests.support.upstream import UpstreamApp
from tests.support.waiting import wait_until

BUDGET = 6000  # an 8,000-token window less the reserve (a quarter of it)
CONFIG: dict[str, Any] = {"models": {"gpt-4o": {"context_window": 8000}}}
TOOLS = [{"type": "function", "function": {"name": "bash", "parameters": {"type": "object", "properties": {}}}}]


def tokens(messages: list[dict[str, Any]]) -> int:
    return TokenCounter().count_request({"model": "gpt-4o", "messages": messages}, "o200k_base").total


def conversation_at(fraction: float) -> list[dict[str, Any]]:
    """The shortest agent conversation over `fraction` of the budget (all share one head: one conversation).

    Its tool outputs are one line each: masking them saves little, so a crossing turn needs its summary."""
    turns = 1
    while tokens(agent_conversation(turns, output_lines=1)) <= fraction * BUDGET:
        turns += 1
    return agent_conversation(turns, output_lines=1)


def post(proxy_url: str, messages: list[dict[str, Any]], **headers: str) -> httpx.Response:
    body = {"model": "gpt-4o", "messages": messages, "tools": TOOLS}
    return httpx.post(f"{proxy_url}/chat/completions", json=body, headers=headers, timeout=30)


def jobs(proxy_url: str) -> dict[str, int]:
    stats = httpx.get(proxy_url.removesuffix("/v1") + "/inflight/stats").json()
    return stats["summary_jobs"]  # type: ignore[no-any-return]


def test_a_summary_is_made_ahead_and_used_at_once_on_the_crossing_turn(
    upstream: tuple[UpstreamApp, str], start_proxy: ProxyFactory
) -> None:
    app, url = upstream
    early, crossing = conversation_at(0.62), conversation_at(0.9)
    assert tokens(early) <= 0.7 * BUDGET  # under prune_at: nothing to compact yet
    with start_proxy(url, **CONFIG) as proxy_url:
        first = post(proxy_url, early)
        wait_until(lambda: jobs(proxy_url)["landed"] == 1)
        second = post(proxy_url, crossing)
        third = post(proxy_url, [*crossing, {"role": "user", "content": "Go on."}])
        started = jobs(proxy_url)["started"]
    assert first.headers["x-inflight-actions"] == "none"
    [forwarded, *_] = app.chat_requests()
    assert forwarded.body == orjson.dumps({"model": "gpt-4o", "messages": early, "tools": TOOLS})
    assert "summary-precomputed" in second.headers["x-inflight-actions"].split(",")
    assert int(second.headers["x-inflight-tokens-after"]) <= BUDGET
    sent = app.chat_requests()[1].json()["messages"]
    assert any("Summary number 1" in str(m.get("content")) for m in sent)
    # The turns since the job's cut join the summary's span (kept by the ledger): the crossing lands near
    # target, not a turn below the next compaction, so the next turns start no job until it grows again.
    assert int(second.headers["x-inflight-tokens-after"]) <= 0.6 * BUDGET
    assert app.summary_count == 1 and started == 1
    assert "summary-cached" in third.headers["x-inflight-actions"]
    third_sent = app.chat_requests()[2].json()["messages"]
    assert third_sent[: len(sent)] == sent  # the compacted prefix is byte for byte the previous turn's


def test_the_summary_request_is_the_conversation_as_sent_then_the_instruction(
    upstream: tuple[UpstreamApp, str], start_proxy: ProxyFactory
) -> None:
    app, url = upstream
    early = conversation_at(0.62)
    with start_proxy(url, **CONFIG) as proxy_url:
        post(proxy_url, early)
        wait_until(lambda: jobs(proxy_url)["landed"] == 1)
    [client_request] = app.chat_requests()
    [summary_request] = app.summaries
    raw_client, raw_summary = client_request.body, summary_request.body
    body = summary_request.json()
    # The messages as the client sent them, each serialized to the same bytes: the upstream's cache holds them.
    for message in early:
        assert orjson.dumps(message) in raw_client and orjson.dumps(message) in raw_summary
    assert body["messages"][:-1] == early
    assert body["messages"][-1]["role"] == "user"
    assert body["messages"][-1]["content"].startswith("You write the handoff note")
    assert body["tools"] == TOOLS and body["tool_choice"] == "none" and body["model"] == "gpt-4o"


def test_another_summarizer_model_is_asked_with_the_standalone_prompt(
    upstream: tuple[UpstreamApp, str], start_proxy: ProxyFactory
) -> None:
    app, url = upstream
    config = CONFIG | {"compaction": {"summarize": {"model": "gpt-4o-mini"}}}
    with start_proxy(url, **config) as proxy_url:
        post(proxy_url, conversation_at(0.62))
        wait_until(lambda: jobs(proxy_url)["landed"] == 1)
    body = app.summaries[0].json()
    assert body["model"] == "gpt-4o-mini" and body["messages"][0]["role"] == "system"
    assert len(body["messages"]) == 2 and "tools" not in body


@pytest.mark.parametrize("store", ["memory", "sqlite"])
def test_twenty_concurrent_requests_of_one_conversation_start_one_job(
    upstream: tuple[UpstreamApp, str], start_proxy: ProxyFactory, store: str, tmp_path: Path
) -> None:
    app, url = upstream
    released = threading.Event()
    app.summarizer_holds = {"src/app.py": released}  # the conversation's task: its summary is made until released
    early = conversation_at(0.62)
    state = {"url": "memory://" if store == "memory" else f"sqlite:///{tmp_path}/inflight.db"}

    async def twenty(proxy_url: str) -> list[httpx.Response]:
        body = {"model": "gpt-4o", "messages": early}
        async with httpx.AsyncClient(timeout=30) as client:
            return await asyncio.gather(*(client.post(f"{proxy_url}/chat/completions", json=body) for _ in range(20)))

    with start_proxy(url, **CONFIG, state=state) as proxy_url:
        responses = asyncio.run(twenty(proxy_url))  # every one of them while the job is running
        released.set()
        wait_until(lambda: jobs(proxy_url)["landed"] == 1)
        # and once it landed, the next turns (the same body: the same tools, so the same conversation) start none
        again = asyncio.run(twenty(proxy_url))
        counts = jobs(proxy_url)
    assert [r.status_code for r in [*responses, *again]] == [200] * 40
    assert app.summary_count == 1 and counts["started"] == 1


def test_a_crossing_turn_waits_at_most_wait_s_then_the_ledger_stands_in_until_the_summary_lands(
    upstream: tuple[UpstreamApp, str], start_proxy: ProxyFactory
) -> None:
    app, url = upstream
    app.summarizer_delay = 3.0
    crossing = conversation_at(0.9)
    config = CONFIG | {"compaction": {"summarize": {"wait_s": 0.5}}}
    with start_proxy(url, **config) as proxy_url:
        started = time.monotonic()
        first = post(proxy_url, crossing)
        waited = time.monotonic() - started
        wait_until(lambda: jobs(proxy_url)["landed"] == 1)
        second = post(proxy_url, [*crossing, {"role": "user", "content": "Go on."}])
    assert first.status_code == 200 and waited < 2.5  # not the summarizer's 3 s
    actions = first.headers["x-inflight-actions"].split(",")
    assert "fallback" in actions and "summary-pending" in actions
    first_sent = str(app.chat_requests()[0].json()["messages"])
    assert "no summary could be made" in first_sent and "Summary number" not in first_sent
    assert "summary-precomputed" in second.headers["x-inflight-actions"].split(",")
    assert "Summary number 1" in str(app.chat_requests()[1].json()["messages"])
    assert app.summary_count == 1


def test_a_failed_job_is_tried_once_more_and_then_not_again_from_the_same_record(
    upstream: tuple[UpstreamApp, str], start_proxy: ProxyFactory
) -> None:
    app, url = upstream
    app.summarizer_status = 500
    early = conversation_at(0.62)
    with start_proxy(url, **CONFIG) as proxy_url:
        post(proxy_url, early)
        wait_until(lambda: jobs(proxy_url)["failed"] == 1)
        post(proxy_url, early)
        post(proxy_url, [*early, {"role": "user", "content": "Go on."}])
        time.sleep(0.3)
        counts = jobs(proxy_url)
    assert counts["started"] == 1 and counts["retried"] == 1
    assert app.summary_count == 2  # the model asked directly, then again; not the standalone prompt as well


def test_a_job_whose_conversation_goes_idle_is_cancelled(
    upstream: tuple[UpstreamApp, str], start_proxy: ProxyFactory
) -> None:
    app, url = upstream
    app.summarizer_delay = 30.0
    config = CONFIG | {"compaction": {"cache": {"ttl_s": 1}}}
    with start_proxy(url, **config) as proxy_url:
        post(proxy_url, conversation_at(0.62))
        wait_until(lambda: jobs(proxy_url)["running"] == 1)
        wait_until(lambda: jobs(proxy_url)["cancelled"] == 1, timeout=5)
        counts = jobs(proxy_url)
    assert counts["running"] == 0 and counts["landed"] == 0
    # The summarizer's request was abandoned, not left to run: its connection was closed.
    wait_until(lambda: app.summaries[0].status == 0 and app.summary_count == 1)


def test_no_job_starts_for_a_request_with_compaction_off(
    upstream: tuple[UpstreamApp, str], start_proxy: ProxyFactory
) -> None:
    app, url = upstream
    with start_proxy(url, **CONFIG) as proxy_url:
        post(proxy_url, conversation_at(0.62), **{"x-inflight-compaction": "off"})
        time.sleep(0.5)
        counts = jobs(proxy_url)
    assert counts["started"] == 0 and app.summary_count == 0


def test_a_slow_background_summary_holds_no_thread_other_requests_need(
    upstream: tuple[UpstreamApp, str], start_proxy: ProxyFactory
) -> None:
    app, url = upstream
    app.summarizer_delay = 600.0  # the summary is held until the proxy goes: longer than `post` waits (30 s)
    big = agent_conversation(1300, output_lines=20)  # about 300k tokens: its job's plan runs in the heavy lane
    other = agent_conversation(1100, output_lines=20)  # a 1.1 MB body far from any threshold: the heavy lane too
    config = {"models": {"gpt-4o": {"context_window": 500_000}}}
    with start_proxy(url, **config) as proxy_url:
        post(proxy_url, big, **{"x-inflight-session": "big"})
        wait_until(lambda: jobs(proxy_url)["running"] == 1 and app.summary_count == 1, timeout=30)
        # Behind the summary it would time out; `goal: fit` keeps it far from any threshold, so it needs no job.
        response = post(proxy_url, other, **{"x-inflight-session": "other", "x-inflight-goal": "fit"})
        still_held = jobs(proxy_url)["running"] == 1 and app.summary_count == 1
    assert response.status_code == 200 and still_held


def test_a_forced_compaction_is_replayed_on_the_next_plain_turn(
    upstream: tuple[UpstreamApp, str], start_proxy: ProxyFactory
) -> None:
    app, url = upstream
    small = conversation_at(0.45)  # far from every threshold
    with start_proxy(url, **CONFIG) as proxy_url:
        post(proxy_url, small, **{"x-inflight-compaction": "force"})
        after = post(proxy_url, [*small, {"role": "user", "content": "Go on."}])
    first, second = (request.json()["messages"] for request in app.chat_requests())
    assert first != small and second[: len(first)] == first
    assert "summary-cached" in after.headers["x-inflight-actions"]


def test_one_tenant_cannot_take_every_background_slot(
    upstream: tuple[UpstreamApp, str], start_proxy: ProxyFactory
) -> None:
    """Two slots: one tenant starts four jobs whose summaries hang; it runs one and queues one, and another
    tenant's job still runs, so that tenant's crossing turn gets its summary, not the ledger."""
    app, url = upstream
    released = threading.Event()
    app.summarizer_holds = {"tenant A's task": released}
    early, crossing = conversation_at(0.62), conversation_at(0.9)

    def of_a(n: int) -> list[dict[str, Any]]:
        task = {**early[1], "content": f"Fix the failing test in src/app.py (tenant A's task {n})."}
        return [early[0], task, *early[2:]]

    config = {**CONFIG, "compaction": {"summarize": {"max_concurrent_jobs": 2}}}
    try:
        with start_proxy(url, **config) as proxy_url:
            for n in range(4):
                assert post(proxy_url, of_a(n), authorization="Bearer sk-a").status_code == 200
            wait_until(lambda: jobs(proxy_url)["running"] == 1)
            held = jobs(proxy_url)
            assert post(proxy_url, early, authorization="Bearer sk-b").status_code == 200
            wait_until(lambda: jobs(proxy_url)["landed"] == 1)
            second = post(proxy_url, crossing, authorization="Bearer sk-b")
            released.set()
    finally:
        released.set()
    assert held["queued"] == 1 and held["refused"] == 2  # its share: one running, one queued
    assert "summary-precomputed" in second.headers["x-inflight-actions"].split(",")


def test_a_conversation_restarted_under_the_same_session_keeps_the_summary_made_ahead_for_it(
    upstream: tuple[UpstreamApp, str], start_proxy: ProxyFactory
) -> None:
    """An agent that compacts by itself starts a new, shorter conversation under the same session, beside the
    record of its old one. A summary made ahead for the new one is found on its next turn, not made again."""
    app, url = upstream
    session = {"x-inflight-session": "one-session"}
    old = conversation_at(0.9)
    restarted = [dict(message) for message in conversation_at(0.62)]
    restarted[1] = {"role": "user", "content": "Summary of the work so far: the test is found. Go on."}
    with start_proxy(url, **CONFIG) as proxy_url:
        post(proxy_url, old, **session)  # compacted: a record of the old conversation, longer than the new one
        wait_until(lambda: jobs(proxy_url)["running"] == 0 and jobs(proxy_url)["queued"] == 0)
        before = jobs(proxy_url)["started"]
        post(proxy_url, restarted, **session)
        wait_until(lambda: jobs(proxy_url)["started"] == before + 1 and jobs(proxy_url)["running"] == 0)
        wait_until(lambda: jobs(proxy_url)["queued"] == 0)
        summaries = app.summary_count
        post(proxy_url, [*restarted, {"role": "user", "content": "Go on."}], **session)
        post(
            proxy_url,
            [*restarted, {"role": "user", "content": "Go on."}, {"role": "user", "content": "Next."}],
            **session,
        )
        after = jobs(proxy_url)["started"]
    assert after == before + 1 and app.summary_count == summaries  # one summary made ahead for it, used as is
