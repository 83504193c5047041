"""Compaction: pure functions over message lists (no HTTP here; counting and the summarizer are passed in)."""

from inflight.compaction.background.ahead import SummaryAhead
from inflight.compaction.compactor import Compactor, build_compactor
from inflight.compaction.conversation import Conversation, head_length
from inflight.compaction.draft import Budget
from inflight.compaction.per_conversation import ConversationCompactions
from inflight.compaction.record import Record, RecordStore, conversation_key
from inflight.compaction.stage import Outcome
from inflight.compaction.summary_job import Summarize, SummaryJob

__all__ = [
    "Budget",
    "Compactor",
    "Conversation",
    "ConversationCompactions",
    "Outcome",
    "Record",
    "RecordStore",
    "Summarize",
    "SummaryAhead",
    "SummaryJob",
    "build_compactor",
    "conversation_key",
    "head_length",
]
