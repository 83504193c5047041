"""How deep a compaction goes: far enough that the next one is `min_turns_between` turns away.

A compaction rewrites the prefix the upstream has cached, so the turn after it pays full price
for its prompt (often ten times a cached one). Compacting just under a threshold makes the next
turn cross it again, and a conversation whose turns are big then pays that price every turn. So
a compaction aims at where the conversation, growing as its recent turns did, takes
`min_turns_between` turns to reach `summarize_at` again; no deeper than it needs (the configured
`target` is the shallowest it aims), and never below its floor: the head, a summary's room and
the latest turn, which are all a compaction can keep.

Masking costs no call; a summary does. When even the floor cannot give those turns (the turns are
too big for the window), a summary is made only when it at least doubles the turns before the
next compaction, against masking alone (a summarizer call costs about what a rewrite does), or
when masking alone would leave no room for the next turn. When no summarizer can be called (none
configured, or the client's summarizer budget spent), the ledger stands in for nothing, and goes
to the floor whenever that gives more turns. When summaries are made ahead (the server's default),
the one ready is put in place down to the aim, and below `summarize_at` none is asked for unless
masking would leave no room for the next turn.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from inflight.compaction.conversation import Message
from inflight.config import Prices
from inflight.config import Summarize as SummarizeSettings
from inflight.policy.cost import Schedule, summary_cost

RECENT_TURNS = 8  # the growth a compaction plans for: the mean of this many latest turns


@dataclass(frozen=True)
class Spacing:
    """How far apart compactions are to be, and what a summary costs: the same rules for a compaction and for the
    background job that plans the summary it will put in place."""

    summarize: SummarizeSettings  # the room a summary takes (`max_summary_tokens`)
    min_turns: int  # `compaction.min_turns_between`
    summary_costs: bool = True  # a summary is a summarizer call (False: the ledger stands in, for nothing)
    # Summaries are made ahead, in the background: the one ready is put in place first (`PrecomputedStage`), and
    # below summarize_at none is asked for unless the next turn would compact again (the ledger standing in, a
    # wait for the job, a second rewrite when it lands, cost more than the turns it buys).
    summaries_ahead: bool = False
    # The upstream's prices: compactions come when, and go as deep as, costs least per turn (`inflight.policy.cost`),
    # never before `prune_at` (the first) and `summarize_at` (the next). None: by those thresholds alone.
    prices: Prices | None = None


@dataclass(frozen=True)
class Depth:
    """Where one compaction aims, from how the conversation grows (token figures in our own units)."""

    growth: int  # tokens a turn adds, as the recent turns did
    floor: int  # the least a compaction can send: fixed part, head, a summary's room, the latest turn
    aim: int  # where this compaction stops: at most `target`, at least `floor`
    summarize_at: int  # where the next compaction comes (a record in use waits for it)
    spacing: Spacing

    schedule: Schedule | None = None  # the conversation priced, when compactions are scheduled by cost
    trigger: int = 0  # priced: where a compaction costs least per turn, whatever the thresholds say

    @classmethod
    def plan(
        cls,
        *,
        growth: int,
        floor: int,
        target: int,
        summarize_at: int,
        spacing: Spacing,
        limit: int = 0,
        fixed: int = 0,
    ) -> Depth:
        """Priced (`spacing.prices`), a compaction goes to its floor (what it keeps costs a write now and a read
        every turn after) and the next comes where the cost per turn is least, past `summarize_at`, within `limit`.
        Else it goes deep enough that `min_turns` turns reach `summarize_at`, no deeper than `target` needs."""
        if spacing.prices is not None and growth > 0 and limit > 0:
            schedule = Schedule(spacing.prices, growth, fixed)
            trigger = schedule.best_trigger(kept=floor, limit=limit)
            return cls(growth, floor, floor, max(summarize_at, trigger), spacing, schedule, trigger)
        spaced = summarize_at - spacing.min_turns * growth  # from here, `min_turns` turns reach summarize_at
        return cls(growth, floor, max(min(target, spaced), floor), summarize_at, spacing)

    def turns_left(self, tokens: int) -> float:
        """Turns from a request of `tokens` until the conversation crosses `summarize_at` again."""
        if self.growth <= 0:
            return math.inf
        return max(self.summarize_at - tokens, 0) / self.growth

    def churns(self, tokens: int) -> bool:
        """Whether a compaction that sends `tokens` leaves fewer than `min_turns` turns before the next one."""
        return self.turns_left(tokens) < self.spacing.min_turns

    def summary_pays(self, tokens: int) -> bool:
        """Masking left `tokens`, above the aim: whether a summary (down to the floor) is worth its call.
        It is when it gives the turns asked for, or at least twice as many as masking alone, or when masking
        alone would have the very next turn compact again and the floor would not; when it costs no call
        (the ledger stands in), whenever it gives more turns. Never without spacing (`min_turns` 0, or no
        growth yet): then a summary waits for `summarize_at`, as it always did."""
        spacing = self.spacing
        if self.schedule is not None:
            return self.summary_cheaper(tokens)
        if spacing.min_turns <= 0 or self.growth <= 0:
            return False
        spaced = self.summarize_at - spacing.min_turns * self.growth
        masked, floor = self.turns_left(tokens), self.turns_left(self.floor)
        if not spacing.summary_costs:
            return floor > masked
        if masked < 1 <= floor:  # else the very next turn compacts again
            return True
        return not spacing.summaries_ahead and (self.floor <= spaced or floor >= 2 * masked)

    def summary_cheaper(self, tokens: int) -> bool:
        """Priced: whether a summary down to the floor costs less per turn, its call included, than keeping the
        `tokens` masking left (or the very next turn would compact again without it)."""
        assert self.schedule is not None
        if self.turns_left(tokens) < 1 <= self.turns_left(self.floor):
            return True
        call = 0.0
        if self.spacing.summary_costs and not self.spacing.summaries_ahead:  # made ahead, it is paid for already
            room = self.spacing.summarize.max_summary_tokens
            call = summary_cost(
                self.schedule.prices, input_tokens=max(tokens - self.floor, 0) + room, output_tokens=room
            )
        summarized = self.schedule.per_turn(kept=self.floor, trigger=self.summarize_at, summary=call)
        return summarized < self.schedule.per_turn(kept=tokens, trigger=self.summarize_at)


def growth_per_turn(messages: Sequence[Message], sizes: Sequence[int], *, head_len: int) -> int:
    """The mean tokens of the conversation's latest turns (an assistant message and what answers it),
    each message as it arrived (`sizes`: its count, or its truncated form's)."""
    starts = [
        index
        for index in range(max(head_len, 1), len(messages))
        if messages[index].get("role") == "assistant" and messages[index - 1].get("role") != "assistant"
    ]
    if not starts:
        return 0
    ends = [*starts[1:], len(messages)]
    recent = list(zip(starts, ends, strict=True))[-RECENT_TURNS:]
    return sum(sum(sizes[start:end]) for start, end in recent) // len(recent)
