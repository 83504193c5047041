"""The agent's recent work under `goal: cost`: compactions come early when they bill less, and whatever they fold,
the task, the latest request and the newest tool outputs with their calls go upstream verbatim on every turn.

A conversation whose outputs vary in size (a seeded log-normal) is replayed turn by turn through the compactor,
its record carried as the server carries it, and billed as a prefix cache would bill it."""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, replace
from typing import Any

from inflight.compaction import Budget, Record
from inflight.config import Compaction, Prices
from inflight.policy.cost import prompt_cost, summary_cost
from tests.compaction.test_compactor import COUNTER, ENCODING, compactor, conversation_of
from tests.compaction.test_depth import output_of

LIMIT = 120_000
ANTHROPIC = Prices(cache_write=1.25)


def varied(steps: int, *, seed: int = 51) -> list[dict[str, Any]]:
    """A task, then `steps` calls whose outputs are log-normal in size: median 600 tokens, now and then 8,000."""
    rng = random.Random(seed)
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a coding agent. Use the shell tool."},
        {"role": "user", "content": "Fix the failing test in src/pkg_0/module_0.py."},
    ]
    for k in range(steps):
        tokens = min(int(rng.lognormvariate(math.log(600), 1.0)), 8000)
        call = {"id": f"call_{k}", "type": "function", "function": {"name": "shell", "arguments": f'{{"step": {k}}}'}}
        messages.append({"role": "assistant", "content": f"Step {k}.", "tool_calls": [call]})
        messages.append({"role": "tool", "tool_call_id": f"call_{k}", "content": output_of(k, max(tokens, 20))})
    return messages


@dataclass
class Replay:
    """What a replay sent and billed."""

    sent: list[list[dict[str, Any]]]
    cost: float
    rewrites: int
    shared: list[int]  # per turn, the messages it shares with the turn before as sent


async def replay(messages: list[dict[str, Any]], settings: Compaction, prices: Prices = ANTHROPIC) -> Replay:
    engine = compactor(settings)
    assert engine.compactor.spacing is not None
    engine.compactor.spacing = replace(engine.compactor.spacing, prices=prices)  # as `schedule: cost` builds it
    record: Record | None = None
    previous: list[dict[str, Any]] = []
    out = Replay([], 0.0, 0, [])
    for end in range(4, len(messages) + 1, 2):
        request = messages[:end]
        conversation = conversation_of(request)
        budget = Budget.of(LIMIT, settings, fixed=conversation.fixed_tokens)
        outcome = await engine.run(conversation, budget=budget, record=record)
        changed = outcome is not None and outcome.actions != ["none"]
        sent = outcome.messages if changed and outcome is not None else request
        record = outcome.record if outcome is not None else record
        counts = [COUNTER.count_message(m, ENCODING) for m in sent]
        shared = next((i for i, (a, b) in enumerate(zip(previous, sent, strict=False)) if a != b), None)
        shared = min(len(previous), len(sent)) if shared is None else shared
        out.rewrites += bool(previous) and shared < len(previous)
        out.cost += prompt_cost(prices, tokens=sum(counts), cached=sum(counts[:shared]))
        out.sent.append(sent)
        out.shared.append(shared)
        previous = sent
    for job in engine.calls:
        out.cost += summary_cost(prices, input_tokens=job.input_tokens, output_tokens=job.max_tokens)
    return out


async def test_goal_cost_bills_less_than_fit_and_compacts_before_prune_at() -> None:
    messages = varied(90)
    cost = await replay(messages, Compaction(goal="cost"))
    fit = await replay(messages, Compaction(goal="fit"))
    assert cost.cost < 0.92 * fit.cost, (cost.cost, fit.cost)
    first = next(i for i, sent in enumerate(cost.sent) if sent != messages[: 4 + 2 * i])  # the first compacted
    prune_at = Budget.of(LIMIT, Compaction()).prune_at
    assert conversation_of(messages[: 4 + 2 * first]).tokens < 0.6 * prune_at


async def test_every_turn_keeps_the_task_the_newest_five_outputs_and_their_calls_verbatim() -> None:
    messages = varied(90)
    for goal in ("cost", "fit"):
        played = await replay(messages, Compaction(goal=goal))
        for turn, sent in enumerate(played.sent):
            request = messages[: 4 + 2 * turn]
            assert sent[:2] == request[:2], (goal, turn)
            assert sent[-10:] == request[-10:], (goal, turn)  # five calls, five outputs


async def test_a_fold_is_replayed_byte_identically_and_the_head_is_never_rewritten() -> None:
    messages = varied(90)
    played = await replay(messages, Compaction(goal="cost"))
    assert played.rewrites >= 2
    assert min(played.shared[1:]) >= 2  # the system prompt and the task stay cached across every fold
    replays = [turn for turn in range(1, len(played.sent)) if played.shared[turn] == len(played.sent[turn - 1])]
    assert len(replays) >= len(played.sent) - 1 - played.rewrites  # every other turn only appends
