"""Run work that must not block the event loop: parsing and counting big bodies, and big compactions.

There are two thread pools. Worker threads keep CPU work off the event loop, but they share the GIL
with it: with six threads counting at once, the loop waits behind all of them, and so does every small
request. So work on big requests (a body of megabytes) queues for the "heavy lanes", a separate pool
of one thread per core, at most four (`HEAVY_LANES`). Most of that work is tiktoken and RE2, which
release the GIL while they run, so big requests use every core, and the loop competes with as many
threads as there are cores rather than with every request. The default pool stays free for ordinary
requests. How long a request waited for a heavy lane is added to its `LaneWait` (the log line's `queue_ms`).

A compaction is mostly counting (tiktoken over truncated outputs, placeholders and summaries) and
building the new message list: for a 30 MB request, seconds of CPU. On the event loop, no other
request, not even `/healthz`, would be served during those seconds. So a big compaction's coroutine
runs in a worker thread on an event loop of its own. Its one piece of I/O, the summarizer call, is
sent back to the server's loop (whose connections it uses) and awaited from the thread
(`on_home_loop`). A small compaction stays on the loop, since a thread and a loop cost about 0.4 ms,
more than the compaction itself.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Generic, ParamSpec, TypeVar

P = ParamSpec("P")
T = TypeVar("T")
A = TypeVar("A")

HEAVY_BYTES = 1 << 20  # a body this big goes to a heavy lane
HEAVY_TOKENS = HEAVY_BYTES // 4  # and so does a conversation this long

HEAVY_LANES = max(1, min(os.cpu_count() or 1, 4))
_LANES = ThreadPoolExecutor(max_workers=HEAVY_LANES, thread_name_prefix="inflight-heavy")


@dataclass
class LaneWait:
    """How long one request's work waited for a heavy lane, summed over all its pieces."""

    seconds: float = 0.0
    used: bool = False  # whether any of its work went to a heavy lane


LANE_WAIT: ContextVar[LaneWait | None] = ContextVar("inflight_lane_wait", default=None)


async def in_thread(heavy: bool, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
    """Run `fn(*args, **kwargs)` in a worker thread: a heavy lane, or the default pool."""
    if not heavy:
        return await asyncio.to_thread(fn, *args, **kwargs)
    waited, queued = LANE_WAIT.get(), time.perf_counter()

    def timed() -> T:
        if waited is not None:
            waited.seconds += time.perf_counter() - queued
            waited.used = True
        return fn(*args, **kwargs)

    return await asyncio.get_running_loop().run_in_executor(_LANES, timed)


# Below this many tokens a compaction is cheap enough to run on the event loop. Measured with `python -m
# benchmarks.hostile --only D`: with 16,384, back-to-back compactions of 4k-window conversations kept
# /healthz waiting 58 ms at p99; with 2,048, 2.7 ms (a thread costs about 0.4 ms, paid only when compacting).
OFFLOAD_AT_TOKENS = 2_048


def on_home_loop(call: Callable[[A], Awaitable[T]]) -> Callable[[A], Awaitable[T]]:
    """Wrap `call` so it can be awaited from any thread's loop but always runs on the loop it was wrapped on."""
    home = asyncio.get_running_loop()

    async def call_at_home(argument: A) -> T:
        if asyncio.get_running_loop() is home:
            return await call(argument)

        async def at_home() -> T:
            return await call(argument)

        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(at_home(), home))

    return call_at_home


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
        # Nobody awaits it any more: retrieve its outcome (cancelled, or an error) so it is not logged as unretrieved.
        future.add_done_callback(lambda done: done.cancelled() or done.exception())
        raise


async def run_sized(work: Callable[[], Awaitable[T]], tokens: int) -> T:
    """Await `work()` on this loop when small, else in a worker thread (a heavy lane when huge)."""
    if tokens < OFFLOAD_AT_TOKENS:
        return await work()
    return await in_worker_thread(work, heavy=tokens >= HEAVY_TOKENS)


async def call_sized(work: Callable[[], T], tokens: int) -> T:
    """Run `work()` (plain CPU work, no awaits) here when small, else in a worker thread (a heavy lane when huge)."""
    if tokens < OFFLOAD_AT_TOKENS:
        return work()
    return await in_thread(tokens >= HEAVY_TOKENS, work)
