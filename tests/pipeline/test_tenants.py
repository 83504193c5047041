"""Tenants never share: conversation keys, calibration and the summarizer budget, through the pipeline."""

from __future__ import annotations

from typing import Any

import orjson

from inflight.config import load_settings
from inflight.formats import CHAT_COMPLETIONS
from inflight.pipeline.accounting import Counted
from inflight.pipeline.engine import Options, Pipeline, build_pipeline, key_of
from inflight.policy.tenants import SummaryBudget
from tests.compaction.test_compactor import agent_conversation

TOOLS = [{"type": "function", "function": {"name": "bash", "parameters": {"type": "object", "properties": {}}}}]


def counted(pipeline: Pipeline, **body: Any) -> Counted:
    payload = {"model": "gpt-4o", "messages": agent_conversation(3), **body}
    found = pipeline.count(orjson.dumps(payload), payload, CHAT_COMPLETIONS)
    assert found is not None
    return found


def options(key: str | None, **fields: Any) -> Options:
    return Options(credentials=[(b"authorization", f"Bearer {key}".encode())] if key else [], **fields)


def test_a_conversations_key_holds_its_tenant_and_the_tools_an_in_place_summary_is_sent_with() -> None:
    pipeline = build_pipeline(load_settings(None), summarizers=None)
    plain = counted(pipeline)
    keys = {
        key_of(plain, options("sk-a")),
        key_of(plain, options("sk-b")),
        key_of(plain, options(None)),
        key_of(counted(pipeline, tools=TOOLS), options("sk-a")),
    }
    assert len(keys) == 4
    assert key_of(plain, options("sk-a")) == key_of(plain, Options(credentials=[(b"x-api-key", b"sk-a")]))
    sessions = {key_of(plain, options(key, session="s-1")) for key in ("sk-a", "sk-b", None)}
    assert len(sessions) == 3 and "session:s-1" in sessions  # a client with no key keeps its readable key
    # A session named like another tenant's scoped key is not that key.
    scoped = key_of(plain, options("sk-a", session="s-1"))
    assert key_of(plain, options(None, session=scoped.removeprefix("session:"))) != scoped


def test_long_sessions_and_models_key_records_clipped_with_a_digest_of_the_whole() -> None:
    pipeline = build_pipeline(load_settings(None), summarizers=None)
    plain = counted(pipeline)
    one, other = (key_of(plain, options("sk-a", session="s" * 1_000_000 + end)) for end in "xy")
    assert one != other and len(one) < 400 and len(other) < 400
    long_model = counted(pipeline, model="m" * 1_000_000)
    assert len(key_of(long_model, options(None))) < 400


def test_calibration_learns_per_tenant_through_the_pipeline() -> None:
    pipeline = build_pipeline(load_settings(None), summarizers=None)
    payload = {"model": "local-llama", "messages": agent_conversation(3)}
    request = pipeline.count(orjson.dumps(payload), payload, CHAT_COMPLETIONS)
    assert request is not None
    a, b = options("sk-a").tenant, options("sk-b").tenant
    for _ in range(16):
        pipeline.record_usage("local-llama", estimate=1788, actual=3745, tenant=a)
    assert pipeline.account(request, tenant=b).ratio == 1.0
    assert pipeline.account(request, tenant=a).ratio > 2


def test_the_summarizer_budget_is_per_client_and_global() -> None:
    now = [0.0]
    settings = load_settings(None).limits.summarizer.model_copy(
        update={"calls_per_minute": 2, "tokens_per_hour": 1000, "global_calls_per_minute": 3}
    )
    budget = SummaryBudget(settings, clock=lambda: now[0])
    assert budget.spend("a", 100) and budget.spend("a", 100) and not budget.spend("a", 100)  # two a minute
    assert budget.spend("b", 100) and not budget.spend("c", 100)  # the proxy's three a minute
    now[0] += 30  # half a minute: one call back for each, and one and a half for the proxy
    assert budget.spend("a", 100) and not budget.spend("b", 2000)  # over b's tokens per hour
    assert budget.refused == 3
    unbounded = settings.model_copy(update=dict.fromkeys(type(settings).model_fields, 0))
    assert all(SummaryBudget(unbounded).spend("a", 10**9) for _ in range(1000))


def test_a_budget_maps_at_most_so_many_clients() -> None:
    budget = SummaryBudget(load_settings(None).limits.summarizer, max_clients=16)
    for n in range(1000):
        budget.spend(f"key:{n}", 1)
    assert len(budget._clients) == 16
