"""Compaction records in a SQLite file: no server to run, and they survive a restart and are shared by workers.

Every call runs on the store's own thread (`SqliteThread`). The file is in WAL mode: readers do not wait
for the writer, and several processes (`inflight serve --workers N`) can share it. A writer waits at most
`busy_timeout_ms` for another, then the call fails (and `ResilientStore` falls back to memory for it).
Rows expire after `ttl_s`; above `max_bytes`, the rows closest to expiring are deleted. A row's size is
its body, its key and `ROW_BYTES` of SQLite overhead (the rowid, the index entries). Keys and lease
names are stored as digests (`codec.stored_key`), never as the client's session id.
"""

from __future__ import annotations

import sqlite3
import time

from inflight.compaction.record import Record
from inflight.records.codec import decode, encode, stored_key
from inflight.records.sqlite_thread import SqliteThread, transaction

SCHEMA = """
CREATE TABLE IF NOT EXISTS records (key TEXT PRIMARY KEY, body BLOB NOT NULL, expires REAL NOT NULL);
CREATE INDEX IF NOT EXISTS records_expires ON records (expires);
CREATE TABLE IF NOT EXISTS leases (name TEXT PRIMARY KEY, owner TEXT NOT NULL, expires REAL NOT NULL);
"""
SWEEP_EVERY = 200  # saves between sweeps that delete expired rows and enforce the size limit (sooner after big saves)
ROW_BYTES = 64  # what SQLite stores for a row besides its key and body: the rowid, the expiry and its index entry
WEIGHT = f"LENGTH(body) + LENGTH(key) * 2 + {ROW_BYTES}"  # the key is stored in the table and in its primary key index


class SqliteRecordStore:
    def __init__(self, path: str, *, ttl_s: float, max_bytes: int, busy_timeout_ms: int = 1000) -> None:
        self.path = path
        self.ttl_s = ttl_s
        self.max_bytes = max_bytes
        self.db = SqliteThread(path, schema=SCHEMA, busy_timeout_ms=busy_timeout_ms)
        self._saves = 0
        self._bytes_since_sweep = 0

    @property
    def degraded(self) -> bool:
        """Always False: this store either serves or fails (`ResilientStore` is what falls back to memory)."""
        return False

    async def load(self, key: str) -> list[Record]:
        key = stored_key(key)
        body = await self.db.run(lambda db: self._load(db, key))
        return decode(body) if body is not None else []

    async def save(self, key: str, records: list[Record]) -> None:
        body, key = encode(records), stored_key(key)
        await self.db.run(lambda db: self._save(db, key, body))

    async def lease(self, name: str, owner: str, ttl_s: float) -> bool:
        name = stored_key(name)
        return await self.db.run(lambda db: self._lease(db, name, owner, ttl_s))

    async def release(self, name: str, owner: str) -> None:
        name = stored_key(name)
        await self.db.run(lambda db: db.execute("DELETE FROM leases WHERE name = ? AND owner = ?", (name, owner)))

    async def close(self) -> None:
        await self.db.close()

    def _load(self, db: sqlite3.Connection, key: str) -> bytes | None:
        now = time.time()
        row = db.execute("SELECT body, expires FROM records WHERE key = ?", (key,)).fetchone()
        if row is None or row[1] <= now:
            return None
        if row[1] - now < self.ttl_s / 2:  # in use: restart its time to live (at most one write per half TTL)
            db.execute("UPDATE records SET expires = ? WHERE key = ?", (now + self.ttl_s, key))
        return bytes(row[0])

    def _save(self, db: sqlite3.Connection, key: str, body: bytes) -> None:
        expires = time.time() + self.ttl_s
        db.execute("INSERT OR REPLACE INTO records (key, body, expires) VALUES (?, ?, ?)", (key, body, expires))
        self._saves += 1
        self._bytes_since_sweep += len(body)
        if self._saves % SWEEP_EVERY == 1 or self._bytes_since_sweep > self.max_bytes // 8:
            self._bytes_since_sweep = 0
            self._sweep(db)

    def _sweep(self, db: sqlite3.Connection) -> None:
        db.execute("DELETE FROM records WHERE expires <= ?", (time.time(),))
        db.execute("DELETE FROM leases WHERE expires <= ?", (time.time(),))
        (total,) = db.execute(f"SELECT COALESCE(SUM({WEIGHT}), 0) FROM records").fetchone()
        while total > self.max_bytes:
            rows = db.execute(f"SELECT key, {WEIGHT} FROM records ORDER BY expires LIMIT 100").fetchall()
            if not rows:
                return
            db.executemany("DELETE FROM records WHERE key = ?", [(key,) for key, _ in rows])
            total -= sum(size for _, size in rows)

    def _lease(self, db: sqlite3.Connection, name: str, owner: str, ttl_s: float) -> bool:
        now = time.time()
        with transaction(db, immediate=True):  # read and write in one transaction, so two owners cannot both win
            row = db.execute("SELECT owner, expires FROM leases WHERE name = ?", (name,)).fetchone()
            free = row is None or row[0] == owner or row[1] <= now
            if free:
                db.execute(
                    "INSERT OR REPLACE INTO leases (name, owner, expires) VALUES (?, ?, ?)", (name, owner, now + ttl_s)
                )
        return free
