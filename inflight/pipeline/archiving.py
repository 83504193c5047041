"""What the archive keeps of a turn: built from the request as the pipeline handled it, and written later.

The entries (the turn's tokens, thresholds and actions; the compaction's dropped messages) are built
when the response starts and its status is known; `inflight.archive.writer` writes them in batches in
the background. Neither step ever fails or delays a request.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from inflight.archive import ArchiveStore, TurnWrite
from inflight.archive.entries import Thresholds, compaction_entry, conversation_id, conversation_label, turn_entry
from inflight.archive.writer import ArchiveWriter
from inflight.compaction import Budget
from inflight.config import Compaction
from inflight.pipeline.accounting import Accounting, Counted
from inflight.pipeline.engine import Options, key_of
from inflight.pipeline.outgoing import Prepared
from inflight.policy.cost import prompt_cost


def thresholds_of(accounting: Accounting, prepared: Prepared, settings: Compaction) -> Thresholds:
    """The turn's limits in the upstream's tokens: its budget (or the retry's limit) and the thresholds within it."""
    budget = Budget.of(prepared.limit, settings)
    background_at = settings.summarize.background_at
    prune_at, summarize_at = budget.prune_at, budget.summarize_at
    scheduled = prepared.scheduled
    if scheduled is not None:  # scheduled by cost: where this conversation's next compaction will happen
        prune_at = min(accounting.calibrated(scheduled.prune_at), budget.limit)
        summarize_at = min(accounting.calibrated(scheduled.summarize_at), budget.limit)
    return Thresholds(
        window=accounting.limits.context_window,
        budget=budget.limit,
        background_at=int(budget.limit * background_at) if background_at is not None else None,
        prune_at=prune_at,
        summarize_at=summarize_at,
        target=budget.target,
    )


class Archiver:
    """Archives each turn it is given (`archive.enabled`)."""

    def __init__(
        self,
        store: ArchiveStore,
        *,
        settings_for: Callable[[str], Compaction],
        on_error: Callable[[], None] | None = None,
        max_key_chars: int = 256,
    ) -> None:
        self.writer = ArchiveWriter(store, on_error=on_error)
        self.settings_for = settings_for  # a model's compaction settings (its thresholds)
        self.max_key_chars = max_key_chars  # `limits.max_key_chars`, to build the same key as compaction does

    @property
    def store(self) -> ArchiveStore:
        return self.writer.store

    @property
    def dropped(self) -> int:
        """The number of entries not written: too many waiting, a failed write, or a bug of ours."""
        return self.writer.dropped

    async def close(self) -> None:
        """Write the waiting entries (taking a few seconds at most), then close the store."""
        await self.writer.close()

    def turn(
        self,
        counted: Counted,
        accounting: Accounting,
        options: Options,
        prepared: Prepared,
        *,
        status: int,
        retrieved: Sequence[str] = (),
    ) -> None:
        """Archive one turn (and the compaction made on it), in the background. Never raises.

        `retrieved`: the handles the model read back (`inflight_retrieve`) while the turn was answered."""
        if self.writer.full:
            self.writer.lost("too many turns waiting for the store")
            return
        try:
            self._take(counted, accounting, options, prepared, status=status, retrieved=retrieved)
        except Exception as exc:  # a bug of ours in the archive must not cost the client its response
            self.writer.lost(f"a turn could not be archived ({type(exc).__name__}: {exc})", exc_info=True)

    def _take(
        self,
        counted: Counted,
        accounting: Accounting,
        options: Options,
        prepared: Prepared,
        *,
        status: int,
        retrieved: Sequence[str],
    ) -> None:
        key = prepared.key or key_of(counted, options, max_chars=self.max_key_chars)
        settings = self.settings_for(accounting.model)
        now = time.time()
        outcome = prepared.outcome
        conversation = conversation_id(key)
        plan = prepared.shadow_plan if prepared.shadow else prepared.plan
        # A shadow turn is archived as what it would have sent (the viewer marks it), since that is what it measures.
        sent = outcome.tokens_after if prepared.shadow and outcome is not None else prepared.sent_tokens
        turn = turn_entry(
            time=now,
            model=accounting.model,
            tokens=accounting.prompt_tokens,
            sent=accounting.calibrated(sent),
            thresholds=thresholds_of(accounting, prepared, settings),
            actions=plan.said() if plan is not None else "none",
            compaction_id=outcome.compaction_id or None if outcome is not None else None,
            fresh=outcome is not None and outcome.fresh,
            recorded=outcome is not None and not outcome.record.bare,
            status=status,
            cached=accounting.calibrated(prepared.cache.cached) if prepared.cache is not None else None,
            rewrite=prepared.cache is not None and prepared.cache.rewrite,
            shadow=prepared.shadow,
            **turn_costs(prepared, accounting),
        )
        if retrieved:  # only on a turn that read something back, so other entries stay as they were
            turn["retrieved"] = list(retrieved)
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
                messages=counted.request.messages,
                previous=outcome.previous,
                record=outcome.record,
                shadow=prepared.shadow,
            )
        self.writer.add(TurnWrite(conversation, conversation_label(key), turn), compaction)


def turn_costs(prepared: Prepared, accounting: Accounting) -> dict[str, int | None]:
    """The estimated prompt cost of the turn and of the client's own request, in units of one uncached input
    token (None: not measured)."""
    turn, prices = prepared.cache, prepared.prices
    if turn is None or prices is None:
        return {"cost": None, "client_cost": None}
    sent = prompt_cost(prices, tokens=accounting.calibrated(turn.tokens), cached=accounting.calibrated(turn.cached))
    theirs = accounting.calibrated(turn.client_tokens)
    client = prompt_cost(prices, tokens=theirs, cached=accounting.calibrated(turn.client_cached))
    return {"cost": round(sent), "client_cost": round(client)}
