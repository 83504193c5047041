"""One worker thread for the heaviest work (a body of megabytes: parsing, counting, compacting).

Worker threads keep CPU work off the event loop, but they share the GIL with it: with six threads
counting at once, the loop waits its turn behind all of them, and every small request with it. So
work on big requests queues for one thread of its own; the loop competes with that one thread only,
and the rest of the default pool stays free for ordinary requests. Big requests wait for each other,
which they would do anyway on a machine with fewer cores than requests.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import ParamSpec, TypeVar

P = ParamSpec("P")
T = TypeVar("T")

HEAVY_BYTES = 1 << 20  # a body this big goes to the heavy lane
HEAVY_TOKENS = HEAVY_BYTES // 4  # and so does a conversation this long

_LANE = ThreadPoolExecutor(max_workers=1, thread_name_prefix="inflight-heavy")


async def in_thread(heavy: bool, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
    """`fn(*args, **kwargs)` in a worker thread: the heavy lane's one thread, or the default pool's."""
    if not heavy:
        return await asyncio.to_thread(fn, *args, **kwargs)
    return await asyncio.get_running_loop().run_in_executor(_LANE, functools.partial(fn, *args, **kwargs))
