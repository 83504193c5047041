"""Running a big compaction in a worker thread, so that it does not hold up every other request.

A compaction is mostly counting (tiktoken over truncated outputs, placeholders and summaries) and
building the new message list: for a 30 MB request, seconds of CPU. On the event loop those are
seconds in which no other request, not even `/healthz`, moves. So a big compaction's coroutine runs
in a worker thread, on an event loop of its own. Its one piece of I/O, the summarizer call, goes
back to the server's loop (whose HTTP client and connections it uses) and is awaited from the thread.

A small compaction stays on the loop: a thread and a loop cost about 0.4 ms, more than it does.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

from proxy.compaction.summary import Summarize, SummaryJob
from proxy.heavy import HEAVY_TOKENS, in_thread

T = TypeVar("T")

# Below this many tokens a compaction is cheap enough to run where it is.
OFFLOAD_AT_TOKENS = 16_384


def on_home_loop(summarize: Summarize) -> Summarize:
    """`summarize`, callable from any thread's loop: it always runs on the loop it was wrapped on."""
    home = asyncio.get_running_loop()

    async def summarize_at_home(job: SummaryJob) -> str:
        if asyncio.get_running_loop() is home:
            return await summarize(job)

        async def at_home() -> str:
            return await summarize(job)

        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(at_home(), home))

    return summarize_at_home


class WorkerRun(Generic[T]):
    """One piece of work on its own loop in a worker thread, which the server's loop can cancel."""

    def __init__(self, work: Callable[[], Awaitable[T]]) -> None:
        self.work = work
        self.lock = threading.Lock()
        self.loop: asyncio.AbstractEventLoop | None = None
        self.task: asyncio.Future[T] | None = None
        self.cancelled = False

    async def main(self) -> T:
        with self.lock:
            self.loop, self.task = asyncio.get_running_loop(), asyncio.ensure_future(self.work())
            if self.cancelled:
                self.task.cancel()
        return await self.task

    def cancel(self) -> None:
        """Stop the work at its next await (a summary call); the thread itself cannot be interrupted."""
        with self.lock:
            self.cancelled = True
            if self.loop is not None and self.task is not None:
                self.loop.call_soon_threadsafe(self.task.cancel)


async def in_worker_thread(work: Callable[[], Awaitable[T]], *, heavy: bool = False) -> T:
    """Await `work()` run on a new event loop in a worker thread. Cancelling the caller cancels the work."""
    run = WorkerRun(work)
    future = asyncio.ensure_future(in_thread(heavy, asyncio.run, run.main()))
    try:
        return await asyncio.shield(future)
    except asyncio.CancelledError:
        run.cancel()
        # Nobody awaits it any more: its end (cancelled, or an error) must not be logged as unretrieved.
        future.add_done_callback(lambda done: done.cancelled() or done.exception())
        raise


async def run_sized(work: Callable[[], Awaitable[T]], tokens: int) -> T:
    """`work()` here when it is small; in a worker thread (the heavy lane when huge) when it is not."""
    if tokens < OFFLOAD_AT_TOKENS:
        return await work()
    return await in_worker_thread(work, heavy=tokens >= HEAVY_TOKENS)


async def call_sized(work: Callable[[], T], tokens: int) -> T:
    """`work()` (plain CPU work, no awaits) here when small; in a worker thread (the heavy lane when huge) when not."""
    if tokens < OFFLOAD_AT_TOKENS:
        return work()
    return await in_thread(tokens >= HEAVY_TOKENS, work)
