"""Compacting one conversation at a time, from the record kept for it, and keeping the new record.

A big conversation is compacted in a worker thread (`offload`), so the event loop keeps serving.
Two turns of one conversation may arrive together (an agent retrying, parallel sub-agents sharing a
head): a lock per conversation key makes the second reuse the first's record instead of paying
for a second summary.

With summaries made in the background (`SummaryAhead`), a turn past `background_at` starts the
job for its conversation, and the job's summary lands in the record (`Record.ahead`). A turn that
needs a summary and finds none waits up to `wait_s` for the running job (starting one if there is
none), then goes on without: the ledger stands in, and the summary is put in place when it lands.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
import uuid
import weakref
from collections.abc import Awaitable, Callable, Sequence

from proxy.compaction.ahead import SummaryAhead
from proxy.compaction.background import BackgroundSummaries, Elsewhere, Job
from proxy.compaction.compactor import Compactor
from proxy.compaction.conversation import Conversation, Message, head_length
from proxy.compaction.draft import Budget, Draft
from proxy.compaction.offload import run_sized
from proxy.compaction.records import Precomputed, Record, RecordStore, best_record, with_record
from proxy.compaction.stages.precomputed import PRECOMPUTED
from proxy.compaction.work import Outcome

log = logging.getLogger("inflight")

POLL_S = 0.05  # how often a turn waiting on another process's summary looks for it


class ConversationCompactions:
    def __init__(self, records: RecordStore, jobs: BackgroundSummaries | None = None) -> None:
        self.records = records
        self.jobs = jobs
        self.owner = uuid.uuid4().hex  # this process, as the holder of a job's lease
        self._locks: weakref.WeakValueDictionary[str, asyncio.Lock] = weakref.WeakValueDictionary()

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

        Most requests are far from any threshold: they are told so without asking the store (a
        conversation only grows, so one this short was never compacted, and no job is due). Those
        between `background_at` and `prune_at` look for a record and may start a job, still
        without a lock or a compactor.
        """
        ahead = ahead if self.jobs is not None else None
        if ahead is not None and self.jobs is not None:
            self.jobs.touch(key)
        if not force and conversation.tokens <= budget.prune_at:
            if ahead is None or conversation.tokens <= ahead.start_at:
                return None
            record = best_record(await self.records.load(key), conversation.digests)
            if record is None or record.bare:
                self.start_ahead(key, conversation, record, ahead, conversation.messages, conversation.tokens)
                return None
        outcome, record = await self.run(key, conversation, compactor, budget=budget, force=force)
        if outcome is None:
            self.start_ahead(key, conversation, record, ahead, conversation.messages, conversation.tokens)
            return None
        if ahead is not None and "fallback" in outcome.actions:  # a summary was due, and the ledger stood in
            outcome = await self.wait_for_summary(key, conversation, compactor, outcome, record, ahead, budget=budget)
        self.start_ahead(key, conversation, outcome.record, ahead, outcome.messages, outcome.tokens_after)
        return outcome

    async def run(
        self, key: str, conversation: Conversation, compactor: Callable[[], Compactor], *, budget: Budget, force: bool
    ) -> tuple[Outcome | None, Record | None]:
        """One compaction from the best record, under the conversation's lock; the record it started from."""
        lock = self._locks.setdefault(key, asyncio.Lock())
        async with lock:
            records = await self.records.load(key)
            record = best_record(records, conversation.digests)
            built = compactor()  # on this loop: its summarizer calls come back here (`offload.on_home_loop`)

            def run() -> Awaitable[Outcome | None]:
                return built.run(conversation, budget=budget, record=record, force=force)

            outcome = await run_sized(run, conversation.tokens)
            if outcome is not None and outcome.record != record:  # a record hit changes nothing: no write
                await self.records.save(key, with_record(records, record, outcome.record))
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
        job = self.jobs.running(key) or self.start_ahead(
            key, conversation, record, ahead, conversation.messages, outcome.tokens_before, crossing=True
        )
        if job is None:
            return outcome
        deadline = time.monotonic() + ahead.wait_s
        landed = await self.jobs.wait(job, ahead.wait_s) and job.succeeded
        if isinstance(job.error, Elsewhere):  # its summary will land in the shared store: look there
            landed = await self.landed_elsewhere(key, conversation, deadline)
        if landed:
            again, _ = await self.run(key, conversation, compactor, budget=budget, force=False)
            outcome = again or outcome
        say_how_it_waited(outcome, job, conversation)
        return outcome

    async def landed_elsewhere(self, key: str, conversation: Conversation, deadline: float) -> bool:
        """Whether another process's summary of this conversation reaches the store before `deadline`."""
        while True:
            record = best_record(await self.records.load(key), conversation.digests)
            if record is not None and record.ahead_usable(conversation.digests):
                return True
            if time.monotonic() >= deadline:
                return False
            await asyncio.sleep(min(POLL_S, max(deadline - time.monotonic(), 0)))

    def start_ahead(
        self,
        key: str,
        conversation: Conversation,
        record: Record | None,
        ahead: SummaryAhead | None,
        sent: Sequence[Message],
        sent_tokens: int,
        *,
        crossing: bool = False,
    ) -> Job | None:
        """Start the background summary this conversation will need, if it is past `background_at` and has none."""
        if ahead is None or self.jobs is None or (not crossing and sent_tokens <= ahead.start_at):
            return None
        if record is not None and record.ahead_usable(conversation.digests):
            return None
        base = record.prefix_hash if record is not None else b"head"

        lease = f"summary:{key}"  # one job per conversation across the processes that share the store

        async def make() -> object:
            def work() -> Awaitable[Precomputed]:
                return ahead.make(conversation, record, sent, sent_tokens)

            if not await self.records.lease(lease, self.owner, ahead.lease_s):
                raise Elsewhere(f"another process summarizes {key[:48]}")
            try:
                return await run_sized(work, conversation.tokens)  # choosing the cut, rendering the transcript
            except BaseException:
                await self.records.release(lease, self.owner)
                raise

        async def land(result: object) -> None:
            assert isinstance(result, Precomputed)
            try:
                await self.land(key, conversation, result)
            finally:
                await self.records.release(lease, self.owner)
            log.info(
                "[compaction] summary made ahead for %s: messages up to %d, %d summarizer call(s), %.0f ms",
                key[:48],
                result.cut,
                result.calls,
                result.made_ms,
            )

        return self.jobs.start(key, base, make, land, started_by=conversation if crossing else None)

    async def land(self, key: str, conversation: Conversation, ahead: Precomputed) -> None:
        """Keep a job's summary in the records it may serve (a bare one if none); each use checks it again.

        A record of the job's conversation qualifies, and so does one made since that reaches past
        the job's messages (a turn compacted while the job ran): no hash can tell the two apart,
        and `Precomputed.usable` checks the summary against each request's messages anyway."""
        lock = self._locks.setdefault(key, asyncio.Lock())
        async with lock:
            records = await self.records.load(key)
            digests = conversation.digests
            serves = [r.matches(digests) or r.prefix_len > len(digests) for r in records]
            updated = [dataclasses.replace(r, ahead=ahead) if ok else r for r, ok in zip(records, serves, strict=True)]
            if not any(serves):  # no record yet (the first compaction is ahead): a bare one holds it
                head_len = head_length(conversation.messages)
                bare = dataclasses.replace(Draft(head_len, head_len).freeze(conversation), ahead=ahead)
                updated = with_record(records, None, bare)
            await self.records.save(key, updated)


def say_how_it_waited(outcome: Outcome, job: Job, conversation: Conversation) -> None:
    """The actions and notes of a turn that waited for a summary job."""
    if PRECOMPUTED in outcome.actions:
        if job.started_by is conversation:  # made for this very turn, while it waited
            outcome.actions = ["summarize" if action == PRECOMPUTED else action for action in outcome.actions]
            made = job.result
            if isinstance(made, Precomputed):
                outcome.summarizer_calls, outcome.summarizer_ms = made.calls, made.made_ms
    if not job.done.is_set():
        outcome.actions.append("summary-pending")
        outcome.notes["summary"] = "pending"
    elif job.error is not None and not isinstance(job.error, asyncio.CancelledError):
        outcome.notes["summarizer_error"] = type(job.error).__name__
        rejected = getattr(job.error, "rejected", None)
        if rejected:
            outcome.actions.append(f"summary-rejected-{rejected}")
