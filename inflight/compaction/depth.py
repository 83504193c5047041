"""Decide how deep a compaction goes: far enough that the next one is `min_turns_between` turns away.

A compaction rewrites the prefix the upstream has cached, so the turn after it pays full price
for its prompt (often ten times a cached one). Compacting to just under a threshold means the next
turn passes it again, and a conversation with big turns then pays that price every turn. So a
compaction aims at the size from which the conversation, growing as its recent turns did, takes
`min_turns_between` turns to reach `summarize_at` again. It goes no deeper than needed (the configured
`target` is the shallowest aim), and never below its floor.

Masking costs no call; a summary does. When even the floor cannot give that many turns (the turns are
too big for the window), a summary is made only if it at least doubles the turns until the next
compaction compared with masking alone (a summarizer call costs about as much as a cache rewrite), or
if masking alone would leave no room for the next turn. When no summarizer can be called (none is
configured, or the client's summarizer budget is spent), the free ledger digest is used and goes down to
the floor whenever that gives more turns. When summaries are made ahead (the server's default), the
ready one is used down to the aim, and below `summarize_at` none is requested unless masking would
leave no room for the next turn.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from inflight.compaction.conversation import Message
from inflight.config import Prices
from inflight.config import Summarize as SummarizeSettings
from inflight.frozen import frozen
from inflight.policy.cost import Schedule, summary_cost

RECENT_TURNS = 8  # a compaction plans for growth equal to the mean size of this many latest turns


@frozen
class Spacing:
    """How far apart compactions should be and what a summary costs.

    Both a compaction and the background job that plans its summary use these same rules."""

    summarize: SummarizeSettings  # gives the room a summary takes (`max_summary_tokens`)
    min_turns: int  # `compaction.min_turns_between`
    summary_costs: bool = True  # a summary needs a summarizer call (False: a free ledger digest is used)
    # Summaries are made ahead, in the background. A ready one is used first (`PrecomputedStage`), and below
    # summarize_at none is requested unless the next turn would compact again: a stand-in digest, a wait for the
    # job and a second rewrite when its summary arrives would cost more than the turns it buys.
    summaries_ahead: bool = False
    # The upstream's prices: compactions happen when, and go as deep as, costs least per turn (`inflight.policy.cost`),
    # but never before `prune_at` (the first) or `summarize_at` (later ones). None: by the thresholds alone.
    prices: Prices | None = None


@frozen
class Depth:
    """The size one compaction aims for, based on how the conversation grows (token figures in our own units)."""

    growth: int  # tokens a turn adds, judged by the recent turns
    floor: int  # the least a compaction can send: fixed part, head, a summary's room, the latest turn
    aim: int  # the size this compaction stops at: at most `target`, at least `floor`
    summarize_at: int  # the size at which the next compaction happens (until then the record is replayed)
    spacing: Spacing

    schedule: Schedule | None = None  # the cost model of the conversation, when compactions are scheduled by cost
    trigger: int = 0  # with prices: the size at which compacting costs least per turn, regardless of thresholds
    latest: bool = False  # `goal: cost`: the thresholds are the latest a compaction may come, not the earliest
    summary_input: int = 0  # about what the summarizer would read now (0: judged from what masking left)

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
        latest: bool = False,
        masked: int = 0,
        summary_input: int = 0,
    ) -> Depth:
        """Plan a compaction's aim and when the next one happens.

        With prices (`spacing.prices`), it goes to the floor, since what it keeps costs a cache write now and a
        read every later turn, and the next one comes where cost per turn is least: past `summarize_at`, or with
        `latest` (`goal: cost`) no later than it, and within `limit`. Otherwise it goes just deep enough that
        `min_turns` turns reach `summarize_at`, at most `target`. With `latest`, the next compaction is timed from
        what masking alone would leave (`masked`), since masking is done first and a summary only when it pays."""
        if spacing.prices is not None and growth > 0 and limit > 0:
            schedule = Schedule(spacing.prices, growth, fixed)
            trigger = schedule.best_trigger(kept=max(floor, masked) if latest else floor, limit=limit)
            next_at = min(summarize_at, trigger) if latest else max(summarize_at, trigger)
            return cls(growth, floor, floor, next_at, spacing, schedule, trigger, latest, summary_input)
        spaced = summarize_at - spacing.min_turns * growth  # from this size, `min_turns` turns reach summarize_at
        return cls(growth, floor, max(min(target, spaced), floor), summarize_at, spacing)

    def turns_left(self, tokens: int) -> float:
        """How many turns a request of `tokens` has until the conversation passes `summarize_at` again."""
        if self.growth <= 0:
            return math.inf
        return max(self.summarize_at - tokens, 0) / self.growth

    def churns(self, tokens: int) -> bool:
        """Whether a compaction that sends `tokens` leaves fewer than `min_turns` turns before the next one."""
        return self.turns_left(tokens) < self.spacing.min_turns

    def summary_pays(self, tokens: int) -> bool:
        """Whether a summary down to the floor is worth its call, when masking left `tokens`, above the aim.

        It is when it gives the turns asked for, or at least twice as many as masking alone, or when masking
        alone would make the very next turn compact again and the floor would not. When it costs no call (a
        ledger digest), it is whenever it gives more turns. Without spacing (`min_turns` 0, or no growth yet)
        it never is, and a summary waits for `summarize_at`."""
        spacing = self.spacing
        if self.schedule is not None:
            return self.summary_cheaper(tokens)
        if spacing.min_turns <= 0 or self.growth <= 0:
            return False
        spaced = self.summarize_at - spacing.min_turns * self.growth
        masked, floor = self.turns_left(tokens), self.turns_left(self.floor)
        if not spacing.summary_costs:
            return floor > masked
        if masked < 1 <= floor:  # otherwise the very next turn compacts again
            return True
        return not spacing.summaries_ahead and (self.floor <= spaced or floor >= 2 * masked)

    def summary_cheaper(self, tokens: int) -> bool:
        """With prices: whether a summary down to the floor, its call included, costs less per turn than keeping
        the `tokens` masking left, or is needed to stop the very next turn compacting again."""
        assert self.schedule is not None
        if self.turns_left(tokens) < 1 <= self.turns_left(self.floor):
            return True
        call = 0.0
        # A summary made ahead is already paid, unless compactions come early (`goal: cost`): then masking, which
        # costs no call, folds what it can, and a summary is asked for only when it pays for its call too.
        if self.spacing.summary_costs and (self.latest or not self.spacing.summaries_ahead):
            room = self.spacing.summarize.max_summary_tokens
            read = self.summary_input or max(tokens - self.floor, 0) + room
            call = summary_cost(self.schedule.prices, input_tokens=read, output_tokens=room)
        summarized = self.schedule.per_turn(kept=self.floor, trigger=self.summarize_at, summary=call)
        return summarized < self.schedule.per_turn(kept=tokens, trigger=self.summarize_at)


def growth_per_turn(messages: Sequence[Message], sizes: Sequence[int], *, head_len: int) -> int:
    """The mean size in tokens of the latest turns (an assistant message and what answers it).

    `sizes` gives each message as it arrived: its count, or its truncated form's count."""
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
