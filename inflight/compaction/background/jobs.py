"""Start a conversation's background summary and save the result: the lease, the job, and saving it.

`ConversationCompactions` decides when: on a turn past `background_at`, or on a turn that needs a
summary now and has none. This module does the rest. Planning the job (the cut, the transcript, its
chunks) is CPU work, done off the event loop when the conversation is big; the summarizer calls are
awaited on the loop, so a slow summarizer ties up no thread. When processes share the store, a lease
per conversation lets only one of them run the job; it is renewed while the job runs.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager

from inflight.compaction.actions import Action
from inflight.compaction.background.ahead import AheadPlan, SummaryAhead
from inflight.compaction.background.scheduler import BackgroundSummaries, Elsewhere, Job, Superseded
from inflight.compaction.conversation import Conversation, Message, head_length
from inflight.compaction.draft import Draft
from inflight.compaction.record import Precomputed, Record, RecordStore, best_record, with_record
from inflight.compaction.stage import Outcome
from inflight.compaction.stages.precomputed import PRECOMPUTED
from inflight.compaction.summary_job import SummaryBudgetSpent
from inflight.offload import call_sized

log = logging.getLogger("inflight")

POLL_S = 0.05  # how often a turn waiting for another process's summary checks the store


class AheadJobs:
    def __init__(
        self,
        jobs: BackgroundSummaries | None,
        records: RecordStore,
        *,
        lock_for: Callable[[str], asyncio.Lock],
        save: Callable[[str, list[Record]], Awaitable[None]],
    ) -> None:
        self.jobs = jobs
        self.records = records
        self.lock_for = lock_for
        self.save = save
        self.owner = uuid.uuid4().hex  # identifies this process as a lease holder

    async def saved_by_another_process(self, key: str, conversation: Conversation, deadline: float) -> bool:
        """Whether another process saves a usable summary of this conversation in the store before `deadline`."""
        while True:
            record = best_record(await self.records.load(key), conversation.matched)
            if record is not None and record.ahead_usable(conversation.matched):
                return True
            if time.monotonic() >= deadline:
                return False
            await asyncio.sleep(min(POLL_S, max(deadline - time.monotonic(), 0)))

    def start(
        self,
        key: str,
        conversation: Conversation,
        record: Record | None,
        ahead: SummaryAhead | None,
        sent: Sequence[Message],
        sent_tokens: int,
        *,
        needed_now: bool = False,
    ) -> Job | None:
        """Start the background summary this conversation will need, if it is past `background_at` and has none.

        `needed_now` marks a turn that needs the summary now: it starts a job whatever its size."""
        if ahead is None or self.jobs is None or (not needed_now and sent_tokens <= ahead.start_at):
            return None
        if record is not None and record.ahead_usable(conversation.matched):
            return None
        base = record.prefix_hash if record is not None else b"head"

        lease = f"summary:{key}"  # one job per conversation across the processes that share the store

        async def make() -> object:
            # Plan (cut, transcript, chunks) off the loop when big; call the summarizer on the loop, so a slow
            # summarizer does not tie up a thread that other requests need for parsing.
            plan = await call_sized(lambda: ahead.plan(conversation, record, sent, sent_tokens), sent_tokens)
            if not await self.records.lease(lease, self.owner, ahead.lease_s):
                raise Elsewhere(f"another process summarizes {key[:48]}")
            try:
                async with kept_leased(self.records, lease, self.owner, ahead.lease_s):
                    if not await self.still_needed(key, conversation, plan):
                        raise Superseded(f"the summary of {key[:48]} is in the store already")
                    return await ahead.ask(plan)
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
                "[compaction] summary made ahead for %s: messages up to %d, %d summarizer %s, %.0f ms",
                key[:48],
                result.cut,
                result.calls,
                "call" if result.calls == 1 else "calls",
                result.made_ms,
            )

        started_by = conversation if needed_now else None
        return self.jobs.start(key, base, make, land, started_by=started_by, tenant=ahead.tenant)

    async def still_needed(self, key: str, conversation: Conversation, plan: AheadPlan) -> bool:
        """Whether the summary `plan` asks for is still worth a call, judged by the store now.

        The request that started this job read the store before the job ran. Meanwhile another job may have
        saved a summary: one of this process (already out of the scheduler, so a late request in a burst
        started this one), or one of another process that held the lease. This check runs under the lease,
        after any such job has saved and released it. No call is made when the store already has a usable
        summary or its record already summarizes past this plan's cut."""
        record = best_record(await self.records.load(key), conversation.matched)
        if record is None:
            return True
        if record.ahead_usable(conversation.matched):
            return False
        planned = Precomputed(plan.cut, plan.cut_hash, "")
        digests = conversation.matched
        return planned.usable(
            head_len=record.head_len, prefix_len=record.prefix_len, fallback=record.fallback, digests=digests
        )

    async def land(self, key: str, conversation: Conversation, ahead: Precomputed) -> None:
        """Save a job's summary in every record it may serve, and in a new bare record if none matches its messages.

        A record matching the job's messages qualifies, and so does a longer one made since (a turn compacted
        while the job ran), which no hash can tell apart from an unrelated record. That is safe because
        `Precomputed.usable` checks the summary against each request's messages before it is used."""
        async with self.lock_for(key):
            records = await self.records.load(key)
            digests = conversation.matched
            matching = [r.matches(digests) for r in records]
            serves = [ok or r.prefix_len > len(digests) for r, ok in zip(records, matching, strict=True)]
            updated = [dataclasses.replace(r, ahead=ahead) if ok else r for r, ok in zip(records, serves, strict=True)]
            # No record of these messages yet (before the first compaction, or a conversation the agent restarted
            # from its own summary under the same key, beside the longer record of its old history): a bare record
            # carries the summary, so the next turn finds it.
            if not any(matching):
                head_len = head_length(conversation.messages)
                bare = dataclasses.replace(Draft(head_len, head_len).freeze(conversation), ahead=ahead)
                updated = with_record(records, None, bare)
            await self.save(key, updated)


@asynccontextmanager
async def kept_leased(records: RecordStore, name: str, owner: str, ttl_s: float) -> AsyncIterator[None]:
    """Renew the lease every third of its TTL while the block runs, so a slow summarizer does not lose it."""

    async def renew() -> None:
        while True:
            await asyncio.sleep(ttl_s / 3)
            await records.lease(name, owner, ttl_s)

    renewing = asyncio.ensure_future(renew())
    try:
        yield
    finally:
        renewing.cancel()


def say_how_it_waited(outcome: Outcome, job: Job, conversation: Conversation) -> None:
    """Set the actions and notes of a turn that waited for a summary job."""
    if PRECOMPUTED in outcome.actions and job.started_by is conversation:  # made for this turn while it waited
        outcome.actions = [Action.SUMMARIZE if action == PRECOMPUTED else action for action in outcome.actions]
        made = job.result
        if isinstance(made, Precomputed):
            outcome.summarizer_calls, outcome.summarizer_ms = made.calls, made.made_ms
    if not job.done.is_set():
        outcome.actions.append(Action.SUMMARY_PENDING)
        outcome.notes["summary"] = "pending"
    elif job.error is not None and not isinstance(job.error, asyncio.CancelledError):
        outcome.notes["summarizer_error"] = type(job.error).__name__
        rejected = getattr(job.error, "rejected", None)
        if rejected:
            outcome.actions.append(Action.rejected(rejected))
        if isinstance(job.error, SummaryBudgetSpent) and job.error.action not in outcome.actions:
            outcome.actions.append(job.error.action)
