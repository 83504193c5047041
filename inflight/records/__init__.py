"""Stores for compaction records. `open_record_store` opens the one `state.url` names.

Memory belongs to this process alone. SQLite and Redis are shared and survive a restart; each is
wrapped in `ResilientStore`, which serves from memory while the shared store fails.
"""

from __future__ import annotations

from inflight.compaction.record import RecordStore
from inflight.config import Cache, State
from inflight.metrics.observer import NO_OBSERVER, Observer
from inflight.records.memory import MemoryRecordStore
from inflight.records.resilient import ResilientStore


def open_record_store(state: State, cache: Cache, *, observer: Observer = NO_OBSERVER) -> RecordStore:
    memory = MemoryRecordStore(max_entries=cache.max_entries, max_bytes=cache.max_bytes, ttl_s=cache.ttl_s)
    if state.scheme == "memory":
        return memory
    if state.scheme == "sqlite":
        from inflight.records.sqlite import SqliteRecordStore

        sqlite = SqliteRecordStore(state.sqlite_path, ttl_s=cache.ttl_s, max_bytes=cache.max_bytes)
        return ResilientStore(sqlite, memory, name=state.url, observer=observer)
    from inflight.records.redis import RedisRecordStore  # redis-py is imported only when Redis is used

    redis = RedisRecordStore(state.url, ttl_s=cache.ttl_s)
    return ResilientStore(redis, memory, name="redis", observer=observer)


__all__ = ["MemoryRecordStore", "ResilientStore", "open_record_store"]
