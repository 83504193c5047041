"""Where the archive lives: beside the compaction records that `state.url` names, with its own retention.

`memory://` keeps it in an in-process SQLite database (lost on restart, like the records);
`sqlite:///…` in tables of that same file; `redis://` under `inflight:arch:*` keys. Entries go
after `archive.retention_s`, and memory and SQLite drop their oldest past `archive.max_bytes`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from proxy.config import Archive, State


@dataclass(frozen=True)
class TurnWrite:
    """A turn to append to conversation `conversation` (called `label` in the viewer)."""

    conversation: str
    label: str
    turn: dict[str, Any]


class ArchiveStore(Protocol):
    async def add_turns(self, writes: list[TurnWrite]) -> None:
        """Append turns, in order (each numbered `n` in its conversation, from 1), and touch their conversations."""
        ...

    async def add_compaction(self, entry: dict[str, Any]) -> None: ...

    async def conversations(self, limit: int) -> list[dict[str, Any]]:
        """The conversations seen within the retention, the latest first: id, label, model, first, last, turns."""
        ...

    async def conversation(self, conversation: str) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
        """A conversation's summary row (None: unknown) and its kept turns within the retention, in order (`n`)."""
        ...

    async def compaction(self, compaction_id: str) -> bytes | None:
        """A compaction's entry as stored (JSON): the endpoint sends it on without parsing it."""
        ...

    async def close(self) -> None: ...


def open_archive(state: State, archive: Archive) -> ArchiveStore:
    if state.scheme == "redis" or state.scheme == "rediss":
        from proxy.archive.redis import RedisArchive  # redis-py is imported only by those who use it

        return RedisArchive(state.url, archive)
    from proxy.archive.sqlite import SqliteArchive
    from proxy.state.sqlite_thread import MEMORY

    return SqliteArchive(state.sqlite_path if state.scheme == "sqlite" else MEMORY, archive)
