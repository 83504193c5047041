"""The archive in SQLite: tables next to the records in the state file, or an in-memory database.

There are three tables: a row per conversation (its label, model, first and last time, turns so far),
a row per turn and a row per compaction (each a JSON body). Every `SWEEP_EVERY` writes (or after an
eighth of `max_bytes` is written), rows older than the retention are deleted, then the oldest rows of
all three tables while they total more than `max_bytes` (a row's size is its bodies, its strings, the
index entries of its keys and `ROW_BYTES`). A conversation keeps its newest `max_turns` turns. Labels
and models are stored clipped (`store.clipped`).
"""

from __future__ import annotations

import sqlite3
import time
from typing import Any

import orjson

from inflight.archive.store import MAX_LISTED, TurnWrite, clipped, kept_turn
from inflight.config import Archive
from inflight.records.sqlite_thread import SqliteThread, transaction

SCHEMA = """
CREATE TABLE IF NOT EXISTS archive_conversations (
    id TEXT PRIMARY KEY, label TEXT NOT NULL, model TEXT NOT NULL,
    first REAL NOT NULL, last REAL NOT NULL, turns INTEGER NOT NULL, compactions INTEGER NOT NULL);
CREATE INDEX IF NOT EXISTS archive_conversations_last ON archive_conversations (last);
CREATE TABLE IF NOT EXISTS archive_turns (conversation TEXT NOT NULL, time REAL NOT NULL, body BLOB NOT NULL);
CREATE INDEX IF NOT EXISTS archive_turns_conversation ON archive_turns (conversation, time);
CREATE INDEX IF NOT EXISTS archive_turns_time ON archive_turns (time);
CREATE TABLE IF NOT EXISTS archive_compactions (
    id TEXT PRIMARY KEY, conversation TEXT NOT NULL, time REAL NOT NULL, body BLOB NOT NULL);
CREATE INDEX IF NOT EXISTS archive_compactions_time ON archive_compactions (time);
"""
SWEEP_EVERY = 200
ROW_BYTES = 64  # what SQLite stores for a row besides its values: the rowid, the numbers, the time's index entry
# The size of each table's rows, in bytes (LENGTH counts characters for TEXT, bytes for a BLOB). A key is stored
# in its table and in each index on it.
WEIGHTS = {
    "archive_conversations": "LENGTH(CAST(id AS BLOB)) * 2 + LENGTH(CAST(label AS BLOB)) "
    f"+ LENGTH(CAST(model AS BLOB)) + {ROW_BYTES}",
    "archive_turns": f"LENGTH(body) + LENGTH(CAST(conversation AS BLOB)) * 2 + {ROW_BYTES}",
    "archive_compactions": "LENGTH(body) + LENGTH(CAST(id AS BLOB)) * 2 + LENGTH(CAST(conversation AS BLOB)) "
    f"+ {ROW_BYTES}",
}
TIMES = {"archive_conversations": "last", "archive_turns": "time", "archive_compactions": "time"}
COLUMNS = ("id", "label", "model", "first", "last", "turns", "compactions")


class SqliteArchive:
    def __init__(self, path: str, archive: Archive) -> None:
        self.archive = archive
        self.db = SqliteThread(path, schema=SCHEMA, name="inflight-archive")
        self._writes = 0
        self._bytes_since_sweep = 0

    async def add_turns(self, writes: list[TurnWrite]) -> None:
        await self.db.run(lambda db: self._add_turns(db, writes))

    async def add_compaction(self, entry: dict[str, Any]) -> None:
        def add(db: sqlite3.Connection) -> None:
            body = orjson.dumps(entry)  # on the store's thread: a compaction's messages may be megabytes
            with transaction(db):
                db.execute(
                    "INSERT OR REPLACE INTO archive_compactions (id, conversation, time, body) VALUES (?, ?, ?, ?)",
                    (entry["id"], entry["conversation"], entry["time"], body),
                )
                update = "UPDATE archive_conversations SET compactions = compactions + 1 WHERE id = ?"
                db.execute(update, (entry["conversation"],))
            self._wrote(db, len(body) + len(entry["id"]) * 2 + len(entry["conversation"]) + ROW_BYTES)

        await self.db.run(add)

    async def conversations(self, limit: int) -> list[dict[str, Any]]:
        since = time.time() - self.archive.retention_s
        query = f"SELECT {', '.join(COLUMNS)} FROM archive_conversations WHERE last > ? ORDER BY last DESC LIMIT ?"
        rows = await self.db.run(lambda db: db.execute(query, (since, min(limit, MAX_LISTED))).fetchall())
        return [dict(zip(COLUMNS, row, strict=True)) for row in rows]

    async def conversation(self, conversation: str) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
        since = time.time() - self.archive.retention_s

        def read(db: sqlite3.Connection) -> tuple[Any, list[Any]]:
            query = f"SELECT {', '.join(COLUMNS)} FROM archive_conversations WHERE id = ? AND last > ?"
            row = db.execute(query, (conversation, since)).fetchone()
            turns = db.execute(
                "SELECT body FROM archive_turns WHERE conversation = ? AND time > ?",
                (conversation, since),
            ).fetchall()
            parsed = sorted((orjson.loads(body) for (body,) in turns), key=lambda turn: turn["n"])  # off the loop
            return row, parsed

        row, turns = await self.db.run(read)
        if row is None:
            return None, []
        return dict(zip(COLUMNS, row, strict=True)), turns

    async def compaction(self, compaction_id: str) -> bytes | None:
        since = time.time() - self.archive.retention_s
        query = "SELECT body FROM archive_compactions WHERE id = ? AND time > ?"
        row = await self.db.run(lambda db: db.execute(query, (compaction_id, since)).fetchone())
        return bytes(row[0]) if row is not None else None

    async def close(self) -> None:
        await self.db.close()

    def _add_turns(self, db: sqlite3.Connection, writes: list[TurnWrite]) -> None:
        """Write a batch of turns in one transaction, with one row update per conversation."""
        groups: dict[str, list[TurnWrite]] = {}
        for write in writes:
            groups.setdefault(write.conversation, []).append(write)
        rows, trim, size = [], [], 0
        with transaction(db):
            for conversation, group in groups.items():
                first, last = group[0].turn, group[-1].turn
                label, model = clipped(group[-1].label), clipped(str(last["model"]))
                size += len(conversation) * 2 + len(label) + len(model) + ROW_BYTES
                (total,) = db.execute(
                    "INSERT INTO archive_conversations (id, label, model, first, last, turns, compactions) "
                    "VALUES (?, ?, ?, ?, ?, ?, 0) ON CONFLICT (id) DO UPDATE SET last = excluded.last, "
                    "model = excluded.model, turns = turns + excluded.turns RETURNING turns",
                    (conversation, label, model, first["time"], last["time"], len(group)),
                ).fetchone()
                start = total - len(group) + 1
                rows += [
                    (conversation, w.turn["time"], orjson.dumps(kept_turn(start + i, w.turn)))
                    for i, w in enumerate(group)
                ]
                if total // 100 > (start - 1) // 100:  # every 100 turns, trim the oldest beyond max_turns
                    trim.append(conversation)
            db.executemany("INSERT INTO archive_turns (conversation, time, body) VALUES (?, ?, ?)", rows)
        for conversation in trim:
            db.execute(
                "DELETE FROM archive_turns WHERE rowid IN (SELECT rowid FROM archive_turns WHERE conversation = ? "
                "ORDER BY time DESC LIMIT -1 OFFSET ?)",
                (conversation, self.archive.max_turns),
            )
        self._wrote(db, size + sum(len(body) + len(cid) * 2 + ROW_BYTES for cid, _, body in rows))

    def _wrote(self, db: sqlite3.Connection, size: int) -> None:
        """Sweep every `SWEEP_EVERY` writes, or sooner after big entries (a compaction may be megabytes)."""
        self._writes += 1
        self._bytes_since_sweep += size
        if self._writes % SWEEP_EVERY == 1 or self._bytes_since_sweep > self.archive.max_bytes // 8:
            self._bytes_since_sweep = 0
            self._sweep(db)

    def _sweep(self, db: sqlite3.Connection) -> None:
        since = time.time() - self.archive.retention_s
        for table, column in TIMES.items():
            db.execute(f"DELETE FROM {table} WHERE {column} <= ?", (since,))
        total = sum(
            db.execute(f"SELECT COALESCE(SUM({weight}), 0) FROM {table}").fetchone()[0]
            for table, weight in WEIGHTS.items()
        )
        # Delete the oldest rows across all three tables. A conversation's row has its last turn's time, so it
        # goes after its turns.
        oldest_first = " UNION ALL ".join(
            f"SELECT '{table}', rowid, {TIMES[table]}, {weight} FROM {table}" for table, weight in WEIGHTS.items()
        )
        while total > self.archive.max_bytes:
            oldest = db.execute(f"{oldest_first} ORDER BY 3 LIMIT 100").fetchall()
            if not oldest:
                return
            for table, rowid, _, size in oldest:
                db.execute(f"DELETE FROM {table} WHERE rowid = ?", (rowid,))
                total -= size
                if total <= self.archive.max_bytes:
                    return
