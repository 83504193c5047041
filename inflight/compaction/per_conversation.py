"""Compact one conversation at a time, starting from its stored record, and save the new record.

A big conversation is compacted in a worker thread (`offload`), so the event loop keeps serving.
Two turns of one conversation may arrive together (an agent retrying, parallel sub-agents sharing a
head): a lock per conversation key makes the second reuse the first's record instead of paying
for a second summary.

With background summaries (`SummaryAhead`), a turn past `background_at` starts a job for its
conversation, and the job saves its summary in the record (`Record.ahead`). A turn that needs a
summary and has none waits up to `wait_s` for the running job (starting one if none runs). If the
summary is still not ready, a digest of the ledger is sent instead, and the summary is used once saved.
`background.jobs.AheadJobs` starts the jobs and saves their summaries.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
import weakref
from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

from cachetools import LRUCache

from inflight.compaction.actions import Action
from inflight.compaction.background.ahead import SummaryAhead
from inflight.compaction.background.jobs import AheadJobs, say_how_it_waited
from inflight.compaction.background.scheduler import BackgroundSummaries, Elsewhere, Superseded
from inflight.compaction.compactor import Compactor
from inflight.compaction.conversation import Conversation
from inflight.compaction.draft import Budget
from inflight.compaction.record import (
    Precomputed,
    Record,
    RecordStore,
    best_record,
    key_digest,
    new_compaction_id,
    with_record,
)
from inflight.compaction.stage import Outcome
from inflight.compaction.stages.precomputed import PRECOMPUTED
from inflight.metrics.observer import NO_OBSERVER, Observer
from inflight.offload import run_sized

log = logging.getLogger("inflight")

T = TypeVar("T")

POLL_S = 0.05  # how often a turn waiting for another process's summary checks the store


class ConversationCompactions:
    def __init__(
        self, records: RecordStore, jobs: BackgroundSummaries | None = None, *, observer: Observer = NO_OBSERVER
    ) -> None:
        self.records = records
        self.jobs = jobs
        self.observer = observer  # told whether each record lookup found a record
        self.ahead_jobs = AheadJobs(jobs, records, lock_for=self.lock_for, save=self.save)
        # Digests of the keys this process saved records under (16 bytes each, since keys can be long).
        self._recorded: LRUCache[bytes, bool] = LRUCache(maxsize=100_000)
        self._locks: weakref.WeakValueDictionary[str, asyncio.Lock] = weakref.WeakValueDictionary()

    def needs_nothing(self, key: str, tokens: int, start_at: int) -> bool:
        """Whether a request of `tokens` goes as it came without asking the store: under `start_at`, the first
        threshold at which any work could start, and this process never saved a record under `key`."""
        return tokens <= start_at and key_digest(key) not in self._recorded

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
        """Compact the conversation and save its record under `key`; None means send it unchanged.

        Most requests are far below every threshold. Unless this process saved a record under their key
        (after a forced compaction, or a budget that moved), they return None without asking the store.
        Requests between `background_at` and `prune_at` look up a record and may start a background job,
        still without taking the lock or building a compactor.
        """
        ahead = ahead if self.jobs is not None else None
        if ahead is not None and self.jobs is not None:
            self.jobs.touch(key)
        if not force and conversation.tokens <= budget.first_at:
            start_at = ahead.start_at if ahead is not None else budget.first_at
            if self.needs_nothing(key, conversation.tokens, start_at):
                return None
            record = best_record(await self.records.load(key), conversation.matched)
            if record is None or record.bare:  # otherwise `run` loads the record again and counts that lookup
                self.observer.record_lookup(hit=record is not None)
                self.ahead_jobs.start(key, conversation, record, ahead, conversation.messages, conversation.tokens)
                return None
        outcome, record = await self.run(key, conversation, compactor, budget=budget, force=force)
        if outcome is None:
            self.ahead_jobs.start(key, conversation, record, ahead, conversation.messages, conversation.tokens)
            return None
        if ahead is not None and Action.FALLBACK in outcome.actions:  # a summary was due; a ledger digest replaced it
            outcome = await self.wait_for_summary(key, conversation, compactor, outcome, record, ahead, budget=budget)
        self.ahead_jobs.start(key, conversation, outcome.record, ahead, outcome.messages, outcome.tokens_after)
        return outcome

    async def run(
        self, key: str, conversation: Conversation, compactor: Callable[[], Compactor], *, budget: Budget, force: bool
    ) -> tuple[Outcome | None, Record | None]:
        """Run one compaction from the best record, under the conversation's lock; also return that record."""
        async with self.lock_for(key):
            records = await self.records.load(key)
            record = best_record(records, conversation.matched)
            self.observer.record_lookup(hit=record is not None)
            built = compactor()  # built on this loop, where its summarizer calls will run (`offload.on_home_loop`)

            def run() -> Awaitable[Outcome | None]:
                return built.run(conversation, budget=budget, record=record, force=force)

            outcome = await run_sized(run, conversation.tokens)
            if outcome is None:
                return None, record
            outcome.previous = record
            if record is not None and outcome.record == record:  # a replayed record changed nothing: no write
                outcome.compaction_id = record.compaction_id
                return outcome, record
            # Another process may have saved a background summary since the load: keep it (`with_ahead_kept`).
            new = with_ahead_kept(outcome.record, await self.records.load(key), conversation.matched)
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
        """Wait up to `wait_s` for a background summary this turn needs, then compact again with it.

        `outcome` uses a ledger digest in place of the missing summary. The conversation's job is started now
        if none runs; if its summary does not arrive in time, `outcome` is returned as it is."""
        assert self.jobs is not None
        job = self.jobs.running(key) or self.ahead_jobs.start(
            key, conversation, record, ahead, conversation.messages, outcome.tokens_before, needed_now=True
        )
        if job is None:
            return outcome
        deadline = time.monotonic() + ahead.wait_s
        ready = await self.jobs.wait(job, ahead.wait_s) and job.succeeded
        if isinstance(job.error, Superseded):  # the summary it would make is already stored: compact from it
            ready = True
        elif isinstance(job.error, Elsewhere):  # another process is making it and will save it in the shared store
            ready = await self.ahead_jobs.saved_by_another_process(key, conversation, deadline)
        if ready:
            again, _ = await self.run(key, conversation, compactor, budget=budget, force=False)
            if again is not None and Action.SUMMARY_CACHED not in outcome.actions:
                # The second run replayed a record: this turn's own digest, or, in a burst, the record another
                # turn made with the summary meanwhile. Report what is sent rather than only "summary-cached".
                made = Action.FALLBACK if again.record.fallback else PRECOMPUTED
                again.actions = [action for action in again.actions if action != Action.SUMMARY_CACHED] or [made]
            if again is not None:  # measure what was dropped against the previous record: the digest was never sent
                again.previous = outcome.previous
            outcome = again or outcome
        say_how_it_waited(outcome, job, conversation)
        return outcome

    async def summary_ahead(self, key: str, digests: Sequence[bytes]) -> Precomputed | None:
        """The summary made ahead for this conversation, if one is stored and still fits it (a compaction now needs no
        summarizer call)."""
        record = best_record(await self.records.load(key), digests)
        return record.ahead if record is not None and record.ahead_usable(digests) else None

    @property
    def background(self) -> bool:
        """Whether summaries are made by background jobs (the server) rather than inline (a CLI command)."""
        return self.jobs is not None

    @property
    def degraded(self) -> bool:
        """Whether the shared record store is failing, so records are kept in this process's memory for now."""
        return self.records.degraded

    def job_stats(self) -> dict[str, int] | None:
        """Counts of queued, running and finished background jobs; None without background jobs."""
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
        """The conversation's lock in this process, taken by each of its turns and by a job saving its summary."""
        return self._locks.setdefault(key, asyncio.Lock())


def with_ahead_kept(new: Record, stored: Sequence[Record], digests: Sequence[bytes]) -> Record:
    """Return `new`, with a stored record's background summary copied in if `new` has none and it still applies.

    Processes share records without a lock, so another process's job may have saved a summary after this
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
