"""A compaction in a worker thread: its summarizer call comes back to the server's loop, and it can be cancelled."""

from __future__ import annotations

import asyncio
import threading

import pytest

from inflight.compaction import SummaryJob
from inflight.offload import in_worker_thread, on_home_loop


async def test_the_work_runs_on_another_thread_and_the_summary_on_this_one() -> None:
    home = threading.get_ident()
    seen: dict[str, int] = {}

    async def summarize(job: SummaryJob) -> str:
        seen["summarizer"] = threading.get_ident()
        await asyncio.sleep(0.01)  # real I/O would be awaited here, on the home loop
        return f"summary of {job.transcript}"

    bridged = on_home_loop(summarize)

    async def work() -> str:
        seen["work"] = threading.get_ident()
        return await bridged(SummaryJob(previous=None, transcript="t", max_tokens=10))

    assert await in_worker_thread(work) == "summary of t"
    assert seen["work"] != home and seen["summarizer"] == home


async def test_an_error_in_the_work_reaches_the_caller() -> None:
    async def work() -> None:
        raise ValueError("boom")

    with pytest.raises(ValueError, match="boom"):
        await in_worker_thread(work)


async def test_cancelling_the_caller_cancels_the_work_at_its_next_await() -> None:
    summary_started = asyncio.Event()
    summary_cancelled = asyncio.Event()

    async def summarize(job: SummaryJob) -> str:
        summary_started.set()
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            summary_cancelled.set()
            raise
        return "never"

    bridged = on_home_loop(summarize)

    async def work() -> str:
        return await bridged(SummaryJob(previous=None, transcript="t", max_tokens=10))

    caller = asyncio.create_task(in_worker_thread(work))
    await asyncio.wait_for(summary_started.wait(), 5)
    caller.cancel()
    with pytest.raises(asyncio.CancelledError):
        await caller
    await asyncio.wait_for(summary_cancelled.wait(), 5)  # the summarizer call on this loop was stopped too
