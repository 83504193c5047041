"""What an archive store does (`ArchiveStore`) and what it is given to keep (`TurnWrite`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol


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
