"""An archived conversation of any size, written straight into a real archive store, for the viewer to draw.

Replaying hundreds of turns of a quarter of a million tokens through the proxy would take minutes
and show nothing more about the drawing: the viewer reads what the store holds. So the turns and
compactions are built with the archive's own `turn_entry` and `compaction_entry`, from a simple
model of an agent that grows its history a turn at a time and of a compactor that brings what is
sent back under the target whenever it passes the next threshold (`prune_at` before the first
summary, `summarize_at` after it), and they are written with the store the proxy reads them from.
"""

from __future__ import annotations

import asyncio
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Any

from inflight.archive import TurnWrite, open_archive
from inflight.archive.entries import Thresholds, compaction_entry, conversation_id, turn_entry
from inflight.compaction import Budget
from inflight.compaction.conversation import Message
from inflight.compaction.ledger import Ledger
from inflight.compaction.record import Record, Replacement, new_compaction_id
from inflight.compaction.summary_job import summary_message
from inflight.config import Archive, Compaction, State
from inflight.policy.windows import budget_for

RESERVE = 4096  # the default reply reserve (`compaction.reserve_tokens`), at most a quarter of the window
KEEP_TURNS = 4  # the newest turns a compaction leaves as they were
MIN_TURNS_BETWEEN = 4  # `compaction.min_turns_between`: a compaction sooner than this churns
HEAD = 1_200  # the system prompt and the task: the tokens of the first turn, kept by every compaction


@dataclass(frozen=True)
class Shape:
    """What to archive: `turns` turns of about `growth` client tokens each, over a `window`."""

    label: str
    window: int
    turns: int
    growth: int
    shadow_after: int | None = None  # turns past this one in shadow: compactions planned, the client's bytes sent
    settings: Compaction = field(default_factory=Compaction)

    def shadows(self, turn: int) -> bool:
        return self.shadow_after is not None and turn > self.shadow_after

    def thresholds(self) -> Thresholds:
        limit = budget_for(None, reserve_tokens=RESERVE, context_window=self.window)
        budget = Budget.of(limit, self.settings)
        background_at = self.settings.summarize.background_at
        return Thresholds(
            window=self.window,
            budget=limit,
            background_at=int(limit * background_at) if background_at is not None else None,
            prune_at=budget.prune_at,
            summarize_at=budget.summarize_at,
            target=budget.target,
        )


@dataclass
class Archived:
    """What was written: the conversation's id, its client tokens at the last turn, its turns and compactions."""

    id: str
    tokens: int = 0
    turns: list[dict[str, Any]] = field(default_factory=list)
    compactions: list[dict[str, Any]] = field(default_factory=list)

    def turn_of(self, compaction: dict[str, Any]) -> int:
        """The turn (numbered from 1) that made `compaction`."""
        made = [n for n, turn in enumerate(self.turns, 1) if turn["compacted_here"]]
        (n,) = [n for n in made if self.turns[n - 1]["compaction_id"] == compaction["id"]]
        return n


def growth_of(shape: Shape, turn: int) -> int:
    """A turn's new tokens: `growth` on average, some turns a tool's long output, none random."""
    wobble = ((turn * 7919) % 13) / 12  # 0..1, the same on every run
    return int(shape.growth * (0.4 + 1.2 * wobble))


def messages_of(turn: int) -> list[Message]:
    """The agent's messages by `turn`: the task, then a command and its output a turn."""
    messages: list[Message] = [
        {"role": "system", "content": "You are a coding agent working in a checkout of the project."},
        {"role": "user", "content": "Make the test suite pass, then add a test for the bug you fixed."},
    ]
    for n in range(1, turn + 1):
        command = f"pytest -q tests/test_step_{n}.py" if n % 3 else f"sed -n {n},{n + 40}p src/app.py"
        arguments = f'{{"cmd": "{command}"}}'
        call = {"id": f"call_{n}", "type": "function", "function": {"name": "bash", "arguments": arguments}}
        messages.append({"role": "assistant", "content": f"Turn {n}: running `{command}`.", "tool_calls": [call]})
        lines = [f"tests/test_step_{n}.py::test_case_{i} PASSED" for i in range(1 + n % 7)]
        failed = f"FAILED tests/test_step_{n}.py - AssertionError"
        lines.append(f"{1 + n % 7} passed in 0.{n % 10}s" if n % 5 else failed)
        messages.append({"role": "tool", "tool_call_id": f"call_{n}", "content": "\n".join(lines)})
    return messages


def record_of(turn: int, *, summarize: bool, previous: Record | None, messages: list[Message]) -> Record:
    """What a compaction at `turn` made: the older turns summarized (or their outputs masked), the newest kept."""
    kept_from = len(messages) - 2 * KEEP_TURNS
    if not summarize:
        masked = {
            index: Replacement(b"", {**messages[index], "content": "[tool output pruned]"}, 8, "mask")
            for index in range(2, kept_from)
            if messages[index]["role"] == "tool"
        }
        return Record(head_len=2, prefix_len=2, prefix_hash=b"", replaced=masked)
    text = (
        f"## Original task\nMake the test suite pass, then add a test for the bug.\n\n## Progress by turn {turn}\n"
        f"Ran the step tests one by one up to step {turn - KEEP_TURNS}; every fifth failed on an assertion in "
        "src/app.py and was fixed by guarding the empty input.\n\n## Next\nRun the remaining steps, then add the test."
    )
    commands = tuple(f"pytest -q tests/test_step_{n}.py" for n in range(max(1, turn - 12), turn - KEEP_TURNS))
    ledger = Ledger(commands=commands, dropped_messages=kept_from - 2)
    return Record(head_len=2, prefix_len=kept_from, prefix_hash=b"", summary=summary_message(text), ledger=ledger)


def entries_of(shape: Shape, *, now: float) -> tuple[Archived, list[dict[str, Any]], list[dict[str, Any]]]:
    """The conversation's turn entries and compaction entries, oldest first."""
    thresholds = shape.thresholds()
    archived = Archived(conversation_id(f"session:{shape.label}"))
    turns: list[dict[str, Any]] = []
    compactions: list[dict[str, Any]] = []
    tokens, removed, record, last_compaction = HEAD, 0, None, -MIN_TURNS_BETWEEN
    everything = messages_of(shape.turns)
    for n in range(1, shape.turns + 1):
        tokens += growth_of(shape, n)
        at = now - (shape.turns - n) * 40
        before = tokens - removed
        next_at = thresholds.summarize_at if record is not None else thresholds.prune_at
        compacted = before > next_at
        compaction_id = record.compaction_id if record is not None else None
        actions = "none" if record is None else "summary-cached"
        if compacted:
            summarize = record is not None or before > thresholds.summarize_at
            messages = everything[: 2 + 2 * n]
            made = record_of(n, summarize=summarize, previous=record, messages=messages)
            compaction_id = new_compaction_id()
            landed = 1.0 + 0.16 * ((n * 31) % 7) / 6  # near the target: the newest turns are kept whole
            removed = tokens - int(thresholds.target * landed)
            actions = "mask,summarize" if summarize else "mask"
            if n - last_compaction < MIN_TURNS_BETWEEN:
                actions += ",churn"
            entry = compaction_entry(
                compaction_id=compaction_id,
                conversation=archived.id,
                time=at,
                model="gpt-4o",
                tokens_before=before,
                tokens_after=tokens - removed,
                actions=actions,
                messages=messages,
                previous=record,
                record=made,
                shadow=shape.shadows(n),
            )
            compactions.append(entry)
            record = replace(made, compaction_id=compaction_id)
            last_compaction = n
        turn = turn_entry(
            time=at,
            model="gpt-4o",
            tokens=tokens,
            sent=tokens - removed,
            thresholds=thresholds,
            actions=actions,
            compaction_id=compaction_id,
            fresh=compacted,
            recorded=record is not None,
            status=200,
            # The prompt cache serves what this turn shares with the one before: after a compaction, its head.
            cached=HEAD if compacted else min(tokens - removed, turns[-1]["sent"]) if turns else None,
            rewrite=compacted,
            shadow=shape.shadows(n),
        )
        turns.append(turn)
    archived.tokens, archived.turns, archived.compactions = tokens, turns, compactions
    return archived, turns, compactions


async def write_archive(path: str, shapes: list[Shape]) -> list[Archived]:
    """Write each conversation into the SQLite archive at `path`, as the proxy configured with it would."""
    store = open_archive(State(url=f"sqlite:///{path}"), Archive(enabled=True))
    written = []
    try:
        now = time.time()
        for shape in shapes:
            archived, turns, compactions = entries_of(shape, now=now)
            await store.add_turns([TurnWrite(archived.id, shape.label, turn) for turn in turns])
            for entry in compactions:
                await store.add_compaction(entry)
            written.append(archived)
    finally:
        await store.close()
    return written


def archive(path: str, shapes: list[Shape]) -> list[Archived]:
    """`write_archive`, in a thread of its own: the caller may run an event loop (Playwright's sync API does)."""
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, write_archive(path, shapes)).result()
