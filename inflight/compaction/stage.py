"""What compaction stages share: the `Work` they read and extend, the `Outcome`, the `Stage` interface.

A stage decides from the `Work` whether it has anything to do, changes the draft, and says what
it did in the outcome. Adding a stage is a new module in `inflight.compaction.stages` and a line in
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
    """What a compaction produced and did: the messages to send, the record to keep, the figures to log."""

    messages: list[Message]
    tokens_before: int
    tokens_after: int
    actions: list[Action]
    record: Record
    fits: bool
    messages_replaced: int = 0
    summarizer_ms: float | None = None
    summarizer_calls: int = 0
    notes: dict[str, str] = field(default_factory=dict)  # what went wrong on the way, for the log line
    compaction_id: str = ""  # the compaction whose record this is (a replay keeps the id of the one it replays)
    fresh: bool = False  # a new compaction (a new record saved), not a replay of the stored one
    previous: Record | None = None  # the record it started from, to tell what this compaction dropped
    # Scheduled by cost: the thresholds this turn was measured against (where the next compaction comes), which the
    # archive and the viewer show in place of the configured ones. None: the configured ones.
    scheduled: Budget | None = None
    # Each message sent: its tokens, and its index in the client's list (None: the summary). The prompt cache's
    # figures are worked out from them after the answer (`prefix.view_ids`), off the request's path.
    sent_counts: list[int] = field(default_factory=list)
    sent_origins: list[int | None] = field(default_factory=list)


@dataclass
class Work:
    """One compaction of one conversation: what every stage reads and extends."""

    conversation: Conversation
    draft: Draft
    budget: Budget
    outcome: Outcome
    count_message: Callable[[Message], int]
    # A big message's tokens from samples, for what will likely be masked or summarized next (None: count).
    estimate_message: Callable[[Message], int] | None = None
    force: bool = False
    latest_request: int | None = None  # the user message no stage but the last resort touches
    prune: bool = False  # truncate and mask are due (decided once, before either runs)
    middle_replaced: bool = False  # a summary (or the digest fallback) replaced the middle this time
    estimated: set[int] = field(default_factory=set)  # replacements whose tokens are estimates, to count if sent
    depth: Depth | None = None  # where the compaction aims, from the conversation's growth (None: at target)

    def count_replacement(self, index: int, message: Message, *, size: int) -> int:
        """The tokens of `message`, replacing message `index`: estimated when it is `size` characters or more
        of text (it is counted exactly at the end if it is still sent), else counted."""
        if self.estimate_message is None or size < ESTIMATE_REPLACEMENTS_FROM:
            return self.count_message(message)
        self.estimated.add(index)
        return self.estimate_message(message)

    @property
    def tokens(self) -> int:
        return self.draft.tokens(self.conversation)

    def latest_user_message(self) -> int | None:
        """The latest user message, unless it alone takes more than a quarter of the budget (a huge observation,
        which goes first). For a text-action agent it is the latest observation, not a request: what the
        agent reads to choose its next command. Neither truncated nor cut."""
        index = last_user_index(self.conversation.messages)
        if index is None or self.conversation.counts[index] > self.budget.limit // 4:
            return None
        return index

    @property
    def aim(self) -> int:
        """Where truncating, masking and summarizing stop: `target`, or deeper for a conversation that grows fast."""
        return self.depth.aim if self.depth is not None else self.budget.target

    def summary_due(self) -> bool:
        """A summary (or the ledger in its place) replaces the middle: forced, over `summarize_at`, or left above
        the aim by masking when a summary pays for its call (`Depth.summary_pays`)."""
        if self.middle_replaced:
            return False
        tokens = self.tokens
        if self.force or tokens > self.budget.summarize_at:
            return True
        return self.prune and tokens > self.aim and self.depth is not None and self.depth.summary_pays(tokens)


ESTIMATE_REPLACEMENTS_FROM = 16_384  # characters: a truncated output this long is estimated until it is sent


class Stage(Protocol):
    async def run(self, work: Work) -> None: ...
