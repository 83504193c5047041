"""Wrap a shared store so it fails open: while it fails, records are kept in this process's memory.

If Redis is unreachable, the SQLite file stays locked past its timeout or the disk is full, the request
is still served. Its compaction uses in-process records (the next turn's prefix may differ from what
another worker sends, and a restart forgets them), the response says `x-inflight-state: degraded`, and
a warning is logged. After a failure the shared store is not tried again for `RETRY_AFTER_S`, so a
dead Redis costs one timeout per period rather than one per request.

Records saved in memory meanwhile are carried over once the shared store is back: the next load of such a
key takes them with the shared store's, and writes them there. A conversation compacted during the outage
then keeps its summary and the prompt it was sent, rather than being summarized again.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

from cachetools import LRUCache

from inflight.compaction.record import MAX_RECORDS_PER_KEY, Record, RecordStore
from inflight.metrics.observer import NO_OBSERVER, Observer
from inflight.records.memory import MemoryRecordStore

log = logging.getLogger("inflight")

T = TypeVar("T")
RETRY_AFTER_S = 5.0


class ResilientStore:
    def __init__(
        self, primary: RecordStore, fallback: MemoryRecordStore, *, name: str, observer: Observer = NO_OBSERVER
    ) -> None:
        self.primary = primary
        self.fallback = fallback
        self.name = name
        self.observer = observer  # told of each failure, with the store's kind (`sqlite`, `redis`)
        self.failed_at: float | None = None  # when the shared store last failed (None: it works)
        self.errors = 0
        # Keys saved in memory while the shared store failed, to carry over when it is back (the oldest forgotten
        # past the memory store's own count: their records are gone from it too).
        self.carried: LRUCache[str, bool] = LRUCache(maxsize=fallback.max_entries)

    @property
    def degraded(self) -> bool:
        return self.failed_at is not None

    async def load(self, key: str) -> list[Record]:
        records = await self._either(lambda store: store.load(key))
        if key in self.carried and not self.degraded:
            records = await self._carry_over(key, records)
        return records

    async def save(self, key: str, records: list[Record]) -> None:
        await self._either(lambda store: store.save(key, records))
        if self.degraded:
            self.carried[key] = True
        else:
            self.carried.pop(key, None)

    async def _carry_over(self, key: str, shared: list[Record]) -> list[Record]:
        """The shared store's records with those saved in memory during the outage after them (newest last: they
        are the newer), written back to it; kept in memory still if that write fails."""
        kept = await self.fallback.load(key)
        records = [*(record for record in shared if record not in kept), *kept][-MAX_RECORDS_PER_KEY:]
        await self._either(lambda store: store.save(key, records))
        if self.degraded:  # failing again: kept in memory, still to carry over
            return records
        self.carried.pop(key, None)
        log.info("[state] a conversation's records kept in memory while %s failed were carried over", self.name)
        return records

    async def lease(self, name: str, owner: str, ttl_s: float) -> bool:
        return await self._either(lambda store: store.lease(name, owner, ttl_s))

    async def release(self, name: str, owner: str) -> None:
        await self._either(lambda store: store.release(name, owner))

    async def close(self) -> None:
        await self.primary.close()

    async def _either(self, call: Callable[[RecordStore], Awaitable[T]]) -> T:
        if self.failed_at is not None and time.monotonic() - self.failed_at < RETRY_AFTER_S:
            return await call(self.fallback)
        try:
            result = await call(self.primary)
        except Exception as exc:  # whatever the store's client raises: the request goes on without it
            self.errors += 1
            self.observer.store_error(store=self.name.partition(":")[0])
            if self.failed_at is None:
                log.warning("[state] %s failed (%s: %s); keeping records in memory", self.name, type(exc).__name__, exc)
            self.failed_at = time.monotonic()
            return await call(self.fallback)
        if self.failed_at is not None:
            log.warning("[state] %s is back", self.name)
            self.failed_at = None
        return result
