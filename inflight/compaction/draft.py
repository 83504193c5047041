"""The state one compaction builds: the budget it aims for, and the record being built (`Draft`).

Token figures here are in our own (uncalibrated) units; the caller converts the budget.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from inflight.compaction.conversation import Conversation, Message, pinned, tool_identity
from inflight.compaction.ledger import Ledger
from inflight.compaction.record import Precomputed, Record, Replacement, prefix_hash
from inflight.config import Compaction
from inflight.frozen import frozen


@frozen(slots=True)
class Budget:
    """The request's budget and the thresholds derived from it, in tokens."""

    limit: int
    prune_at: int
    summarize_at: int
    target: int
    spaced: bool = True  # a compaction may go below target to delay the next one (`inflight.compaction.depth`)
    # With `goal: cost`: the size from which a compaction is weighed at all, since one may pay long before prune_at;
    # prune_at and summarize_at are then the latest it may come. None (`goal: fit`): nothing before prune_at.
    earliest: int | None = None

    @classmethod
    def of(cls, limit: int, settings: Compaction, *, fixed: int = 0) -> Budget:
        """The budget of a request whose fixed part (tools, system) is `fixed`."""
        prune_at = int(limit * settings.prune_at)
        earliest = None
        if settings.goal == "cost":  # below the floor plus a summary's room, no compaction can pay
            tail = min(settings.summarize.keep_recent_tokens, limit // 4)
            earliest = min(prune_at, fixed + tail + settings.summarize.max_summary_tokens)
        return cls(
            limit=limit,
            prune_at=prune_at,
            summarize_at=int(limit * settings.summarize_at),
            target=int(limit * settings.target),
            earliest=earliest,
        )

    @property
    def first_at(self) -> int:
        """The size above which a conversation with no record may be compacted: `earliest`, else `prune_at`."""
        return self.prune_at if self.earliest is None else self.earliest

    @classmethod
    def exactly(cls, limit: int) -> Budget:
        """A budget whose thresholds all equal the limit: compact to just under it and no further."""
        return cls(limit=limit, prune_at=limit, summarize_at=limit, target=limit, spaced=False)


# (message as sent, its tokens, its index in the client's list or None for the summary)
ViewItem = tuple[Message, int, int | None]


@dataclass(slots=True)
class Draft:
    """A record being built: which prefix a summary replaces, and which later messages are replaced."""

    head_len: int
    prefix_len: int
    summary: Message | None = None
    summary_tokens: int = 0
    fallback: bool = False
    replaced: dict[int, Replacement] = field(default_factory=dict)
    ledger: Ledger | None = None
    ahead: Precomputed | None = None

    @classmethod
    def from_record(cls, record: Record, conversation: Conversation) -> Draft:
        digests, matched = conversation.digests, conversation.matched
        replaced = {
            index: r
            for index, r in record.replaced.items()
            if index < len(digests)
            and (digests[index] == r.digest or digests[index] != matched[index] == tool_identity(r.message))
        }
        return cls(
            record.head_len,
            record.prefix_len,
            record.summary,
            record.summary_tokens,
            record.fallback,
            replaced,
            record.ledger,
            record.ahead,
        )

    def view(self, conversation: Conversation) -> list[ViewItem]:
        """The messages to send, in order: the head, the summary, pinned messages of the middle, then the rest."""
        messages, counts = conversation.messages, conversation.counts
        out: list[ViewItem] = [self._item(i, messages, counts) for i in range(self.head_len)]
        if self.summary is not None:
            out.append((self.summary, self.summary_tokens, None))
        out += [(messages[i], counts[i], i) for i in range(self.head_len, self.prefix_len) if pinned(messages[i])]
        out += [self._item(i, messages, counts) for i in range(self.prefix_len, len(messages))]
        return out

    def _item(self, index: int, messages: Sequence[Message], counts: Sequence[int]) -> ViewItem:
        replacement = self.replaced.get(index)
        if replacement is None:
            return messages[index], counts[index], index
        return replacement.message, replacement.tokens, index

    def tokens(self, conversation: Conversation) -> int:
        return conversation.fixed_tokens + sum(tokens for _, tokens, _ in self.view(conversation))

    def freeze(self, conversation: Conversation) -> Record:
        return Record(
            head_len=self.head_len,
            prefix_len=self.prefix_len,
            prefix_hash=prefix_hash(conversation.matched[: self.prefix_len]),
            summary=self.summary,
            summary_tokens=self.summary_tokens,
            fallback=self.fallback,
            replaced=dict(self.replaced),
            ledger=self.ledger,
            ahead=self.ahead,
        )
