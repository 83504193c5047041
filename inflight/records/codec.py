"""Encode compaction records as bytes for the stores outside this process (SQLite, Redis).

The encoding is JSON (orjson) with hashes as hex, readable with `sqlite3` or `redis-cli` when someone
wants to see what the proxy kept. A record holds what a compaction substituted (the summary, the ledger,
the masked and truncated messages, hashes of the prefix), never the conversation itself. `VERSION`
changes when the shape does; a record of another version reads as no record (the conversation is
compacted from scratch), never as an error.

Keys are stored as digests (`stored_key`), never as given: a conversation's key contains the client's
`x-inflight-session` (or its model name), which may be megabytes long. A digest has the same size
whatever the client sent, so a store's byte limit covers its keys too.
"""

from __future__ import annotations

import hashlib
from typing import Any

import orjson

from inflight.compaction.ledger import Ledger
from inflight.compaction.record import Precomputed, Record, Replacement

VERSION = 1
KEY_DIGEST_BYTES = 16  # 128 bits: no two conversations (or leases) share a stored key by chance


def stored_key(key: str) -> str:
    """What a store keeps for a conversation key or a lease name: its digest in hex (32 characters)."""
    return hashlib.blake2b(key.encode("utf-8", "surrogatepass"), digest_size=KEY_DIGEST_BYTES).hexdigest()


def encode(records: list[Record]) -> bytes:
    return orjson.dumps({"v": VERSION, "records": [_record(r) for r in records]})


def decode(body: bytes) -> list[Record]:
    """The records in `body`; [] for another version's or a damaged one."""
    try:
        data = orjson.loads(body)
        if not isinstance(data, dict) or data.get("v") != VERSION:
            return []
        return [_record_of(item) for item in data["records"]]
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
        return []


def _record(record: Record) -> dict[str, Any]:
    return {
        "head_len": record.head_len,
        "prefix_len": record.prefix_len,
        "prefix_hash": record.prefix_hash.hex(),
        "summary": record.summary,
        "summary_tokens": record.summary_tokens,
        "fallback": record.fallback,
        "replaced": [
            [index, r.digest.hex(), r.message, r.tokens, r.kind] for index, r in sorted(record.replaced.items())
        ],
        "ledger": _ledger(record.ledger),
        "ahead": _ahead(record.ahead),
        "compaction_id": record.compaction_id,
    }


def _record_of(item: dict[str, Any]) -> Record:
    replaced = {
        int(index): Replacement(bytes.fromhex(digest), message, int(tokens), kind)
        for index, digest, message, tokens, kind in item["replaced"]
    }
    return Record(
        head_len=int(item["head_len"]),
        prefix_len=int(item["prefix_len"]),
        prefix_hash=bytes.fromhex(item["prefix_hash"]),
        summary=item["summary"],
        summary_tokens=int(item["summary_tokens"]),
        fallback=bool(item["fallback"]),
        replaced=replaced,
        ledger=_ledger_of(item["ledger"]),
        ahead=_ahead_of(item["ahead"]),
        compaction_id=str(item.get("compaction_id", "")),
    )


def _ledger(ledger: Ledger | None) -> dict[str, Any] | None:
    if ledger is None:
        return None
    return {
        "commands": ledger.commands,
        "outcomes": ledger.outcomes,
        "files": ledger.files,
        "errors": ledger.errors,
        "identifiers": ledger.identifiers,
        "dropped_messages": ledger.dropped_messages,
    }


def _ledger_of(item: dict[str, Any] | None) -> Ledger | None:
    if item is None:
        return None
    return Ledger(
        commands=tuple(item["commands"]),
        outcomes=dict(item["outcomes"]),
        files=dict(item["files"]),
        errors=tuple(item["errors"]),
        identifiers=tuple(item["identifiers"]),
        dropped_messages=int(item["dropped_messages"]),
    )


def _ahead(ahead: Precomputed | None) -> dict[str, Any] | None:
    if ahead is None:
        return None
    return {
        "cut": ahead.cut,
        "cut_hash": ahead.cut_hash.hex(),
        "text": ahead.text,
        "base": ahead.base,
        "ledger": _ledger(ahead.ledger),
        "calls": ahead.calls,
        "made_ms": ahead.made_ms,
    }


def _ahead_of(item: dict[str, Any] | None) -> Precomputed | None:
    if item is None:
        return None
    return Precomputed(
        cut=int(item["cut"]),
        cut_hash=bytes.fromhex(item["cut_hash"]),
        text=str(item["text"]),
        base=int(item["base"]),
        ledger=_ledger_of(item["ledger"]),
        calls=int(item["calls"]),
        made_ms=float(item["made_ms"]),
    )
