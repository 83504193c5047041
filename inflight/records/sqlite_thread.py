"""One SQLite connection used only from its own thread, so the event loop never waits on the disk.

The record store and the archive each have one. The connection is opened on first use, and reopened
after an error other than "locked" closed it (a moved or deleted file, a full disk). `:memory:` is a
database private to this process (the archive with `state.url: memory://`).

The file holds what clients sent (the archive) and summaries of it, so only its owner may read it.
It is created 0600 (and any folders created for it 0700) before SQLite opens it, and SQLite gives the
`-wal` and `-shm` files it creates the database's mode. An existing file that others can read is made
0600 when opened.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import sqlite3
import stat
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

log = logging.getLogger("inflight")

T = TypeVar("T")

MEMORY = ":memory:"
FILE_MODE = 0o600
FOLDER_MODE = 0o700
COMPANIONS = ("", "-wal", "-shm", "-journal")  # the database and the files SQLite keeps beside it


def create_private(path: str) -> None:
    """Create the database file (0600) and its folders (0700) if missing; make its existing files private (0600).

    This runs before SQLite opens the file, so nothing has been written to it yet."""
    missing: list[Path] = []
    folder = Path(path).parent
    while not folder.exists():
        missing.append(folder)
        folder = folder.parent
    for made in reversed(missing):
        with contextlib.suppress(FileExistsError):  # another worker created it meanwhile
            made.mkdir(mode=FOLDER_MODE)  # (not `parents=True`, which creates the parents with the umask's mode)
    os.close(os.open(path, os.O_RDWR | os.O_CREAT, FILE_MODE))  # the mode applies only if it creates the file
    for suffix in COMPANIONS:
        try:
            found = os.stat(path + suffix)
            if found.st_uid == os.getuid() and stat.S_IMODE(found.st_mode) & 0o077:
                os.chmod(path + suffix, FILE_MODE)
                log.warning("[state] %s could be read by others: made 0600", path + suffix)
        except FileNotFoundError:
            continue


@contextmanager
def transaction(db: sqlite3.Connection, *, immediate: bool = False) -> Iterator[None]:
    """Run statements as one transaction (the connection is in autocommit mode), rolled back on any error.

    `immediate` takes the write lock at once, so a read and the write that depends on it are atomic."""
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
                self._reset()  # a moved or damaged file: reopen it next time
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
                create_private(self.path)
            db = sqlite3.connect(self.path, timeout=self.busy_timeout_ms / 1000, isolation_level=None)
            if self.path != MEMORY:
                db.execute("PRAGMA journal_mode=WAL")  # readers never wait for the writer; workers share the file
                db.execute("PRAGMA synchronous=NORMAL")  # WAL: a crash loses the last commits, never the file
            db.executescript(self.schema)
            self._db = db
        return self._db
