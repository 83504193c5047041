"""One SQLite connection, used only from one thread of its own: the event loop never waits on the disk.

The record store and the archive each have one. A connection is opened on first use and again after
an error other than "locked" closed it (a moved or deleted file, a full disk). `:memory:` is a
database of this process alone (the archive with `state.url: memory://`).
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")

MEMORY = ":memory:"


@contextmanager
def transaction(db: sqlite3.Connection, *, immediate: bool = False) -> Iterator[None]:
    """Statements as one (the connection is in autocommit mode): committed, or rolled back on any error.

    `immediate` takes the write lock at once, so that a read and the write it decides are one."""
    db.execute("BEGIN IMMEDIATE" if immediate else "BEGIN")
    try:
        yield
    except BaseException:
        db.execute("ROLLBACK")
        raise
    db.execute("COMMIT")


class SqliteThread:
    def __init__(self, path: str, *, schema: str, busy_timeout_ms: int = 1000, name: str = "inflight-sqlite") -> None:
        self.path = path
        self.schema = schema
        self.busy_timeout_ms = busy_timeout_ms
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix=name)
        self._db: sqlite3.Connection | None = None

    async def run(self, work: Callable[[sqlite3.Connection], T]) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._thread, self._call, work)

    async def close(self) -> None:
        await asyncio.get_running_loop().run_in_executor(self._thread, self._reset)
        self._thread.shutdown(wait=False)

    def _call(self, work: Callable[[sqlite3.Connection], T]) -> T:
        try:
            return work(self._connection())
        except sqlite3.Error as exc:
            if self.path != MEMORY and (not isinstance(exc, sqlite3.OperationalError) or "locked" not in str(exc)):
                self._reset()  # a moved or damaged file: open it anew next time
            raise

    def _reset(self) -> None:
        if self._db is not None:
            try:
                self._db.close()
            finally:
                self._db = None

    def _connection(self) -> sqlite3.Connection:
        if self._db is None:
            if self.path != MEMORY:
                Path(self.path).parent.mkdir(parents=True, exist_ok=True)
            db = sqlite3.connect(self.path, timeout=self.busy_timeout_ms / 1000, isolation_level=None)
            if self.path != MEMORY:
                db.execute("PRAGMA journal_mode=WAL")  # readers never wait for the writer; workers share the file
                db.execute("PRAGMA synchronous=NORMAL")  # WAL: a crash loses the last commits, never the file
            db.executescript(self.schema)
            self._db = db
        return self._db
