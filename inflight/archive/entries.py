"""Build what the archive keeps, as plain JSON-ready dicts: one entry per turn, one per compaction.

A turn entry is small (its tokens, the thresholds it was measured against, what was done). A
compaction entry holds what that compaction took out of the conversation: the client's own
messages that the summary (or a ledger digest) replaced, and those it masked or truncated, with
the summary and ledger sent in their place. Nothing here does I/O.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import xxhash

from inflight.archive.store import clipped
from inflight.compaction.conversation import Message, pinned
from inflight.compaction.record import Record
from inflight.compaction.stages.digest import without_notes
from inflight.compaction.summary_job import written_part
from inflight.frozen import frozen

LEDGER_CHARS = 100_000  # the archived ledger is whole unless it is pathologically long


def conversation_id(key: str) -> str:
    """A short id for a conversation key, safe in a URL (a session name may contain anything)."""
    return xxhash.xxh64_hexdigest(key.encode("utf-8"))


def conversation_label(key: str) -> str:
    """The name the viewer shows for a conversation: its `x-inflight-session`, else its model (clipped).

    The key's scope (its tenant, the tools a summary is sent with) follows its last `#` (`conversation_key`)
    and is left out of the label."""
    name = key.rpartition("#")[0] if "#" in key else key
    kind, _, rest = name.partition(":")
    return clipped(rest if kind == "session" else rest.rpartition(":")[0] or name)


@frozen
class Thresholds:
    """A turn's limits, in the upstream's tokens (calibrated), for the viewer's lines."""

    window: int
    budget: int
    background_at: int | None
    prune_at: int
    summarize_at: int
    target: int


def turn_entry(
    *,
    time: float,
    model: str,
    tokens: int,
    sent: int,
    thresholds: Thresholds,
    actions: str,
    compaction_id: str | None,
    fresh: bool,
    recorded: bool,
    status: int,
    cached: int | None = None,
    rewrite: bool = False,
    shadow: bool = False,
    cost: int | None = None,
    client_cost: int | None = None,
) -> dict[str, Any]:
    """The entry for one chat request: the client's tokens, what was sent, against which limits, and what was done.

    A `shadow` turn (`compaction.mode: shadow`) sent the client's request unchanged: `sent`, `actions` and
    `cached` describe what its compaction would have sent and done."""
    return {
        "time": round(time, 3),
        "model": clipped(model),
        "tokens": tokens,
        "sent": sent,
        "window": thresholds.window,  # (not `asdict`, which copies deeply, and this runs on every turn)
        "budget": thresholds.budget,
        "background_at": thresholds.background_at,
        "prune_at": thresholds.prune_at,
        "summarize_at": thresholds.summarize_at,
        "target": thresholds.target,
        "actions": actions,
        "compaction_id": compaction_id,
        "compacted_here": fresh,  # a new compaction on this turn (else none, or a replay of an earlier one)
        # When the next compaction happens: with a record in use, masking waits for summarize_at
        # (`compactor.recompact_at`), so that the prefix the upstream cached stays unchanged.
        "next_at": thresholds.summarize_at if recorded else thresholds.prune_at,
        "status": status,
        # How much the prompt cache can serve: the tokens shared with the previous turn (`compaction.prefix`),
        # and whether inflight changed what it had sent before.
        "cached": cached,
        "rewrite": rewrite,
        "shadow": shadow,
        # The prompt's estimated cost at the `pricing:` prices (units of one uncached input token), and what the
        # client's own request would have cost if sent unchanged.
        "cost": cost,
        "cost_client": client_cost,
    }


def compaction_entry(
    *,
    compaction_id: str,
    conversation: str,
    time: float,
    model: str,
    tokens_before: int,
    tokens_after: int,
    actions: str,
    messages: Sequence[Message],
    previous: Record | None,
    record: Record,
    shadow: bool = False,
) -> dict[str, Any]:
    """The entry for one compaction: what it replaced and with what (`shadow`: what it would have replaced)."""
    summary = record.summary
    return {
        "id": compaction_id,
        "conversation": conversation,
        "time": round(time, 3),
        "model": clipped(model),
        "tokens_before": tokens_before,
        "tokens_after": tokens_after,
        "actions": actions,
        # The summarizer's text (or the digest's note in its place), without the ledger sent after it.
        "summary": written_part(summary) if summary is not None else None,
        "summary_kind": summary_kind(record),
        "summary_as_sent": summary.get("content") if summary is not None else None,
        "ledger": record.ledger.render(LEDGER_CHARS) if record.ledger is not None else None,
        "summarized": [record.head_len, record.prefix_len] if record.summary is not None else None,
        "dropped": dropped(messages, previous, record),
        "shadow": shadow,
    }


def summary_kind(record: Record) -> str | None:
    """What replaces the summarized messages: an LLM `summary`, the `ledger` alone (no summary could be made),
    or an earlier LLM summary with the ledger of what came after it (`summary-and-ledger`)."""
    if record.summary is None:
        return None
    if not record.fallback:
        return "summary"
    return "summary-and-ledger" if without_notes(written_part(record.summary)) else "ledger"


def dropped(messages: Sequence[Message], previous: Record | None, record: Record) -> list[dict[str, Any]]:
    """The client's messages this compaction removed, oldest first, each marked summarized, masked or truncated.

    Messages an earlier compaction removed are in that compaction's entry."""
    out: list[dict[str, Any]] = []
    summarized: set[int] = set()
    if record.summary is not None:
        start = record.head_len
        if previous is not None and previous.summary is not None:
            start = max(start, previous.prefix_len)
        for index in range(start, min(record.prefix_len, len(messages))):
            if not pinned(messages[index]):  # system messages in the middle are sent unchanged
                out.append(_dropped(index, messages[index], "summarized"))
                summarized.add(index)
    for index, replacement in sorted(record.replaced.items()):
        # This includes truncated head messages (and pinned ones in the middle): they are sent cut, so they are listed.
        if index in summarized or index >= len(messages):
            continue
        before = previous.replaced.get(index) if previous is not None else None
        if before is None or before.kind != replacement.kind:
            out.append(_dropped(index, messages[index], replacement.kind))
    out.sort(key=lambda item: int(item["index"]))
    return out


def _dropped(index: int, message: Message, how: str) -> dict[str, Any]:
    kind = {"truncate": "truncated", "mask": "masked"}.get(how, how)
    return {"index": index, "how": kind, "message": message}
