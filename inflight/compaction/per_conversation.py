"""Compacting one conversation at a time, from the record kept for it, and keeping the new record.

A big conversation is compacted in a worker thread (`offload`), so the event loop keeps serving.
Two turns of one conversation may arrive together (an agent retrying, parallel sub-agents sharing a
head): a lock per conversation key makes the second reuse the first's record instead of paying
for a second summary.

With summaries made in the background (`SummaryAhead`), a turn past `background_at` starts the
job for its conversation, and the job's summary lands in the record (`Record.ahead`). A turn that
needs a summary and finds none waits up to `wait_s` for the running job (starting one if there is
none), then goes on without: the ledger stands in, and the summary is put in place when it lands.
How a job is started and its summary kept is `ahead_jobs.AheadJobs`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
import weakref
from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

import xxhash
from cachetools import LRUCache

from inflight.compaction.background.ahead import SummaryAhead
from inflight.compaction.background.jobs import AheadJobs, say_how_it_waited
from inflight.compaction.background.scheduler import BackgroundSummaries, Elsewhere, Superseded
from inflight.compaction.compactor import Compactor
from inflight.compaction.conversation import Conversation
from inflight.compaction.draft import Budget
from inflight.compaction.record import Record, RecordStore, best_record, new_compaction_id, with_record
from inflight.compaction.stage import Outcome
from inflight.compaction.stages.precomputed import PRECOMPUTED
from inflight.metrics.observer import NO_OBSERVER, Observer
from inflight.offload import run_sized

log = logging.getLogger("inflight")

T = TypeVar("T")

POLL_S = 0.05  # how often a turn waiting on another process's summary looks for it


class ConversationCompactions:
    def __init__(
        self, records: RecordStore, jobs: BackgroundSummaries | None = None, *, observer: Observer = NO_OBSERVER
    ) -> None:
        self.records = records
        self.jobs = jobs
        self.observer = observer  # told each record lookup's hit or miss
        self.ahead_jobs = AheadJobs(jobs, records, lock_for=self.lock_for, save=self.save)
        # Digests of the keys this process saved records under (a key may be long: its digest is 16 bytes).
        self._recorded: LRUCache[bytes, bool] = LRUCache(maxsize=100_000)
        self._locks: weakref.WeakValueDictionary[str, asyncio.Lock] = weakref.WeakValueDictionary()

    def recorded(self, key: str) -> bool:
        """Whether this process saved a record under `key` (a request under every threshold needs none else)."""
        return key_digest(key) in self._recorded

    async def compact(
        self,
        key: str,
        conversation: Conversation,
        *,
        compactor: Callable[[], Compactor],
        budget: Budget,
        force: bool,
        ahead: SummaryAhead | None = None,
    ) -> Outcome | None:
        """The outcome (None: send the conversation untouched); the record is saved under `key`.

        Most requests are far from any threshold: unless this process has kept a record under their
        key (a forced compaction, a budget that moved), they are told so without asking the store.
        Those between `background_at` and `prune_at` look for a record and may start a job, still
        without a lock or a compactor.
        """
        ahead = ahead if self.jobs is not None else None
        if ahead is not None and self.jobs is not None:
            self.jobs.touch(key)
        if not force and conversation.tokens <= budget.prune_at:
            start_at = ahead.start_at if ahead is not None else budget.prune_at
            if conversation.tokens <= start_at and not self.recorded(key):
                return None
            record = best_record(await self.records.load(key), conversation.digests)
            if record is None or record.bare:  # else `run` loads the record again, and counts that lookup
                self.observer.record_lookup(hit=record is not None)
                self.ahead_jobs.start(key, conversation, record, ahead, conversation.messages, conversation.tokens)
                return None
        outcome, record = await self.run(key, conversation, compactor, budget=budget, force=force)
        if outcome is None:
            self.ahead_jobs.start(key, conversation, record, ahead, conversation.messages, conversation.tokens)
            return None
        if ahead is not None and "fallback" in outcome.actions:  # a summary was due, and the ledger stood in
            outcome = await self.wait_for_summary(key, conversation, compactor, outcome, record, ahead, budget=budget)
        self.ahead_jobs.start(key, conversation, outcome.record, ahead, outcome.messages, outcome.tokens_after)
        return outcome

    async def run(
        self, key: str, conversation: Conversation, compactor: Callable[[], Compactor], *, budget: Budget, force: bool
    ) -> tuple[Outcome | None, Record | None]:
        """One compaction from the best record, under the conversation's lock; the record it started from."""
        async with self.lock_for(key):
            records = await self.records.load(key)
            record = best_record(records, conversation.digests)
            self.observer.record_lookup(hit=record is not None)
            built = compactor()  # on this loop: its summarizer calls come back here (`offload.on_home_loop`)

            def run() -> Awaitable[Outcome | None]:
                return built.run(conversation, budget=budget, record=record, force=force)

            outcome = await run_sized(run, conversation.tokens)
            if outcome is None:
                return None, record
            outcome.previous = record
            if record is not None and outcome.record == record:  # a record hit changes nothing: no write
                outcome.compaction_id = record.compaction_id
                return outcome, record
            # Another process may have landed a summary since the load: keep it (`with_ahead_kept`).
            new = with_ahead_kept(outcome.record, await self.records.load(key), conversation.digests)
            new = dataclasses.replace(new, compaction_id=new_compaction_id())
            outcome.record, outcome.compaction_id, outcome.fresh = new, new.compaction_id, True
            await self.save(key, with_record(records, record, new))
            return outcome, record

    async def wait_for_summary(
        self,
        key: str,
        conversation: Conversation,
        compactor: Callable[[], Compactor],
        outcome: Outcome,
        record: Record | None,
        ahead: SummaryAhead,
        *,
        budget: Budget,
    ) -> Outcome:
        """This turn needed a summary and had none made ahead (the ledger stands in, in `outcome`): wait up
        to `wait_s` for the conversation's job (started now if none runs); if it lands, compact again with it."""
        assert self.jobs is not None
        job = self.jobs.running(key) or self.ahead_jobs.start(
            key, conversation, record, ahead, conversation.messages, outcome.tokens_before, crossing=True
        )
        if job is None:
            return outcome
        deadline = time.monotonic() + ahead.wait_s
        landed = await self.jobs.wait(job, ahead.wait_s) and job.succeeded
        if isinstance(job.error, Superseded):  # what it would have made is in the store already: compact from it
            landed = True
        elif isinstance(job.error, Elsewhere):  # its summary will land in the shared store: look there
            landed = await self.ahead_jobs.landed_elsewhere(key, conversation, deadline)
        if landed:
            again, _ = await self.run(key, conversation, compactor, budget=budget, force=False)
            if again is not None and "summary-cached" not in outcome.actions:  # it replayed this turn's own digest
                # ... or, in a burst, the record another turn made with the summary meanwhile: then nothing else is
                # left to say, and the turn says what it sends rather than nothing.
                made = "fallback" if again.record.fallback else PRECOMPUTED
                again.actions = [action for action in again.actions if action != "summary-cached"] or [made]
            if again is not None:  # what this turn dropped is measured from before it: its ledger was never sent
                again.previous = outcome.previous
            outcome = again or outcome
        say_how_it_waited(outcome, job, conversation)
        return outcome

    @property
    def background(self) -> bool:
        """Whether summaries are made by background jobs (the server) rather than in line (a command)."""
        return self.jobs is not None

    @property
    def degraded(self) -> bool:
        """The shared record store failed: records are this process's alone until it is back."""
        return self.records.degraded

    def job_stats(self) -> dict[str, int] | None:
        """The background summaries' queue and what became of its jobs (None: no background jobs)."""
        return self.jobs.stats() if self.jobs is not None else None

    async def aclose(self) -> None:
        """Cancel the background jobs, then close the record store."""
        if self.jobs is not None:
            await self.jobs.close()
        await self.records.close()

    async def save(self, key: str, records: list[Record]) -> None:
        self._recorded[key_digest(key)] = True
        await self.records.save(key, records)

    def lock_for(self, key: str) -> asyncio.Lock:
        """The conversation's lock in this process: its turns, and a job landing, take it one at a time."""
        return self._locks.setdefault(key, asyncio.Lock())


def key_digest(key: str) -> bytes:
    return xxhash.xxh3_128_digest(key.encode("utf-8", "surrogatepass"))


def with_ahead_kept(new: Record, stored: Sequence[Record], digests: Sequence[bytes]) -> Record:
    """`new`, holding a summary made ahead that a stored record of the same conversation has and it lacks.

    Processes share records without a lock: a job elsewhere may have landed its summary after this
    compaction read the records. Without this, saving `new` would throw that paid-for summary away."""
    if new.ahead is not None:
        return new
    for record in stored:
        ahead = record.ahead
        if ahead is not None and ahead.usable(
            head_len=new.head_len, prefix_len=new.prefix_len, fallback=new.fallback, digests=digests
        ):
            return dataclasses.replace(new, ahead=ahead)
    return new
