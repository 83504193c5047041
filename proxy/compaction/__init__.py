"""Compaction: pure functions over message lists (no HTTP here; counting and the summarizer are passed in)."""

from proxy.compaction.background.ahead import SummaryAhead
from proxy.compaction.compactor import Compactor, build_compactor
from proxy.compaction.conversation import Conversation, head_length
from proxy.compaction.draft import Budget
from proxy.compaction.per_conversation import ConversationCompactions
from proxy.compaction.record import Record, RecordStore, conversation_key
from proxy.compaction.stage import Outcome
from proxy.compaction.summary_job import Summarize, SummaryJob

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
