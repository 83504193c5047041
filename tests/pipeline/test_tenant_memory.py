"""Many client keys, memory that levels off: no map the proxy keeps grows with every new tenant past its bound.

A client that sends a new key with every request is a new tenant each time (`tenant_of`). Everything the
app keeps per tenant (usage figures, calibration, window brackets, reply sizes, the last request of each
conversation, summarizer budgets) is a cachetools cache of bounded size. These tests send many keys through
the app, in this process (its ASGI callable, before a fake upstream on loopback), then walk everything the app
object reaches and look for a plain dict, list, set or deque that grew with the keys: such a map has no bound
and would grow for as long as new keys come. The caches' own bounds are tested with each module
(`tests/policy/test_tenant_bounds.py`, `tests/metrics/test_usage.py`, `tests/compaction/test_prefix_memory.py`).
"""

from __future__ import annotations

import asyncio
import gc
from collections import deque
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from types import BuiltinFunctionType, CodeType, FrameType, FunctionType, MethodType, ModuleType
from typing import Any

import httpx
from cachetools import Cache

from inflight.app import create_app
from inflight.config import load_settings
from tests.support.servers import serve
from tests.support.upstream import UpstreamApp

CHAT = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "Say ok."}]}
KEYS = 1000  # new keys between two walks: below every bound of the caches, far above any fixed map
# A cache counted in entries (no `getsizeof`) above this many is not a bound worth the name for per-key state.
MAX_CACHE_ENTRIES = 100_000
LEAVES = (type, ModuleType, CodeType, FrameType, BuiltinFunctionType, str, bytes, bytearray, int, float, complex)
CONTAINERS = (dict, list, set, frozenset, deque, tuple)


@dataclass
class Walk:
    """The containers an object reaches, by id (kept alive here, so ids stay theirs), with a path to each."""

    sizes: dict[int, tuple[Any, str, int]]
    caches: dict[int, tuple[Cache[Any, Any], str]]


def items_of(obj: Any, path: str) -> Iterator[tuple[Any, str]]:
    """A container's keys and values, or its items."""
    if isinstance(obj, dict):
        for key, value in obj.items():
            yield key, f"{path}<key>"
            yield value, f"{path}[{str(key)[:40]!r}]"
    else:
        for index, item in enumerate(obj):
            yield item, f"{path}[{index}]"


def closure_of(function: FunctionType, path: str) -> Iterator[tuple[Any, str]]:
    """What a function holds: its closure's cells and its defaults, never its module's globals."""
    where = f"{path}<{function.__qualname__}>"
    for name, cell in zip(function.__code__.co_freevars, function.__closure__ or (), strict=True):
        try:
            yield cell.cell_contents, f"{where}.{name}"
        except ValueError:  # an empty cell
            continue
    yield function.__defaults__, f"{where}.__defaults__"
    yield function.__kwdefaults__, f"{where}.__kwdefaults__"


def attributes_of(obj: Any, path: str) -> Iterator[tuple[Any, str]]:
    """An object's attributes by name (its `__dict__` and slots), else whatever the collector says it refers to."""
    named = False
    if isinstance(getattr(obj, "__dict__", None), dict):
        named = True
        for name, value in vars(obj).items():
            yield value, f"{path}.{name}"
    for name in (name for cls in type(obj).__mro__ for name in cls.__dict__.get("__slots__", ())):
        if name != "__dict__" and hasattr(obj, name):
            named = True
            yield getattr(obj, name), f"{path}.{name}"
    if not named:
        for referent in gc.get_referents(obj):
            yield referent, f"{path}->{type(referent).__name__}"


def named_referents(obj: Any, path: str) -> Iterator[tuple[Any, str]]:
    """What `obj` refers to, each with its path."""
    if isinstance(obj, CONTAINERS):
        return items_of(obj, path)
    if isinstance(obj, FunctionType):
        return closure_of(obj, path)
    if isinstance(obj, MethodType):
        return iter([(obj.__self__, f"{path}.__self__"), (obj.__func__, f"{path}.__func__")])
    return attributes_of(obj, path)


def walk(root: Any) -> Walk:
    """Every container `root` reaches, and every cache (not walked into: it bounds what it holds)."""
    found = Walk({}, {})
    seen: set[int] = set()
    pending: deque[tuple[Any, str]] = deque([(root, "app")])
    while pending:
        obj, path = pending.popleft()
        if id(obj) in seen or obj is None or isinstance(obj, LEAVES):
            continue
        seen.add(id(obj))
        if isinstance(obj, Cache):
            found.caches[id(obj)] = (obj, path)
            continue
        if isinstance(obj, CONTAINERS):
            found.sizes[id(obj)] = (obj, path, len(obj))
        pending.extend(named_referents(obj, path))
    return found


@asynccontextmanager
async def lifespan(app: Any) -> AsyncIterator[None]:
    """The app's ASGI lifespan, started and then shut down as a server does."""
    received: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
    sent: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
    scope = {"type": "lifespan", "asgi": {"version": "3.0"}, "state": {}}
    task = asyncio.create_task(app(scope, received.get, sent.put))
    await received.put({"type": "lifespan.startup"})
    assert (await sent.get())["type"] == "lifespan.startup.complete"
    try:
        yield
    finally:
        await received.put({"type": "lifespan.shutdown"})
        assert (await sent.get())["type"] == "lifespan.shutdown.complete"
        await task


async def send_new_keys(client: httpx.AsyncClient, keys: range) -> None:
    for number in keys:
        headers = {"authorization": f"Bearer sk-tenant-{number:08d}"}
        response = await client.post("/chat/completions", json=CHAT, headers=headers)
        assert response.status_code == 200, response.text


def grown(before: Walk, after: Walk, by: int) -> list[str]:
    """The containers that grew by at least `by` entries from `before` to `after` (a new one from nothing)."""
    found = []
    for key, (_, path, size) in after.sizes.items():
        was = before.sizes[key][2] if key in before.sizes else 0
        if size - was >= by:
            found.append(f"{path}: {was} -> {size}")
    return found


def unbounded(caches: dict[int, tuple[Cache[Any, Any], str]]) -> list[str]:
    """The caches counted in entries whose bound is too large to be one."""
    return [
        f"{path}: maxsize {cache.maxsize}"
        for cache, path in caches.values()
        if "getsizeof" not in vars(cache) and cache.maxsize > MAX_CACHE_ENTRIES
    ]


async def clients_seen(client: httpx.AsyncClient) -> int:
    """The clients the usage figures keep one by one; asking adds in the metrics' waiting batch first."""
    response = await client.get("http://proxy/inflight/usage")
    assert response.status_code == 200, response.text
    return int(response.json()["clients_seen"])


async def test_no_map_the_app_keeps_grows_with_every_new_client_key() -> None:
    upstream = UpstreamApp()
    with serve(upstream) as upstream_url:
        app = create_app(load_settings(None, overrides={"upstream": {"base_url": upstream_url + "/v1"}}))
        transport = httpx.ASGITransport(app=app)
        async with lifespan(app), httpx.AsyncClient(transport=transport, base_url="http://proxy/v1") as client:
            await send_new_keys(client, range(KEYS))
            assert await clients_seen(client) == KEYS
            first = walk(app)
            upstream.requests.clear()  # the fake's own record of what it was sent: not the proxy's memory
            await send_new_keys(client, range(KEYS, 2 * KEYS))
            assert await clients_seen(client) == 2 * KEYS
            second = walk(app)
    assert second.caches, "the walk found none of the app's caches: it no longer reaches the app's state"
    growing = grown(first, second, KEYS // 2)
    assert not growing, f"maps that grew with the {KEYS} new keys: {growing}"
    too_large = unbounded(second.caches)
    assert not too_large, f"caches bounded at more than {MAX_CACHE_ENTRIES:,} entries: {too_large}"
