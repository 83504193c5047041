"""Write the archive without making a request wait for it or fail because of it.

A turn's entries (`inflight.pipeline.archiving` builds them when its response starts and its status
is known) are written a moment later by one background task, together with every other turn that
arrived meanwhile (one store call, one SQLite transaction, so a busy proxy does not pay a write per
request). A failing store is logged once a minute and counted
(`inflight_store_errors_total{store="archive"}`); the request never notices. At most
`MAX_WAITING` turns wait; beyond that they are dropped (and counted) rather than held in memory
behind a slow store.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

from inflight.archive.store import ArchiveStore, TurnWrite

log = logging.getLogger("inflight")

WRITE_EVERY_S = 0.05  # turns are written in batches: one store call (one transaction) for all queued meanwhile
MAX_WAITING = 10_000  # most turns that may wait for a slow store; beyond that they are dropped (and counted)
MAX_WAITING_COMPACTIONS = 100  # each may hold megabytes of dropped messages
WARN_EVERY_S = 60.0
CLOSE_WAIT_S = 5.0


class ArchiveWriter:
    def __init__(self, store: ArchiveStore, *, on_error: Callable[[], None] | None = None) -> None:
        self.store = store
        self.on_error = on_error  # counts a failed write (`inflight_store_errors_total{store="archive"}`)
        self.dropped = 0  # entries not written: too many waiting, a failed write, or a bug in inflight
        self._turns: list[TurnWrite] = []
        self._compactions: list[dict[str, Any]] = []
        self._writer: asyncio.Task[None] | None = None
        self._warned_at = 0.0

    @property
    def full(self) -> bool:
        """Whether the queue is full, so the next turn would be dropped (callers then skip building it)."""
        return len(self._turns) >= MAX_WAITING

    def add(self, turn: TurnWrite, compaction: dict[str, Any] | None) -> None:
        """Queue a turn (and the compaction made on it) for the next batch. Never raises, never waits."""
        if self.full:
            self.lost("too many turns waiting for the store")
            return
        self._turns.append(turn)
        if compaction is not None and len(self._compactions) < MAX_WAITING_COMPACTIONS:
            self._compactions.append(compaction)
        elif compaction is not None:
            self.lost("too many compactions waiting for the store")
        if self._writer is None:
            self._writer = asyncio.ensure_future(self._write_soon())

    async def _write_soon(self) -> None:
        """Write what is queued every `WRITE_EVERY_S` while turns arrive: one store call for many turns."""
        try:
            await asyncio.sleep(WRITE_EVERY_S)
            await self._write_waiting()
        finally:
            self._writer = None

    async def _write_waiting(self) -> None:
        while self._turns or self._compactions:
            turns, self._turns = self._turns, []
            compactions, self._compactions = self._compactions, []
            try:
                if turns:
                    await self.store.add_turns(turns)
                for compaction in compactions:
                    await self.store.add_compaction(compaction)
            except Exception as exc:  # the archive is for looking back: it never costs a request anything
                self.lost(f"the store failed ({type(exc).__name__}: {exc})", count=len(turns) + len(compactions))

    def lost(self, why: str, *, count: int = 1, exc_info: bool = False) -> None:
        """Count `count` entries as lost and one store error (`inflight_store_errors_total{store="archive"}`).

        The loss is logged at most once a minute."""
        self.dropped += count
        if self.on_error is not None:
            self.on_error()
        if time.monotonic() - self._warned_at > WARN_EVERY_S:
            self._warned_at = time.monotonic()
            log.warning("[archive] entries lost: %s", why, exc_info=exc_info)

    async def close(self) -> None:
        """Write what is queued (for a few seconds at most), then close the store."""
        try:
            await asyncio.wait_for(self._flush(), CLOSE_WAIT_S)
        except TimeoutError:
            log.warning("[archive] %d turns not written at shutdown", len(self._turns))
        finally:
            await self.store.close()

    async def _flush(self) -> None:
        if self._writer is not None:
            await asyncio.shield(self._writer)  # let the batch in progress be written rather than dropped
        await self._write_waiting()
