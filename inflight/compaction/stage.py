"""What compaction stages share: the `Work` they read and update, the `Outcome`, and the `Stage` interface.

A stage looks at the `Work` to decide whether it has anything to do, changes the draft, and records
what it did in the outcome. To add a stage, add a module to `inflight.compaction.stages` and a line to
its `build_stages`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from inflight.compaction.actions import Action
from inflight.compaction.conversation import Conversation, Message, last_user_index
from inflight.compaction.depth import Depth
from inflight.compaction.draft import Budget, Draft
from inflight.compaction.record import Record


@dataclass
class Outcome:
    """The result of a compaction: the messages to send, the record to keep, and the figures to log."""

    messages: list[Message]
    tokens_before: int
    tokens_after: int
    actions: list[Action]
    record: Record
    fits: bool
    messages_replaced: int = 0
    summarizer_ms: float | None = None
    summarizer_calls: int = 0
    notes: dict[str, str] = field(default_factory=dict)  # problems met along the way, for the log line
    compaction_id: str = ""  # the compaction whose record this is (a replay keeps the id of the one it replays)
    fresh: bool = False  # a new compaction (a new record saved), not a replay of the stored one
    previous: Record | None = None  # the record it started from, used to tell what this compaction dropped
    # When scheduled by cost: the thresholds this turn was measured against (when the next compaction happens),
    # which the archive and the viewer show instead of the configured ones. None: the configured ones.
    scheduled: Budget | None = None
    # For each message sent, its tokens and its index in the client's list (None: the summary). The prompt cache
    # figures are computed from them after the answer (`prefix.view_ids`), outside the request's path.
    sent_counts: list[int] = field(default_factory=list)
    sent_origins: list[int | None] = field(default_factory=list)


@dataclass
class Work:
    """The state of one compaction of one conversation, which every stage reads and updates."""

    conversation: Conversation
    draft: Draft
    budget: Budget
    outcome: Outcome
    count_message: Callable[[Message], int]
    # Estimates a big message's tokens from samples, for text likely to be masked or summarized next (None: count).
    estimate_message: Callable[[Message], int] | None = None
    force: bool = False
    latest_request: int | None = None  # the user message that only the last-resort stage may touch
    prune: bool = False  # whether truncate and mask are due (decided once, before either runs)
    middle_replaced: bool = False  # whether a summary (or the ledger digest) replaced the middle this time
    estimated: set[int] = field(default_factory=set)  # replacements with estimated tokens, to count if sent
    depth: Depth | None = None  # how deep the compaction goes, from the conversation's growth (None: to target)
    handles: bool = False  # placeholders name the handle the original can be read back by (`compaction.retrieval`)
    # Where the agent's recent work starts (`middle.recent_from`): no stage but the last resort changes a message
    # from there on. None: it does not fit the budget, so only the latest turn is kept whole, as with `fit` before.
    recent_from: int | None = None

    def recent(self, index: int) -> bool:
        """Whether message `index` is part of the agent's recent work, which goes upstream verbatim."""
        return self.recent_from is not None and index >= self.recent_from

    def count_replacement(self, index: int, message: Message, *, size: int) -> int:
        """Count `message`, which replaces message `index`.

        Text of `ESTIMATE_REPLACEMENTS_FROM` characters or more is only estimated, and counted exactly at the end
        if it is still sent."""
        if self.estimate_message is None or size < ESTIMATE_REPLACEMENTS_FROM:
            return self.count_message(message)
        self.estimated.add(index)
        return self.estimate_message(message)

    @property
    def tokens(self) -> int:
        return self.draft.tokens(self.conversation)

    def latest_user_message(self) -> int | None:
        """The latest user message, which is neither truncated nor cut, unless it alone exceeds a quarter of the budget.

        Such a huge message (an observation) is shrunk first. For a text-action agent this is the latest
        observation rather than a request: what the agent reads to choose its next command."""
        index = last_user_index(self.conversation.messages)
        if index is None or self.conversation.counts[index] > self.budget.limit // 4:
            return None
        return index

    @property
    def aim(self) -> int:
        """The size at which truncating, masking and summarizing stop: `target`, or lower for a fast-growing one."""
        return self.depth.aim if self.depth is not None else self.budget.target

    def summary_due(self) -> bool:
        """Whether a summary (or a ledger digest) should replace the middle now.

        It should when forced, when over `summarize_at`, or when masking left the request above the aim and a
        summary is worth its call (`Depth.summary_pays`)."""
        if self.middle_replaced:
            return False
        tokens = self.tokens
        if self.force or tokens > self.budget.summarize_at:
            return True
        return self.prune and tokens > self.aim and self.depth is not None and self.depth.summary_pays(tokens)


ESTIMATE_REPLACEMENTS_FROM = 16_384  # characters: a replacement this long is estimated, and counted only if sent


class Stage(Protocol):
    async def run(self, work: Work) -> None: ...
