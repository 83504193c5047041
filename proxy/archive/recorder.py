"""Writing the archive without making a request wait for it, and without failing one.

A turn's entries are built when its response starts (its status known) and written a moment later
by one background task, with every other turn that came meanwhile (one store call, one SQLite
transaction: a busy proxy does not pay a write per request). A store that fails is logged once a
minute and counted (`inflight_store_errors_total{store="archive"}`); the request never notices.
At most `MAX_WAITING` turns wait: past that they are dropped (and counted) rather than held in
memory behind a slow store.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

from proxy.archive.entries import Thresholds, compaction_entry, conversation_id, conversation_label, turn_entry
from proxy.archive.store import ArchiveStore, TurnWrite
from proxy.compaction import Budget
from proxy.config import Compaction
from proxy.pipeline.accounting import Accounting, Counted
from proxy.pipeline.engine import Options, key_of
from proxy.pipeline.outgoing import Prepared

log = logging.getLogger("inflight")

WRITE_EVERY_S = 0.05  # turns are written in batches: one store call (one transaction) for all that came meanwhile
MAX_WAITING = 10_000  # turns waiting for a store that is slow: past that they are dropped (and counted)
MAX_WAITING_COMPACTIONS = 100  # each may hold megabytes of dropped messages
WARN_EVERY_S = 60.0
CLOSE_WAIT_S = 5.0


def thresholds_of(accounting: Accounting, prepared: Prepared, settings: Compaction) -> Thresholds:
    """The turn's limits in the upstream's tokens: its budget (or the retry's limit) and the thresholds of it."""
    budget = Budget.of(prepared.limit, settings)
    background_at = settings.summarize.background_at
    return Thresholds(
        window=accounting.limits.context_window,
        budget=budget.limit,
        background_at=int(budget.limit * background_at) if background_at is not None else None,
        prune_at=budget.prune_at,
        summarize_at=budget.summarize_at,
        target=budget.target,
    )


class Archiver:
    def __init__(
        self,
        store: ArchiveStore,
        *,
        settings_for: Callable[[str], Compaction],
        on_error: Callable[[], None] | None = None,
    ) -> None:
        self.store = store
        self.settings_for = settings_for  # a model's compaction settings (its thresholds)
        self.on_error = on_error  # counts a failed write (`inflight_store_errors_total{store="archive"}`)
        self.dropped = 0  # entries not written: too many waiting, a failed write, a bug of ours
        self._turns: list[TurnWrite] = []
        self._compactions: list[dict[str, Any]] = []
        self._writer: asyncio.Task[None] | None = None
        self._warned_at = 0.0

    def turn(
        self, counted: Counted, accounting: Accounting, options: Options, prepared: Prepared, *, status: int
    ) -> None:
        """Archive one turn (and the compaction made on it), in the background. Never raises."""
        if len(self._turns) >= MAX_WAITING:
            self._lost("too many turns waiting for the store")
            return
        try:
            self._take(counted, accounting, options, prepared, status=status)
        except Exception as exc:  # a bug of ours in the archive must not cost the client its response
            self._lost(f"a turn could not be archived ({type(exc).__name__}: {exc})", exc_info=True)

    def _take(
        self, counted: Counted, accounting: Accounting, options: Options, prepared: Prepared, *, status: int
    ) -> None:
        key = prepared.key or key_of(counted, options)
        settings = self.settings_for(accounting.model)
        now = time.time()
        outcome = prepared.outcome
        conversation = conversation_id(key)
        headers = prepared.headers
        turn = turn_entry(
            time=now,
            model=accounting.model,
            tokens=accounting.prompt_tokens,
            sent=accounting.calibrated(prepared.sent_tokens),
            thresholds=thresholds_of(accounting, prepared, settings),
            actions=headers.get("x-inflight-actions", "none"),
            compaction_id=outcome.compaction_id or None if outcome is not None else None,
            fresh=outcome is not None and outcome.fresh,
            recorded=outcome is not None and not outcome.record.bare,
            status=status,
        )
        compaction = None
        if outcome is not None and outcome.fresh:
            compaction = compaction_entry(
                compaction_id=outcome.compaction_id,
                conversation=conversation,
                time=now,
                model=accounting.model,
                tokens_before=accounting.calibrated(outcome.tokens_before),
                tokens_after=accounting.calibrated(outcome.tokens_after),
                actions=turn["actions"],
                messages=counted.payload["messages"],
                previous=outcome.previous,
                record=outcome.record,
            )
        self._turns.append(TurnWrite(conversation, conversation_label(key), turn))
        if compaction is not None and len(self._compactions) < MAX_WAITING_COMPACTIONS:
            self._compactions.append(compaction)
        elif compaction is not None:
            self._lost("too many compactions waiting for the store")
        if self._writer is None:
            self._writer = asyncio.ensure_future(self._write_soon())

    async def _write_soon(self) -> None:
        """Write what waits, every `WRITE_EVERY_S` while turns come: one store call for many turns."""
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
                self._lost(f"the store failed ({type(exc).__name__}: {exc})", count=len(turns) + len(compactions))

    def _lost(self, why: str, *, count: int = 1, exc_info: bool = False) -> None:
        """Entries not archived (`count`): one store error more (`inflight_store_errors_total{store="archive"}`),
        logged once a minute."""
        self.dropped += count
        if self.on_error is not None:
            self.on_error()
        if time.monotonic() - self._warned_at > WARN_EVERY_S:
            self._warned_at = time.monotonic()
            log.warning("[archive] entries lost: %s", why, exc_info=exc_info)

    async def close(self) -> None:
        """Write what waits (a few seconds at most), then close the store."""
        try:
            await asyncio.wait_for(self._flush(), CLOSE_WAIT_S)
        except TimeoutError:
            log.warning("[archive] %d turns not written at shutdown", len(self._turns))
        finally:
            await self.store.close()

    async def _flush(self) -> None:
        if self._writer is not None:
            await asyncio.shield(self._writer)  # the batch it holds is written, not dropped
        await self._write_waiting()
