"""Compaction: pure functions over message lists (no HTTP here; counting and the summarizer are passed in)."""

from proxy.compaction.ahead import SummaryAhead
from proxy.compaction.compactor import Compactor, build_compactor
from proxy.compaction.conversation import Conversation, head_length
from proxy.compaction.draft import Budget
from proxy.compaction.offload import on_home_loop
from proxy.compaction.records import Record, RecordStore, conversation_key
from proxy.compaction.runner import ConversationCompactions
from proxy.compaction.summary import Summarize, SummaryJob
from proxy.compaction.work import Outcome

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
    "on_home_loop",
]
