"""How much of its own CPU an event loop spent in one step: a loop that runs heavy work itself, told from one
that hands it off, whatever the machine's speed or load.

A step's wall time mixes what the loop ran with what it waited for: the GIL (a worker thread may hold
it), the CPU (other processes share it on a busy machine). The loop thread's CPU time counts only what
the loop itself ran. So the monitor wraps the loop's `_run_once` (one turn: the ready callbacks and
the I/O events) and keeps the largest CPU time of one turn while it records. A garbage collection is
left out: it lands on whichever thread allocates when a threshold is crossed, whatever that thread
was doing.
"""

from __future__ import annotations

import asyncio
import gc
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from starlette.types import ASGIApp, Receive, Scope, Send


class LoopMonitor:
    """An ASGI app around `app` that, at its lifespan's start, instruments the loop it is served on."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self.loop: asyncio.AbstractEventLoop | None = None
        self.thread_id: int | None = None
        self.on = False
        self.longest_cpu = 0.0  # the most CPU one turn of the loop took while recording (collections apart)
        self.turns = 0  # turns while recording
        self.gc_cpu = 0.0  # the loop thread's CPU time in garbage collections, all along
        self._gc_started = 0.0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan" and self.loop is None:
            self.attach(asyncio.get_running_loop())
        await self.app(scope, receive, send)

    def attach(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop, self.thread_id = loop, threading.get_ident()
        turn = loop._run_once  # type: ignore[attr-defined]

        def measured_turn() -> None:
            if not self.on:
                turn()
                return
            cpu, collected = time.thread_time(), self.gc_cpu
            turn()
            spent = time.thread_time() - cpu - (self.gc_cpu - collected)
            self.turns += 1
            self.longest_cpu = max(self.longest_cpu, spent)

        loop._run_once = measured_turn  # type: ignore[attr-defined]
        gc.callbacks.append(self.on_gc)

    def on_gc(self, phase: str, info: dict[str, Any]) -> None:
        if threading.get_ident() != self.thread_id:
            return
        if phase == "start":
            self._gc_started = time.thread_time()
        else:
            self.gc_cpu += time.thread_time() - self._gc_started

    @contextmanager
    def recording(self) -> Iterator[None]:
        """Record the loop's turns for the block (from its start: the largest so far is forgotten)."""
        assert self.loop is not None, "the server has not started"
        self.longest_cpu, self.turns = 0.0, 0
        self.on = True
        try:
            yield
        finally:
            self.on = False

    def detach(self) -> None:
        if self.on_gc in gc.callbacks:
            gc.callbacks.remove(self.on_gc)
