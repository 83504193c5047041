"""The archive: every turn and what each compaction dropped, for people to read later in the viewer.

It is stored next to the compaction records that `state.url` names, with its own retention.
`memory://` keeps it in an in-process SQLite database (lost on restart, like the records);
`sqlite:///…` in tables of that same file; `redis://` under `inflight:arch:*` keys. Entries expire
after `archive.retention_s`, and memory and SQLite drop the oldest beyond `archive.max_bytes`.
`open_archive` opens the store; `writer.ArchiveWriter` writes to it without making a request wait.
"""

from __future__ import annotations

from inflight.archive.store import ArchiveStore, TurnWrite
from inflight.config import Archive, State


def open_archive(state: State, archive: Archive) -> ArchiveStore:
    if state.scheme == "redis" or state.scheme == "rediss":
        from inflight.archive.redis import RedisArchive  # redis-py is imported only when Redis is used

        return RedisArchive(state.url, archive)
    from inflight.archive.sqlite import SqliteArchive
    from inflight.records.sqlite_thread import MEMORY

    return SqliteArchive(state.sqlite_path if state.scheme == "sqlite" else MEMORY, archive)


__all__ = ["ArchiveStore", "TurnWrite", "open_archive"]
