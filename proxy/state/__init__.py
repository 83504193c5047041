"""Where compaction records are kept. `open_record_store` picks the store the config asks for."""

from __future__ import annotations

from proxy.compaction.records import RecordStore
from proxy.config import Cache
from proxy.state.memory import MemoryRecordStore


def open_record_store(settings: Cache) -> RecordStore:
    return MemoryRecordStore(max_entries=settings.max_entries, max_bytes=settings.max_bytes, ttl_s=settings.ttl_s)


__all__ = ["MemoryRecordStore", "open_record_store"]
