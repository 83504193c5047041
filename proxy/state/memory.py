"""Compaction records kept in this process's memory, bounded in count and age."""

from __future__ import annotations

from cachetools import TTLCache

from proxy.compaction.records import Record


class MemoryRecordStore:
    def __init__(self, *, max_entries: int, ttl_s: float) -> None:
        self._cache: TTLCache[str, list[Record]] = TTLCache(maxsize=max_entries, ttl=ttl_s)

    async def load(self, key: str) -> list[Record]:
        return list(self._cache.get(key, ()))

    async def save(self, key: str, records: list[Record]) -> None:
        self._cache[key] = records  # re-saving a record on each hit also renews its time to live

    def __len__(self) -> int:
        return len(self._cache)
