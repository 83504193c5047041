"""The SQLite files we make hold what clients sent: only their owner may read them.

The database and the `-wal` and `-shm` files SQLite keeps beside it are 0600, and the folders made
for them 0700, for the record store and the archive alike, whatever the umask lets through.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from inflight.archive import TurnWrite, open_archive
from inflight.config import Archive, State
from inflight.records.sqlite import SqliteRecordStore
from tests.records.test_stores import full_record


@pytest.fixture(autouse=True)
def lax_umask() -> Iterator[None]:
    """The usual umask (022), which lets others read what is made with the default modes."""
    previous = os.umask(0o022)
    yield
    os.umask(previous)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def assert_private(path: Path, made: Path) -> None:
    """The database, its -wal and -shm are 0600; the folders from `made` down to the database's are 0700."""
    for name in (path.name, path.name + "-wal", path.name + "-shm"):
        assert mode(path.parent / name) == 0o600, name
    folder = path.parent
    while folder != made.parent:
        assert mode(folder) == 0o700, folder
        folder = folder.parent


async def test_the_record_store_makes_its_files_for_its_owner_alone(tmp_path: Path) -> None:
    path = tmp_path / "state" / "deeper" / "inflight.db"
    store = SqliteRecordStore(str(path), ttl_s=60, max_bytes=1 << 20)
    await store.save("k", [full_record()])
    assert await store.lease("job", "a", 60)
    assert_private(path, tmp_path / "state")  # checked while open: the -wal and -shm are there
    await store.close()


async def test_the_archive_makes_its_files_for_its_owner_alone(tmp_path: Path) -> None:
    path = tmp_path / "state" / "inflight.db"
    store = open_archive(State(url=f"sqlite:///{path}"), Archive(enabled=True))
    await store.add_turns([TurnWrite("a", "agent", {"time": 1e10, "model": "m", "tokens": 1})])
    assert_private(path, tmp_path / "state")
    await store.close()


async def test_a_database_others_could_read_is_made_private_when_opened(tmp_path: Path) -> None:
    path = tmp_path / "inflight.db"
    store = SqliteRecordStore(str(path), ttl_s=60, max_bytes=1 << 20)
    await store.save("k", [full_record()])
    await store.close()
    path.chmod(0o644)  # as an earlier version left it
    store = SqliteRecordStore(str(path), ttl_s=60, max_bytes=1 << 20)
    assert await store.load("k") == [full_record()]
    for name in (path.name, path.name + "-wal", path.name + "-shm"):
        assert mode(tmp_path / name) == 0o600, name
    await store.close()
