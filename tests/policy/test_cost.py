"""The cost model: what a prompt costs at a provider's prices, and the schedule of compactions that costs least."""

from __future__ import annotations

import pytest

from inflight.config import Prices, load_settings
from inflight.policy.cost import Schedule, prompt_cost, summary_cost

ANTHROPIC = Prices(cache_write=1.25)
OPENAI = Prices()


def test_a_prompt_costs_its_cached_prefix_read_and_the_rest_written() -> None:
    assert prompt_cost(ANTHROPIC, tokens=10_000, cached=8_000) == pytest.approx(8_000 * 0.1 + 2_000 * 1.25)
    assert prompt_cost(OPENAI, tokens=10_000, cached=8_000) == pytest.approx(8_000 * 0.1 + 2_000 * 1.0)
    assert prompt_cost(OPENAI, tokens=100, cached=500) == pytest.approx(10.0)  # never more cached than sent


def test_a_summary_call_is_billed_uncached_with_its_reply_at_the_output_price() -> None:
    assert summary_cost(ANTHROPIC, input_tokens=20_000, output_tokens=1_000) == pytest.approx(25_000)


def test_keeping_less_is_cheaper_per_turn_and_a_later_trigger_spreads_the_rewrite() -> None:
    schedule = Schedule(ANTHROPIC, growth=4_800, fixed=11_600)
    shallow = schedule.per_turn(kept=30_000, trigger=45_000)
    deep = schedule.per_turn(kept=17_000, trigger=45_000)
    assert deep < shallow
    # Three turns apart the rewrite weighs more than the reads a later trigger adds.
    assert schedule.per_turn(kept=17_000, trigger=45_000) < schedule.per_turn(kept=17_000, trigger=31_400)


def test_the_best_trigger_is_where_the_cost_per_turn_is_least_within_the_limit() -> None:
    schedule = Schedule(ANTHROPIC, growth=4_800, fixed=11_600)
    best = schedule.best_trigger(kept=17_000, limit=200_000)
    costs = {trigger: schedule.per_turn(kept=17_000, trigger=trigger) for trigger in range(22_000, 120_000, 500)}
    cheapest = min(costs, key=costs.__getitem__)
    assert abs(best - cheapest) <= 500
    assert schedule.best_trigger(kept=17_000, limit=30_000) == 30_000  # a request over the budget must compact


def test_expensive_cache_reads_call_for_earlier_compactions_than_cheap_ones() -> None:
    cheap_reads = Schedule(OPENAI, growth=2_000, fixed=1_000).best_trigger(kept=5_000, limit=1_000_000)
    dear_reads = Schedule(Prices(cache_read=0.5), growth=2_000, fixed=1_000).best_trigger(kept=5_000, limit=1_000_000)
    assert dear_reads < cheap_reads


def test_pricing_comes_from_the_format_with_a_model_glob_applied() -> None:
    settings = load_settings(
        None,
        overrides={"pricing": {"formats": {"responses": {"output": 8}}, "models": {"gpt-4o*": {"cache_read": 0.5}}}},
    )
    assert settings.pricing.for_request("messages", "claude-sonnet-4-5").cache_write == 1.25
    assert settings.pricing.for_request("chat_completions", "gpt-5").cache_write == 1.0
    assert settings.pricing.for_request("responses", "gpt-5").output == 8
    found = settings.pricing.for_request("responses", "GPT-4o-mini")
    assert (found.cache_read, found.output) == (0.5, 8)
    anthropic = load_settings(None, overrides={"pricing": {"formats": {"messages": {"output": 15}}}})
    assert anthropic.pricing.for_request("messages", "claude").cache_write == 1.25  # one price changed, not all


def test_a_negative_price_is_refused_naming_the_key() -> None:
    with pytest.raises(Exception, match="cache_read"):
        load_settings(None, overrides={"pricing": {"models": {"x*": {"cache_read": -1}}}})
