"""Run summaries in the background: at most one job per conversation, in a bounded pool.

A summary takes seconds with a hosted model and minutes with a small local one. Made on the turn
that needs it, that is a wait the agent reads as a hang. So a job starts when a conversation gets
close (`summarize.background_at`), and its result waits in the conversation's record for the turn
that passes the threshold. `inflight.compaction.per_conversation` decides when; this module only runs jobs.

- One at a time: while a conversation's job runs, its requests start no other. A job that finds its
  summary already saved by another job since its request looked makes no call (`Superseded`;
  `AheadJobs` checks again once it holds the lease).
- Bounded: at most `max_running` jobs call the summarizer at once, and as many may queue (each
  keeps its conversation in memory). Beyond that no job starts, and the turn that needs the summary
  uses a ledger digest instead.
- Shared fairly: one tenant (whoever's budget the job spends) runs at most half of the slots, rounded
  up, and queues as many; so one tenant's jobs never take every slot from the others.
- A failed job is tried once more; if that fails too, no job starts again from the same record.
- A job whose conversation sends nothing for `idle_s` (the record TTL) is cancelled.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from cachetools import TTLCache

from inflight.compaction.record import key_digest
from inflight.metrics.observer import NO_OBSERVER, Observer

log = logging.getLogger("inflight")


class Final(Exception):
    """A failure that retrying cannot fix, such as nothing to summarize; the job is not retried."""


class Elsewhere(Final):
    """Another process sharing the store holds the lease and runs this conversation's job."""


class Superseded(Elsewhere):
    """The store already has the summary this job would make.

    Another job, in this or another process, saved it after the request checked the store and before this job
    ran, as happens in a burst of requests from one conversation."""


FAILED_REMEMBERED = 10_000  # conversations whose summary failed, remembered so as not to retry it at once
# What `_failed` holds for a conversation whose failure no later base can mend (`lasting` on the exception).
EVERY_BASE = b""
QUEUED_PER_RUNNING = 1  # jobs that may wait for a slot, per slot (each keeps its conversation in memory)
RETRY_AFTER_S = 1.0


@dataclass
class Job:
    """One conversation's background summary, from its start until it is saved in the record."""

    key: str
    base: bytes  # the hash of the record it extends; after one failure from a base, no job starts from it again
    started_by: object  # the request that started it (a turn that needs the summary now waits for its own job)
    tenant: str = ""  # whose share of the slots it takes
    last_seen: float = field(default_factory=time.monotonic)
    running: bool = False
    done: asyncio.Event = field(default_factory=asyncio.Event)
    error: BaseException | None = None
    result: object = None
    task: asyncio.Task[None] | None = None

    @property
    def succeeded(self) -> bool:
        return self.done.is_set() and self.error is None


@dataclass
class JobCounts:
    started: int = 0
    landed: int = 0  # finished, and the summary was saved in the record
    failed: int = 0
    retried: int = 0
    cancelled: int = 0
    refused: int = 0  # not started: the queue, or the tenant's share of it, was full
    elsewhere: int = 0  # ended at once: another process runs the conversation's job
    superseded: int = 0  # ended before its call: the store already held the summary it would make


class BackgroundSummaries:
    def __init__(self, *, max_running: int, idle_s: float, observer: Observer = NO_OBSERVER) -> None:
        self.max_running = max_running
        self.idle_s = idle_s
        self.observer = observer  # told the number of queued and running jobs whenever it changes
        self.counts = JobCounts()
        self._jobs: dict[str, Job] = {}
        self._slots = asyncio.Semaphore(max_running)
        self.share = -(-max_running // 2)  # the slots one tenant may run at once (half, rounded up)
        self._shares: dict[str, asyncio.Semaphore] = {}  # per tenant with a job, its share of the slots
        # By the key's digest: a conversation key is hundreds of characters, and every conversation of a failing
        # summarizer has an entry. Forgetting one costs one more try of its summary.
        self._failed: TTLCache[bytes, bytes] = TTLCache(maxsize=FAILED_REMEMBERED, ttl=idle_s)

    def running(self, key: str) -> Job | None:
        return self._jobs.get(key)

    def touch(self, key: str) -> None:
        """Note that a request of this conversation arrived, so its job is not idle."""
        job = self._jobs.get(key)
        if job is not None:
            job.last_seen = time.monotonic()

    def start(
        self,
        key: str,
        base: bytes,
        make: Callable[[], Awaitable[object]],
        land: Callable[[object], Awaitable[None]],
        *,
        started_by: object = None,
        tenant: str = "",
    ) -> Job | None:
        """Run `make()` and then `land(result)` (which saves it) in the background, within `tenant`'s share.

        Returns None when the conversation already has a job, a job from this base failed, or the queue (or the
        tenant's share of it) is full."""
        if key in self._jobs or self._failed.get(key_digest(key)) in (base, EVERY_BASE):
            return None
        tenants_jobs = sum(1 for job in self._jobs.values() if job.tenant == tenant)
        full = len(self._jobs) >= self.max_running * (1 + QUEUED_PER_RUNNING)
        if full or tenants_jobs >= self.share * (1 + QUEUED_PER_RUNNING):
            self.counts.refused += 1
            return None
        job = Job(key, base, started_by, tenant)
        if tenant not in self._shares:
            self._shares[tenant] = asyncio.Semaphore(self.share)
        self._jobs[key] = job
        self.counts.started += 1
        job.task = asyncio.create_task(self._run(job, make, land), name=f"summary {key[:40]}")
        self._changed()
        return job

    async def wait(self, job: Job, timeout_s: float) -> bool:
        """Whether the job finished (saved or failed) within `timeout_s`; waiting never cancels it."""
        try:
            await asyncio.wait_for(asyncio.shield(job.done.wait()), timeout_s)
        except TimeoutError:
            return False
        return True

    def stats(self) -> dict[str, int]:
        queued, running = self._tally()
        return {"queued": queued, "running": running, **vars(self.counts)}

    def _tally(self) -> tuple[int, int]:
        running = sum(1 for job in self._jobs.values() if job.running)
        return len(self._jobs) - running, running

    def _changed(self) -> None:
        queued, running = self._tally()
        self.observer.jobs_changed(queued=queued, running=running)

    async def close(self) -> None:
        """Cancel every job (the server is stopping)."""
        tasks = [job.task for job in self._jobs.values() if job.task is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _run(
        self, job: Job, make: Callable[[], Awaitable[object]], land: Callable[[object], Awaitable[None]]
    ) -> None:
        try:
            async with self._shares[job.tenant], self._slots:
                job.running = True
                self._changed()
                job.result = await self._unless_idle(job, lambda: self._attempts(job, make))
            await land(job.result)
            self.counts.landed += 1
        except asyncio.CancelledError as exc:
            job.error = exc
            self.counts.cancelled += 1
            log.info("[compaction] background summary for %s cancelled", job.key[:48])
        except Superseded as exc:
            job.error = exc
            self.counts.superseded += 1
        except Elsewhere as exc:
            job.error = exc
            self.counts.elsewhere += 1
        except Exception as exc:
            job.error = exc
            self.counts.failed += 1
            # A Final failure (nothing to summarize yet) is not remembered: a later turn from this base may have more.
            if not isinstance(exc, Final):
                self._failed[key_digest(job.key)] = EVERY_BASE if getattr(exc, "lasting", False) else job.base
            log.log(
                logging.INFO if isinstance(exc, Final) else logging.WARNING,
                "[compaction] background summary for %s failed: %s: %s",
                job.key[:48],
                type(exc).__name__,
                exc,
            )
        finally:
            if self._jobs.get(job.key) is job:
                del self._jobs[job.key]
                self._changed()
            if not any(other.tenant == job.tenant for other in self._jobs.values()):
                self._shares.pop(job.tenant, None)
            job.done.set()

    async def _attempts(self, job: Job, make: Callable[[], Awaitable[object]]) -> object:
        try:
            return await make()
        except Final:
            raise
        except Exception as exc:
            if getattr(exc, "lasting", False):  # the same conversation would fail the same way a second later
                raise
            log.info("[compaction] background summary for %s failed (%s); trying once more", job.key[:48], exc)
            self.counts.retried += 1
            await asyncio.sleep(RETRY_AFTER_S)
            return await make()

    async def _unless_idle(self, job: Job, work: Callable[[], Awaitable[object]]) -> object:
        """`work()`, cancelled once the conversation has sent nothing for `idle_s`."""
        task = asyncio.ensure_future(work())
        try:
            while True:
                remaining = job.last_seen + self.idle_s - time.monotonic()
                if remaining <= 0 and not task.done():
                    task.cancel()
                    raise asyncio.CancelledError(f"{job.key[:48]} idle for {self.idle_s:g} s")
                done, _ = await asyncio.wait({task}, timeout=remaining)
                if done:
                    return task.result()
        finally:
            if not task.done():
                task.cancel()
                task.add_done_callback(lambda t: t.cancelled() or t.exception())  # retrieve the error so none is logged
