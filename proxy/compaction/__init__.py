"""Compaction: pure functions over message lists (no HTTP here; the summarizer is passed in)."""

from proxy.compaction.engine import Budget, Compactor, Conversation, Outcome
from proxy.compaction.record import MemoryRecordStore, Record, RecordStore, best_record, conversation_key, with_record
from proxy.compaction.summary import SummaryJob

__all__ = [
    "Budget",
    "Compactor",
    "Conversation",
    "MemoryRecordStore",
    "Outcome",
    "Record",
    "RecordStore",
    "SummaryJob",
    "best_record",
    "conversation_key",
    "with_record",
]
