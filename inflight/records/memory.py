"""Compaction records kept in this process's memory, limited by count, bytes and age.

A count alone does not limit memory: a record holds the truncated and masked messages it substitutes,
so one 30 MB conversation's record can weigh as much as thousands of small ones. Each key's records
are sized roughly when saved (their messages' text), plus the cost of the key itself (its digest and
the cache's bookkeeping: `KEY_BYTES`), and the oldest keys are evicted once either limit is exceeded.
Keys and lease names are stored as digests (`codec.stored_key`), so a client's megabyte-long session
id takes no more room than any other.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence

import orjson
from cachetools import TTLCache

from inflight.compaction.record import Record
from inflight.records.codec import stored_key

log = logging.getLogger("inflight")

RECORD_OVERHEAD_BYTES = 512  # the dataclasses, dicts and digests around each message's text
KEY_BYTES = 256  # a key's digest (a 32-character str) and the cache's link, timer and dict entries for it


def weight(records: Sequence[Record]) -> int:
    """Roughly how many bytes these records take: their messages' text, plus a fixed overhead each."""
    total = 0
    for record in records:
        messages = [r.message for r in record.replaced.values()]
        if record.summary is not None:
            messages.append(record.summary)
        for message in messages:
            content = message.get("content")
            total += RECORD_OVERHEAD_BYTES
            total += len(content) if isinstance(content, str) else len(orjson.dumps(content, default=str))
        if record.ahead is not None:
            total += len(record.ahead.text) + RECORD_OVERHEAD_BYTES
        for ledger in (record.ledger, record.ahead.ledger if record.ahead else None):
            if ledger is None:
                continue
            entries = [*ledger.commands, *ledger.outcomes.values(), *ledger.files, *ledger.errors, *ledger.identifiers]
            total += sum(len(entry) + 64 for entry in entries)
    return total


def kept_weight(records: Sequence[Record]) -> int:
    """The bytes that keeping these records under a key costs: their weight plus the key's."""
    return weight(records) + KEY_BYTES


class MemoryRecordStore:
    def __init__(self, *, max_entries: int, max_bytes: int, ttl_s: float) -> None:
        self.max_entries = max_entries
        self._cache: TTLCache[str, list[Record]] = TTLCache(maxsize=max_bytes, ttl=ttl_s, getsizeof=kept_weight)
        self._leases: dict[str, tuple[str, float]] = {}  # name -> (owner, expiry on the monotonic clock)

    @property
    def degraded(self) -> bool:
        """Always False: this store either serves or fails (`ResilientStore` is what falls back to memory)."""
        return False

    async def load(self, key: str) -> list[Record]:
        key = stored_key(key)
        records = self._cache.get(key)
        if records is None:
            return []
        self._cache[key] = records  # restart its time to live, since replaying a record saves nothing
        return list(records)

    async def save(self, key: str, records: list[Record]) -> None:
        shown, key = key[:48], stored_key(key)
        try:
            self._cache[key] = records
        except ValueError:  # bigger than the whole store allows: the next turn compacts from scratch instead
            self._cache.pop(key, None)
            log.warning(
                "[compaction] record for %s (%d bytes) exceeds compaction.cache.max_bytes", shown, weight(records)
            )
            return
        while len(self._cache) > self.max_entries:
            self._cache.popitem()

    async def lease(self, name: str, owner: str, ttl_s: float) -> bool:
        name, now = stored_key(name), time.monotonic()
        holder = self._leases.get(name)
        if holder is not None and holder[0] != owner and holder[1] > now:
            return False
        self._leases = {n: held for n, held in self._leases.items() if held[1] > now}  # drop expired leases
        self._leases[name] = (owner, now + ttl_s)
        return True

    async def release(self, name: str, owner: str) -> None:
        name = stored_key(name)
        if self._leases.get(name, ("", 0.0))[0] == owner:
            del self._leases[name]

    async def close(self) -> None:
        return None

    def __len__(self) -> int:
        return len(self._cache)

    @property
    def bytes(self) -> int:
        return int(self._cache.currsize)
