"""What a turn's compaction did, as one name each: said in `x-inflight-actions`, the log line, the
metrics' `action` label and the archive, so every reader gets the same closed set."""

from __future__ import annotations

from enum import StrEnum


class Action(StrEnum):
    """One step a compaction took (or, in shadow mode, would have taken)."""

    NONE = "none"  # sent as the client sent it
    TRUNCATE = "truncate"  # an oversized tool output cut to its head and tail
    MASK = "mask"  # an old tool output replaced by a placeholder
    SUMMARIZE = "summarize"  # older history summarized by the summarizer on this turn
    SUMMARY_CACHED = "summary-cached"  # a summary kept from an earlier turn, sent again
    SUMMARY_PRECOMPUTED = "summary-precomputed"  # a summary made in the background before this turn needed it
    SUMMARY_PENDING = "summary-pending"  # a background summary is still being made; the ledger stands in
    SUMMARY_BUDGET = "summary-budget"  # the client's summarizer budget is spent; the ledger stands in
    FALLBACK = "fallback"  # no summary could be had: a ledger of what was dropped stands in
    CHURN = "churn"  # the next compaction is fewer turns away than `min_turns_between`
    EXPANDED = "expanded"  # nothing compacted; inflight's own compaction items written out for the upstream
    ITEM_UNREADABLE = "item-unreadable"  # an item of inflight's could not be opened (another key): a note went instead
    ANSWERED_COMPACTION = "answered-compaction"  # the agent's own compaction request answered from inflight's summary
    RETRY = "retry"  # the upstream refused the first attempt as too long; compacted again and resent
    ERROR = "error"  # inflight's compaction failed; the request went as the client sent it
    REJECTED_TRUNCATED = "summary-rejected-truncated"  # the summarizer's reply was cut by its length limit
    REJECTED_UNFINISHED = "summary-rejected-unfinished"  # the summarizer stopped before it finished
    REJECTED_LENGTH = "summary-rejected-length"  # the summary was longer than its room
    REJECTED_SECTIONS = "summary-rejected-sections"  # the summary lacked the sections the prompt asks for
    REJECTED_COPY = "summary-rejected-copy"  # the summary copied the transcript instead of summarizing it

    @classmethod
    def rejected(cls, reason: str) -> Action:
        """The action for a summary refused for `reason` (`inflight.compaction.validation.rejection`)."""
        return cls(f"summary-rejected-{reason}")


# Actions that do not say the request was compacted (its tokens before and after are not a compaction's).
NOT_COMPACTIONS = frozenset({Action.NONE, Action.RETRY, Action.ERROR})
