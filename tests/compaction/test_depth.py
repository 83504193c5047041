"""How deep a compaction goes: the next one `min_turns_between` turns away, in one step, down to its floor at most.

Conversations growing by a fixed share of the budget a turn are replayed turn by turn through the
compactor, the record carried from one turn to the next as the server carries it; a rewrite is a
turn whose messages do not begin with the previous turn's as sent.
"""

from __future__ import annotations

import itertools
from dataclasses import replace
from functools import cache
from typing import Any

import pytest

from inflight.compaction import Budget, Record
from inflight.compaction.depth import Depth, Spacing, growth_per_turn
from inflight.compaction.stages.digest import LATER_NOTE, NO_SUMMARY_NOTE
from inflight.compaction.summary_job import written_part
from inflight.config import Compaction, Prices, Summarize
from inflight.policy.cost import prompt_cost, summary_cost
from tests.compaction.test_compactor import COUNTER, ENCODING, Engine, compactor, conversation_of

LIMIT = 24_000
SUMMARIZE = Summarize()
# Most tests here time compactions whose floor is the latest turn (no `keep_recent_tokens`, only the newest result
# kept whole), so each can go as deep as its spacing asks; the agent's recent work is tested in test_recent_work.py.
LATEST_TURN: dict[str, Any] = {
    "summarize": {"keep_recent_tokens": 0},
    "mask": {"keep_tool_results": 1, "keep_tool_results_min": 1},
}


def latest_turn(**changes: Any) -> Compaction:
    """The compaction settings whose floor is the latest turn, with `changes`."""
    return Compaction(**LATEST_TURN, **changes)


@cache
def output_of(turn: int, tokens: int) -> str:
    """A tool output of about `tokens` o200k tokens, no two lines alike."""
    lines, text = [], ""
    j = 0
    while len(ENCODING.encode_ordinary(text)) < tokens:
        lines += [
            f"src/pkg_{turn}/module_{i}.py:{i + 1}: value_{turn}_{i} = compute(item_{i}, {turn * i})"
            for i in range(j, j + 40)
        ]
        j += 40
        text = "\n".join(lines)
    return ENCODING.decode(ENCODING.encode_ordinary("\n".join(lines))[:tokens])


def growing(turns: int, sizes: list[int]) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a coding agent. Use the shell tool."},
        {"role": "user", "content": "Fix the failing test in src/pkg_0/module_0.py."},
    ]
    for k in range(turns):
        call = {
            "id": f"call_{k}",
            "type": "function",
            "function": {"name": "shell", "arguments": f'{{"cmd": "cat f{k}.py"}}'},
        }
        messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        messages.append({"role": "tool", "tool_call_id": f"call_{k}", "content": output_of(k, sizes[k % len(sizes)])})
    return messages


def without_summarizer(settings: Compaction) -> Engine:
    """A compactor as the proxy builds it when no summarizer can be called: the ledger stands in."""
    return compactor(settings, summarizer=False)


async def replay(messages: list[dict[str, Any]], engine: Engine | Compaction) -> tuple[list[bool], list[str]]:
    """Each turn's request through the compactor, its record kept: per turn, whether it rewrote, and its actions."""
    engine = compactor(engine) if isinstance(engine, Compaction) else engine
    budget = Budget.of(LIMIT, engine.settings)
    record: Record | None = None
    previous: list[dict[str, Any]] | None = None
    rewrites, actions = [], []
    for end in range(4, len(messages) + 1, 2):
        request = messages[:end]
        outcome = await engine.run(conversation_of(request), budget=budget, record=record)
        sent = outcome.messages if outcome is not None else request
        record = outcome.record if outcome is not None else record
        rewrites.append(previous is not None and sent[: len(previous)] != previous)
        actions.append(",".join(outcome.actions) if outcome is not None else "none")
        previous = sent
    return rewrites, actions


def spacing(rewrites: list[bool]) -> tuple[float, int]:
    """Turns per rewrite from the first one on, and how many rewrites came on the turn right after another."""
    first = rewrites.index(True)
    after = rewrites[first:]
    back_to_back = sum(1 for a, b in itertools.pairwise(after) if a and b)
    return len(after) / sum(after), back_to_back


@pytest.mark.parametrize(
    ("share", "with_summarizer", "without"), [(0.05, 4, 4), (0.10, 4, 4), (0.15, 3.2, 3.2), (0.20, 2, 2.25)]
)
async def test_a_steadily_growing_conversation_is_compacted_at_most_every_min_turns(
    share: float, with_summarizer: float, without: float
) -> None:
    """At most every `min_turns_between` turns, or 75% of the best a compaction to the floor can give (about 4.3
    turns at 15%, 3 at 20%), with no rewrite on consecutive turns. Without a summarizer the ledger goes to the
    floor for nothing; with one made on the turn, a call is made only when it doubles the turns masking gives (at
    20%, masking alone gives 2)."""
    messages = growing(40, [int(LIMIT * share)])
    for engine, turns in ((compactor(latest_turn()), with_summarizer), (without_summarizer(latest_turn()), without)):
        rewrites, actions = await replay(messages, engine)
        per_rewrite, back_to_back = spacing(rewrites)
        assert back_to_back == 0, actions
        assert per_rewrite >= turns, (per_rewrite, actions)


async def test_a_fast_conversation_is_compacted_deeper_than_target_at_once() -> None:
    """With `target` 0.6 and turns of a tenth of the budget, four turns of room mean compacting to about 0.45:
    masking goes on past all-but-`keep_tool_results` (which stops above that) to the aim, in one step."""
    settings = latest_turn(target=0.6)
    messages = growing(12, [int(LIMIT * 0.1)])
    engine = compactor(settings)
    budget = Budget.of(LIMIT, settings)
    for end in range(4, len(messages) + 1, 2):
        outcome = await engine.run(conversation_of(messages[:end]), budget=budget, record=None)
        if outcome is not None and outcome.actions != ["none"]:
            break
    assert outcome is not None and outcome.actions == ["mask"]  # masking reaches it: no summary
    assert outcome.tokens_after <= budget.summarize_at - 4 * int(LIMIT * 0.1) < budget.target


async def test_without_spacing_the_same_conversation_is_compacted_more_often() -> None:
    """The control: compacting to `target` only (`min_turns_between: 0`) rewrites the prefix more often."""
    spaced, _ = await replay(growing(40, [int(LIMIT * 0.15)]), latest_turn())
    unspaced, _ = await replay(growing(40, [int(LIMIT * 0.15)]), latest_turn(min_turns_between=0))
    assert sum(unspaced) > sum(spaced)


async def test_a_bursty_conversation_never_rewrites_on_consecutive_turns_while_the_floor_holds_a_turn() -> None:
    sizes = [int(LIMIT * 0.04)] * 3 + [int(LIMIT * 0.25)]
    rewrites, actions = await replay(growing(40, sizes), latest_turn())
    assert spacing(rewrites)[1] == 0, actions


async def test_turns_too_big_for_the_window_are_said_to_churn() -> None:
    """Said by the compaction that churns, not by the turns that replay its record (a summary's or the ledger's)."""
    for engine in (compactor(latest_turn()), without_summarizer(latest_turn())):
        rewrites, actions = await replay(growing(20, [int(LIMIT * 0.3)]), engine)
        compacted = [a for a, rewrite in zip(actions, rewrites, strict=True) if rewrite]
        replayed = [a for a, rewrite in zip(actions, rewrites, strict=True) if not rewrite and a != "none"]
        assert compacted and all("churn" in a for a in compacted), actions
        assert replayed and not any("churn" in a for a in replayed), actions
    _, calm = await replay(growing(30, [int(LIMIT * 0.05)]), latest_turn())
    assert not any("churn" in a for a in calm)


def test_a_slow_conversation_aims_at_target_and_a_fast_one_deeper_but_not_below_its_floor() -> None:
    slow = Depth.plan(growth=500, floor=3000, target=12_000, summarize_at=20_400, spacing=Spacing(SUMMARIZE, 4))
    assert slow.aim == 12_000 and slow.turns_left(slow.aim) >= 4
    fast = Depth.plan(growth=2_400, floor=3000, target=12_000, summarize_at=20_400, spacing=Spacing(SUMMARIZE, 4))
    assert fast.aim == 20_400 - 4 * 2_400 and fast.turns_left(fast.aim) == 4
    too_fast = Depth.plan(growth=6_000, floor=9000, target=12_000, summarize_at=20_400, spacing=Spacing(SUMMARIZE, 4))
    assert too_fast.aim == 9000 and too_fast.churns(9000)


def test_without_spacing_a_summary_waits_for_summarize_at_and_a_free_one_goes_to_the_floor() -> None:
    unspaced = Depth.plan(growth=2_400, floor=3000, target=12_000, summarize_at=20_400, spacing=Spacing(SUMMARIZE, 0))
    assert unspaced.aim == 12_000 and not unspaced.summary_pays(15_000)
    free = Depth.plan(
        growth=4_800, floor=8000, target=12_000, summarize_at=20_400, spacing=Spacing(SUMMARIZE, 4, summary_costs=False)
    )
    assert free.summary_pays(11_000)  # the ledger costs no call: any turn more is worth it
    ahead = Depth.plan(
        growth=2_400,
        floor=3000,
        target=12_000,
        summarize_at=20_400,
        spacing=Spacing(SUMMARIZE, 4, summaries_ahead=True),
    )
    assert not ahead.summary_pays(15_000)  # made in the background: put in place when ready, not waited for...
    assert ahead.summary_pays(19_000)  # ... unless the very next turn would compact again


def test_a_summary_is_asked_for_only_when_it_pays_for_its_call() -> None:
    reachable = Depth.plan(growth=2_400, floor=3000, target=12_000, summarize_at=20_400, spacing=Spacing(SUMMARIZE, 4))
    assert reachable.summary_pays(15_000)  # the floor gives the four turns: the summary is made
    churning = Depth.plan(growth=4_800, floor=8000, target=12_000, summarize_at=20_400, spacing=Spacing(SUMMARIZE, 4))
    assert not churning.summary_pays(11_000)  # masking leaves ~1.9 turns, the floor ~2.6: not worth a call
    assert churning.summary_pays(16_000)  # masking leaves < 1 turn; the floor holds two
    assert churning.summary_pays(15_000)  # ... or the floor more than doubles the turns


async def test_the_floor_keeps_room_for_the_summary_beside_the_head_and_the_latest_turn() -> None:
    settings = latest_turn()
    messages = growing(12, [int(LIMIT * 0.3)])
    outcome = await compactor(settings).run(conversation_of(messages), budget=Budget.of(LIMIT, settings), record=None)
    assert outcome is not None and "churn" in outcome.actions
    head_and_turn = sum(conversation_of(messages).counts[:2]) + sum(conversation_of(messages).counts[-2:])
    assert int(outcome.notes["floor"]) >= head_and_turn + settings.summarize.max_summary_tokens


def test_growth_is_the_mean_of_the_latest_turns_as_they_arrived() -> None:
    messages = growing(10, [100])
    sizes = [10, 20] + [5, 100] * 10
    assert growth_per_turn(messages, sizes, head_len=2) == 105
    assert growth_per_turn(messages[:2], sizes[:2], head_len=2) == 0


async def test_a_digest_after_a_summary_says_the_summary_covers_the_earlier_messages() -> None:
    """An LLM summary in the record, then the summarizer down: the ledger extends the summary, and the model is
    not told that no summary could be made right under one."""
    messages = growing(30, [int(LIMIT * 0.1)])
    settings = latest_turn(min_turns_between=0)
    engine = compactor(settings)
    budget = Budget.of(LIMIT, settings)
    first = await engine.run(conversation_of(messages[:24]), budget=budget, record=None, force=True)
    assert first is not None and first.record.summary is not None and not first.record.fallback
    down = compactor(settings, summary=None)
    second = await down.run(conversation_of(messages), budget=budget, record=first.record, force=True)
    assert second is not None and "fallback" in second.actions
    text = written_part(second.record.summary or {})
    assert "A summary." in text and LATER_NOTE in text and NO_SUMMARY_NOTE not in text
    third = await down.run(
        conversation_of([*messages, *growing(34, [500])[62:]]), budget=budget, record=second.record, force=True
    )
    assert third is not None
    text = written_part(third.record.summary or {})
    assert text.count(LATER_NOTE) == 1 and NO_SUMMARY_NOTE not in text  # never repeated


def priced(settings: Compaction, prices: Prices, *, summarizer: bool = True) -> Engine:
    """A compactor as the proxy builds it under `compaction.schedule: cost`, at `prices`."""
    engine = compactor(settings, summarizer=summarizer)
    assert engine.compactor.spacing is not None
    engine.compactor.spacing = replace(engine.compactor.spacing, prices=prices)
    return engine


async def billed(messages: list[dict[str, Any]], engine: Engine, prices: Prices) -> tuple[float, int, list[str]]:
    """Each turn through the compactor as in `replay`, billed as the provider would: the prefix shared with the
    turn before read, the rest written; with the summarizer's calls at their price. The cost, the rewrites, the
    actions."""
    budget = Budget.of(LIMIT, engine.settings)
    record: Record | None = None
    previous: list[dict[str, Any]] = []
    cost, rewrites, actions = 0.0, 0, []
    for end in range(4, len(messages) + 1, 2):
        request = messages[:end]
        outcome = await engine.run(conversation_of(request), budget=budget, record=record)
        sent = outcome.messages if outcome is not None else request
        record = outcome.record if outcome is not None else record
        counts = [COUNTER.count_message(m, ENCODING) for m in sent]
        shared = next((i for i, (a, b) in enumerate(zip(previous, sent, strict=False)) if a != b), None)
        shared = min(len(previous), len(sent)) if shared is None else shared
        rewrites += bool(previous) and shared < len(previous)
        cost += prompt_cost(prices, tokens=sum(counts), cached=sum(counts[:shared]))
        actions.append(",".join(outcome.actions) if outcome is not None else "none")
        previous = sent
    for job in engine.calls:
        cost += summary_cost(prices, input_tokens=job.input_tokens, output_tokens=job.max_tokens)
    return cost, rewrites, actions


@pytest.mark.parametrize("prices", [Prices(cache_write=1.25), Prices()], ids=["anthropic", "openai"])
async def test_scheduled_by_cost_a_conversation_costs_less_than_by_thresholds(prices: Prices) -> None:
    """The same conversation, each turn a twentieth of the budget: compacting later and to the floor bills less
    than compacting at `prune_at` and `summarize_at` to where `min_turns_between` turns fit. Its rewrites are in
    that bill: where they cost no premium (OpenAI) it may make one more, sooner."""
    messages = growing(40, [int(LIMIT * 0.05)])
    by_cost, cost_rewrites, actions = await billed(messages, priced(latest_turn(), prices), prices)
    by_thresholds, threshold_rewrites, _ = await billed(messages, compactor(latest_turn()), prices)
    assert by_cost < 0.95 * by_thresholds, (by_cost, by_thresholds, actions)
    assert 0 < cost_rewrites <= threshold_rewrites + (prices.cache_write <= 1)


async def test_scheduled_by_cost_a_request_that_fits_waits_past_prune_at() -> None:
    """Past `prune_at` but under the cheapest trigger, the request goes as it came; a request over the limit is
    compacted, to its floor (`goal: fit`)."""
    settings = latest_turn(goal="fit")
    engine = priced(settings, Prices(cache_write=1.25))
    budget = Budget.of(LIMIT, settings)
    messages = growing(40, [int(LIMIT * 0.1)])  # big turns: a compaction pays only further on
    sizes = [(end, sum(conversation_of(messages[:end]).counts)) for end in range(4, len(messages) + 1, 2)]
    past_prune = next(end for end, tokens in sizes if budget.prune_at < tokens < budget.summarize_at)
    waited = await engine.run(conversation_of(messages[:past_prune]), budget=budget, record=None)
    assert waited is None or waited.actions == ["none"]
    over = next(end for end, tokens in sizes if tokens > budget.limit)
    outcome = await engine.run(conversation_of(messages[:over]), budget=budget, record=None)
    assert outcome is not None and outcome.fits and outcome.tokens_after < budget.target


def test_priced_a_compaction_goes_to_its_floor_and_the_next_comes_where_it_costs_least() -> None:
    spacing = Spacing(SUMMARIZE, 4, prices=Prices(cache_write=1.25))
    depth = Depth.plan(
        growth=2_000, floor=5_000, target=12_000, summarize_at=20_400, spacing=spacing, limit=24_000, fixed=3_000
    )
    assert depth.aim == 5_000 and depth.schedule is not None
    assert 20_400 <= depth.summarize_at <= 24_000
    assert depth.summarize_at == max(20_400, depth.schedule.best_trigger(kept=5_000, limit=24_000))


def test_priced_a_summary_is_made_when_its_call_costs_less_than_keeping_what_masking_left() -> None:
    spacing = Spacing(SUMMARIZE, 4, prices=Prices(cache_write=1.25))
    depth = Depth.plan(
        growth=1_000, floor=4_000, target=12_000, summarize_at=20_000, spacing=spacing, limit=24_000, fixed=3_000
    )
    assert not depth.summary_pays(5_000)  # masking came near the floor: a call would not pay
    assert depth.summary_pays(19_500)  # masking left it a turn below the next compaction
    ahead = replace(spacing, summaries_ahead=True)
    made = Depth.plan(
        growth=1_000, floor=4_000, target=12_000, summarize_at=20_000, spacing=ahead, limit=24_000, fixed=3_000
    )
    assert made.summary_pays(9_000)  # made ahead, it is paid for: anything it saves is worth it
