"""The archive's stores: turns numbered and kept in order, compactions found by id, retention and bounds.

Every store the archive can live in: SQLite in memory (`state.url: memory://`), a SQLite file,
and a real redis-server.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from inflight.archive import ArchiveStore, TurnWrite, open_archive
from inflight.archive.sqlite import SqliteArchive
from inflight.archive.store import MAX_LISTED, NAME_CHARS
from inflight.config import Archive, State
from tests.support.redis import redis_server

MB = 1024 * 1024


def turn(at: float, tokens: int = 100, model: str = "gpt-4o") -> dict[str, Any]:
    return {"time": at, "model": model, "tokens": tokens, "sent": tokens, "actions": "none"}


async def add_turn(store: ArchiveStore, conversation: str, label: str, entry: dict[str, Any]) -> None:
    await store.add_turns([TurnWrite(conversation, label, entry)])


@pytest.fixture(params=["memory", "sqlite", "redis"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[ArchiveStore]:
    archive = Archive(enabled=True, retention_s=3600, max_turns=10)
    if request.param == "redis":
        with redis_server() as url:
            opened = open_archive(State(url=url), archive)
            yield opened
            await opened.close()
        return
    url = "memory://" if request.param == "memory" else f"sqlite:///{tmp_path}/state/inflight.db"
    opened = open_archive(State(url=url), archive)
    yield opened
    await opened.close()


async def test_turns_are_numbered_in_order_and_conversations_listed_latest_first(store: ArchiveStore) -> None:
    now = time.time()
    for n in range(5):
        await add_turn(store, "a", "agent é", turn(now - 50 + n, tokens=100 * n))
    await add_turn(store, "b", "gpt-4o", turn(now - 10))
    await store.add_compaction({"id": "c1", "conversation": "a", "time": now, "summary": "## Task ✓", "dropped": []})
    listed = await store.conversations(10)
    assert [(c["id"], c["label"], c["turns"], c["compactions"]) for c in listed] == [
        ("b", "gpt-4o", 1, 0),
        ("a", "agent é", 5, 1),
    ]
    assert listed[1]["first"] == pytest.approx(now - 50) and listed[1]["last"] == pytest.approx(now - 46)
    assert await store.conversations(1) == listed[:1]
    meta, turns = await store.conversation("a")
    assert meta is not None and meta["model"] == "gpt-4o"
    assert [(t["n"], t["tokens"]) for t in turns] == [(n + 1, 100 * n) for n in range(5)]
    assert await store.conversation("nope") == (None, [])
    assert orjson.loads(await store.compaction("c1") or b"null") == {
        "id": "c1",
        "conversation": "a",
        "time": now,
        "summary": "## Task ✓",
        "dropped": [],
    }
    assert await store.compaction("c2") is None


async def test_turns_written_together_are_numbered_in_order(store: ArchiveStore) -> None:
    now = time.time()
    writes = [TurnWrite("a" if n % 3 else "b", "x", turn(now - 50 + n, tokens=n)) for n in range(15)]
    await store.add_turns(writes)
    _, a_turns = await store.conversation("a")
    _, b_turns = await store.conversation("b")
    assert [(t["n"], t["tokens"]) for t in a_turns] == list(enumerate([n for n in range(15) if n % 3], 1))
    assert [t["n"] for t in b_turns] == list(range(1, 6))


async def test_a_conversation_keeps_its_newest_turns(store: ArchiveStore) -> None:
    now = time.time()
    for n in range(100):  # max_turns is 10
        await add_turn(store, "a", "x", turn(now - 100 + n, tokens=n))
    meta, turns = await store.conversation("a")
    assert meta is not None and meta["turns"] == 100
    assert [t["n"] for t in turns] == list(range(91, 101))


async def test_what_is_older_than_the_retention_is_not_shown(store: ArchiveStore) -> None:
    old = time.time() - 3700
    await add_turn(store, "old", "x", turn(old))
    await store.add_compaction({"id": "c-old", "conversation": "old", "time": old})
    await add_turn(store, "new", "x", turn(time.time()))
    assert [c["id"] for c in await store.conversations(10)] == ["new"]
    assert await store.conversation("old") == (None, [])


async def test_labels_and_models_are_kept_clipped_and_a_listing_is_bounded(store: ArchiveStore) -> None:
    now = time.time()
    huge = "é" * MB  # a megabyte-long x-inflight-session and model name
    await add_turn(store, "a", huge, turn(now - 10, model=huge))
    await store.add_turns([TurnWrite(f"c{n}", "x", turn(now - 5)) for n in range(MAX_LISTED + 10)])
    listed = await store.conversations(10 * MAX_LISTED)
    assert len(listed) == MAX_LISTED
    meta, turns = await store.conversation("a")
    assert meta is not None and len(meta["label"]) == len(meta["model"]) == len(turns[0]["model"]) == NAME_CHARS
    assert meta["label"] == "é" * (NAME_CHARS - 1) + "…"


async def test_sqlite_counts_its_conversations_rows_against_max_bytes(tmp_path: Path) -> None:
    path = tmp_path / "inflight.db"
    store = SqliteArchive(str(path), Archive(enabled=True, max_bytes=MB))
    now = time.time()
    label = "s" * 200
    try:
        for batch in range(30):  # 3,000 conversations of one small turn each: 1.5 MB of conversation rows alone
            writes = [
                TurnWrite(f"c{batch}-{n}", label + str(n), turn(now - 100 + batch, model="m" * 200)) for n in range(100)
            ]
            await store.add_turns(writes)
        assert len(await store.conversations(MAX_LISTED)) == MAX_LISTED
    finally:
        await store.close()
    db = sqlite3.connect(path)
    (names,) = db.execute("SELECT SUM(LENGTH(label) + LENGTH(model)) FROM archive_conversations").fetchone()
    (bodies,) = db.execute("SELECT SUM(LENGTH(body)) FROM archive_turns").fetchone()
    db.close()
    assert names + bodies < MB + MB // 4  # within the bound, short of what came since the last sweep


async def test_sqlite_drops_its_oldest_entries_past_max_bytes(tmp_path: Path) -> None:
    store = SqliteArchive(str(tmp_path / "inflight.db"), Archive(enabled=True, max_bytes=MB))
    now = time.time()
    try:
        for n in range(12):
            entry = {"id": f"c{n}", "conversation": "a", "time": now - 100 + n, "summary": "y" * 200_000}
            await store.add_compaction(entry)
        kept = [n for n in range(12) if await store.compaction(f"c{n}") is not None]
    finally:
        await store.close()
    assert kept[-1] == 11 and len(kept) * 200_000 <= 2 * MB  # the newest kept, the oldest gone
    assert 0 not in kept


async def test_redis_entries_expire_with_the_retention() -> None:
    with redis_server() as url:
        store = open_archive(State(url=url), Archive(enabled=True, retention_s=120))
        await add_turn(store, "a", "x", turn(time.time()))
        await store.add_compaction({"id": "c1", "conversation": "a", "time": time.time()})
        import redis.asyncio as redis

        client = redis.Redis.from_url(url)
        ttls = [await client.ttl(key) for key in await client.keys("inflight:arch:*")]
        await client.aclose()
        await store.close()
    assert len(ttls) == 4 and all(0 < ttl <= 120 for ttl in ttls)
