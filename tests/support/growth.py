"""How a step's work grows with what was sent: its cost over a size series, compared as a ratio, never as a time.

Where a step's work can be counted (the elements it reads, the calls it makes) the tests count it. Where the
work is inside C calls (a membership test on a list, a list copied), they measure it in parses of the same
body: the CPU time of this thread for the step over that for `orjson.loads` of the body, each the least of a
few runs with garbage collection paused. A parse is linear, and both scale alike with the machine's speed,
load and caches, so a linear step costs about as many parses at every size, and a quadratic one more and more.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable
from typing import Any, SupportsIndex, overload

import orjson

SERIES = (2_000, 8_000, 32_000)  # sizes of a series: each four times the one before
# How much the cost in parses may grow from the smallest size of `SERIES` to the largest (16 times the size):
# a linear step's stays level or falls (fixed costs spread out); a quadratic step's grows about 16 times.
MAX_GROWTH = 2.0


def cpu_seconds(work: Callable[[], object], *, repeat: int = 3) -> float:
    """The least CPU time of this thread over `repeat` runs of `work`, garbage collection paused."""
    least = float("inf")
    enabled = gc.isenabled()
    gc.disable()
    try:
        for _ in range(repeat):
            started = time.thread_time()
            work()
            least = min(least, time.thread_time() - started)
    finally:
        if enabled:
            gc.enable()
    return least


def in_parses(work: Callable[[], object], body: bytes) -> float:
    """What `work` costs in parses of `body` (see the module's docstring)."""
    work()  # once, so what a first call builds (caches, patterns) is not counted
    return cpu_seconds(work) / max(cpu_seconds(lambda: orjson.loads(body)), 1e-7)


def growth_in_parses(cost_at: Callable[[int], float]) -> tuple[float, list[float]]:
    """The cost in parses at each size of `SERIES`, and how many times it grew from the smallest to the largest."""
    costs = [cost_at(size) for size in SERIES]
    return costs[-1] / costs[0], costs


class CountingList(list[Any]):
    """A list that counts the elements read from it one index at a time (`reads`): the work of a loop over it."""

    reads = 0

    @overload
    def __getitem__(self, index: SupportsIndex) -> Any: ...

    @overload
    def __getitem__(self, index: slice) -> list[Any]: ...

    def __getitem__(self, index: SupportsIndex | slice) -> Any:
        if not isinstance(index, slice):
            self.reads += 1
        return super().__getitem__(index)
