"""Writing the archive without making a request wait for it, and without failing one.

A turn's entries are built when its response starts (its status known) and written by a task of
their own. A store that fails is logged once a minute and counted (`store_errors`); the request
never notices. At most `MAX_PENDING` writes wait at once: past that, entries are dropped (and
counted) rather than held in memory behind a slow store.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

from proxy.accounting import Accounting, Counted
from proxy.archive.entries import Thresholds, compaction_entry, conversation_id, conversation_label, turn_entry
from proxy.archive.store import ArchiveStore
from proxy.config import Compaction
from proxy.pipeline import Options, key_of
from proxy.prepared import Prepared

log = logging.getLogger("inflight")

MAX_PENDING = 256
WARN_EVERY_S = 60.0


def thresholds_of(accounting: Accounting, prepared: Prepared, settings: Compaction) -> Thresholds:
    """The turn's limits in the upstream's tokens: its budget (or the retry's limit) times each fraction."""
    limit = prepared.limit
    background_at = settings.summarize.background_at
    return Thresholds(
        window=accounting.limits.context_window,
        budget=limit,
        background_at=int(limit * background_at) if background_at is not None else None,
        prune_at=int(limit * settings.prune_at),
        summarize_at=int(limit * settings.summarize_at),
        target=int(limit * settings.target),
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
        self.dropped = 0  # entries not written: too many writes waiting
        self._pending: set[asyncio.Task[None]] = set()
        self._warned_at = 0.0

    def turn(
        self, counted: Counted, accounting: Accounting, options: Options, prepared: Prepared, *, status: int
    ) -> None:
        """Archive one turn (and the compaction made on it), in the background."""
        if len(self._pending) >= MAX_PENDING:
            self.dropped += 1
            return
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
        task = asyncio.ensure_future(self._write(conversation, conversation_label(key), turn, compaction))
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)

    async def _write(
        self, conversation: str, label: str, turn: dict[str, Any], compaction: dict[str, Any] | None
    ) -> None:
        try:
            await self.store.add_turn(conversation, label=label, turn=turn)
            if compaction is not None:
                await self.store.add_compaction(compaction)
        except Exception as exc:  # the archive is for looking back: it never costs a request anything
            if self.on_error is not None:
                self.on_error()
            if time.monotonic() - self._warned_at > WARN_EVERY_S:
                self._warned_at = time.monotonic()
                log.warning("[archive] write failed (%s: %s); entries are being lost", type(exc).__name__, exc)

    async def close(self) -> None:
        """Finish the writes under way (a few seconds at most), then close the store."""
        if self._pending:
            await asyncio.wait(set(self._pending), timeout=5)
        await self.store.close()
