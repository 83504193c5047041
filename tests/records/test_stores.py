"""The shared stores: records survive the round trip, expire, stay bounded, and leases have one holder.

SQLite on real files (two store objects on one file stand for two processes); Redis on a real
redis-server. The fail-open wrapper is tested by stopping that server under it.
"""

from __future__ import annotations

import asyncio
import sqlite3
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from inflight.compaction.ledger import Ledger
from inflight.compaction.record import Precomputed, Record, RecordStore, Replacement
from inflight.config import Cache, State
from inflight.records import open_record_store
from inflight.records.codec import decode, encode, stored_key
from inflight.records.memory import MemoryRecordStore
from inflight.records.redis import RedisRecordStore
from inflight.records.resilient import ResilientStore
from inflight.records.sqlite import ROW_BYTES, SqliteRecordStore
from tests.support.redis import redis_server
from tests.support.servers import free_port

MB = 1024 * 1024


def full_record(index: int = 0, text: str = "x") -> Record:
    """A record with every field set, non-ASCII text included."""
    ledger = Ledger(
        ("pytest -q",), {"pytest -q": "1 failed"}, {"src/é.py": "cat src/é.py"}, ("KeyError: 'a'",), ("Foo",), 7
    )
    replaced = {
        5: Replacement(bytes(range(16)), {"role": "tool", "tool_call_id": "c1", "content": "[pruned] ✓"}, 9, "mask"),
        7: Replacement(bytes(16), {"role": "tool", "tool_call_id": "c2", "content": text}, 3, "truncate"),
    }
    ahead = Precomputed(12, bytes(range(16, 32)), "## Task\nnote", base=4, ledger=ledger, calls=2, made_ms=12.5)
    summary = {"role": "user", "content": "[Previous conversation summary]\n## Task\n…"}
    return Record(2, 4 + index, bytes(range(32, 48)), summary, 40, False, replaced, ledger, ahead, f"c{index}")


def test_a_record_comes_back_from_its_bytes_equal_and_a_strange_body_reads_as_none() -> None:
    records = [full_record(0), full_record(1)]
    decoded = decode(encode(records))
    assert decoded == records
    assert decoded[0].ahead is not None and decoded[0].ahead.calls == 2  # compare=False fields too
    assert [r.compaction_id for r in decoded] == ["c0", "c1"]
    assert decode(b"not json") == [] and decode(b'{"v": 99, "records": []}') == [] and decode(b'{"v": 1}') == []


@pytest.fixture
async def sqlite_pair(tmp_path: Path) -> AsyncIterator[tuple[SqliteRecordStore, SqliteRecordStore]]:
    path = str(tmp_path / "state" / "inflight.db")  # a folder that does not exist yet
    one, two = (SqliteRecordStore(path, ttl_s=60, max_bytes=4 * MB) for _ in range(2))
    yield one, two
    await one.close()
    await two.close()


async def test_sqlite_records_are_seen_by_another_store_on_the_same_file(
    sqlite_pair: tuple[SqliteRecordStore, SqliteRecordStore], tmp_path: Path
) -> None:
    one, two = sqlite_pair
    await one.save("k", [full_record()])
    assert await two.load("k") == [full_record()]
    assert await two.load("other") == []
    mode = sqlite3.connect(tmp_path / "state" / "inflight.db").execute("PRAGMA journal_mode").fetchone()[0]
    assert mode == "wal"


async def test_sqlite_leases_have_one_holder_until_released_or_expired(
    sqlite_pair: tuple[SqliteRecordStore, SqliteRecordStore],
) -> None:
    await leases_have_one_holder(*sqlite_pair)


async def leases_have_one_holder(one: RecordStore, two: RecordStore) -> None:
    assert await one.lease("job", "a", 60) and await one.lease("job", "a", 60)  # its holder may renew it
    assert not await two.lease("job", "b", 60)
    await two.release("job", "b")  # not b's to release
    assert not await two.lease("job", "b", 60)
    await one.release("job", "a")
    assert await two.lease("job", "b", 0.2)
    await asyncio.sleep(0.3)
    assert await one.lease("job", "a", 60)  # b's lease ran out


async def test_sqlite_records_expire_and_stay_within_their_bytes(tmp_path: Path) -> None:
    store = SqliteRecordStore(str(tmp_path / "a.db"), ttl_s=0.2, max_bytes=MB)
    await store.save("old", [full_record()])
    await asyncio.sleep(0.3)
    assert await store.load("old") == []
    await store.close()
    store = SqliteRecordStore(str(tmp_path / "b.db"), ttl_s=60, max_bytes=MB)
    for key in range(300):  # 300 records of 20 kB: 6 MB if nothing went
        await store.save(f"k{key}", [full_record(key, "y" * 20_000)])
    total = sqlite3.connect(tmp_path / "b.db").execute("SELECT SUM(LENGTH(body)) FROM records").fetchone()[0]
    assert total < 2 * MB and await store.load("k299")  # swept at the last sweep; the newest stay
    await store.close()


async def test_sqlite_keeps_a_long_session_id_as_a_digest_and_counts_keys_in_its_bytes(tmp_path: Path) -> None:
    store = SqliteRecordStore(str(tmp_path / "a.db"), ttl_s=60, max_bytes=MB)
    sessions = [f"session:{n}" + "s" * 100_000 for n in range(150)]  # 15 MB of keys if kept as given
    for session in sessions:
        await store.save(session, [full_record()])
    assert await store.lease(f"summary:{sessions[0]}", "a", 60)
    assert await store.load(sessions[-1]) == [full_record()]
    db = sqlite3.connect(tmp_path / "a.db")
    (keys, bodies, rows) = db.execute("SELECT SUM(LENGTH(key)), SUM(LENGTH(body)), COUNT(*) FROM records").fetchone()
    (names,) = db.execute("SELECT MAX(LENGTH(name)) FROM leases").fetchone()
    db.close()
    await store.close()
    assert keys == 32 * rows and names == 32
    assert keys + bodies + rows * ROW_BYTES < MB


@pytest.fixture
def redis_url() -> Iterator[str]:
    with redis_server() as url:
        yield url


async def test_redis_records_and_leases(redis_url: str) -> None:
    one, two = RedisRecordStore(redis_url, ttl_s=60), RedisRecordStore(redis_url, ttl_s=60)
    await one.save("k", [full_record()])
    assert await two.load("k") == [full_record()] and await two.load("other") == []
    assert 0 < await one.client.ttl("inflight:rec:" + stored_key("k")) <= 60
    await leases_have_one_holder(one, two)
    await one.close()
    await two.close()


async def test_redis_keeps_a_long_session_id_as_a_digest(redis_url: str) -> None:
    store = RedisRecordStore(redis_url, ttl_s=60)
    session = "session:" + "s" * MB
    await store.save(session, [full_record()])
    assert await store.lease(f"summary:{session}", "a", 60)
    assert await store.load(session) == [full_record()]
    keys = await store.client.keys("inflight:*")
    await store.close()
    assert len(keys) == 2 and all(len(key) <= 64 for key in keys)


async def test_a_store_that_fails_is_replaced_by_memory_until_it_is_back() -> None:
    port = free_port()
    redis = RedisRecordStore(f"redis://127.0.0.1:{port}/0", ttl_s=60)
    store = ResilientStore(redis, MemoryRecordStore(max_entries=10, max_bytes=MB, ttl_s=60), name="redis")
    started = time.monotonic()
    await store.save("k", [full_record()])  # nothing listens: served from memory
    assert store.degraded and await store.load("k") == [full_record()]
    assert time.monotonic() - started < 2  # one short timeout, not one per call
    with redis_server(port):
        store.failed_at = time.monotonic() - 60  # as if the retry pause were over
        await store.save("k2", [full_record()])
        assert not degraded(store) and await redis.load("k2") == [full_record()]
    await store.close()


async def test_records_kept_in_memory_meanwhile_are_carried_over_with_the_stores_own_once_it_is_back() -> None:
    """A key saved in memory while Redis was down: its next load, once Redis is back, gives Redis's record and the
    one kept in memory after it (the newer), and writes both to Redis; a key saved since has nothing to carry."""
    port = free_port()
    redis = RedisRecordStore(f"redis://127.0.0.1:{port}/0", ttl_s=60)
    store = ResilientStore(redis, MemoryRecordStore(max_entries=10, max_bytes=MB, ttl_s=60), name="redis")
    await store.save("k", [full_record(1)])  # nothing listens: kept in memory, to carry over
    with redis_server(port):
        await redis.save("k", [full_record(2)])  # another worker's, saved meanwhile
        store.failed_at = time.monotonic() - 60  # as if the retry pause were over
        assert await store.load("k") == [full_record(2), full_record(1)]
        assert await redis.load("k") == [full_record(2), full_record(1)]
        assert not store.carried
        await redis.save("k", [full_record(3)])
        assert await store.load("k") == [full_record(3)]  # carried once: the store's own from then on
    await store.close()


def test_the_url_names_the_store(tmp_path: Path) -> None:
    cache = Cache()
    assert isinstance(open_record_store(State(), cache), MemoryRecordStore)
    sqlite = open_record_store(State(url=f"sqlite:///{tmp_path}/x.db"), cache)
    assert isinstance(sqlite, ResilientStore) and isinstance(sqlite.primary, SqliteRecordStore)
    assert sqlite.primary.path == f"{tmp_path}/x.db"  # sqlite:////abs/path: the path after three slashes
    redis = open_record_store(State(url="redis://127.0.0.1:1/0"), cache)
    assert isinstance(redis, ResilientStore) and isinstance(redis.primary, RedisRecordStore)
    for bad in ("postgres://x", "sqlite:///", "inflight.db"):
        with pytest.raises(ValueError):
            State(url=bad)


def degraded(store: ResilientStore) -> bool:
    """Asked through a call: mypy would keep the `store.degraded` an earlier assert narrowed."""
    return store.degraded
