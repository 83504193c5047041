"""The interface of an archive store (`ArchiveStore`) and what it is given to keep (`TurnWrite`).

A label (a client's `x-inflight-session`) and a model name are whatever a client sent, so a store keeps
them clipped to `NAME_CHARS` (`clipped`), and lists at most `MAX_LISTED` conversations.
"""

from __future__ import annotations

from typing import Any, Protocol

from inflight.frozen import frozen

NAME_CHARS = 256  # longest label or model name kept: enough for any real one (`limits.max_key_chars`' default)
MAX_LISTED = 1000  # most conversations one listing returns


def clipped(name: str) -> str:
    """A label or a model name as the archive keeps it: at most `NAME_CHARS` characters."""
    return name if len(name) <= NAME_CHARS else name[: NAME_CHARS - 1] + "…"


def kept_turn(number: int, turn: dict[str, Any]) -> dict[str, Any]:
    """A turn as stored: numbered, with its model name clipped."""
    return {"n": number, **turn, "model": clipped(str(turn.get("model", "")))}


@frozen
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
        """The conversations seen within the retention, most recent first: id, label, model, first, last, turns."""
        ...

    async def conversation(self, conversation: str) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
        """A conversation's overview row (None: unknown) and its turns within the retention, in order (`n`)."""
        ...

    async def compaction(self, compaction_id: str) -> bytes | None:
        """A compaction's entry as stored (JSON), which the endpoint passes on without parsing."""
        ...

    async def close(self) -> None: ...
