"""Compaction records: how a conversation was rewritten, so that the next turn is rewritten the same way.

Every turn the client resends its full, uncompacted history. A record says which prefix of that
history was replaced (its length and a hash of its messages), by which summary, and which later
messages were masked or truncated into what. Re-applying it costs no LLM call and produces the
same bytes as last turn, so the upstream's prompt cache keeps hitting.
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol

import xxhash

from inflight.compaction.conversation import Message
from inflight.compaction.ledger import Ledger

MAX_RECORDS_PER_KEY = 8  # conversations that share a head (same system prompt and task) get one each


@dataclass(frozen=True)
class Replacement:
    """Original message `digest` is sent as `message` (`tokens` long)."""

    digest: bytes
    message: Message
    tokens: int
    kind: Literal["truncate", "mask"]


@dataclass(frozen=True)
class Precomputed:
    """A summary made ahead by a background job (`inflight.compaction.background`), waiting for the turn that needs it.

    It covers the conversation up to message `cut` (whose first `cut` digests hash to `cut_hash`),
    earlier summaries included, so any record of the same conversation that summarizes less, or
    holds only a local digest, can take it in place of its own.
    """

    cut: int
    cut_hash: bytes
    text: str
    base: int = 0  # the prefix_len of the record it was made from
    ledger: Ledger | None = None  # that record's ledger with the facts up to `cut`, worked out ahead too
    calls: int = field(default=0, compare=False)  # what it cost to make, for the log
    made_ms: float = field(default=0.0, compare=False)

    def usable(self, *, head_len: int, prefix_len: int, fallback: bool, digests: Sequence[bytes]) -> bool:
        """Whether it summarizes this conversation further than the record does (or replaces its digest)."""
        if not head_len < self.cut <= len(digests) or prefix_hash(digests[: self.cut]) != self.cut_hash:
            return False
        return self.cut > prefix_len or fallback


@dataclass(frozen=True)
class Record:
    head_len: int
    prefix_len: int  # original messages [head_len, prefix_len) are replaced by `summary`
    prefix_hash: bytes
    summary: Message | None = None
    summary_tokens: int = 0
    fallback: bool = False  # the summary is a local digest, not an LLM summary
    replaced: dict[int, Replacement] = field(default_factory=dict)
    ledger: Ledger | None = None  # the facts of everything the summary replaced, grown at each compaction
    ahead: Precomputed | None = None  # the summary the next compaction will use, made in the background
    # Which compaction made it (`x-inflight-compaction-id`, the archive): a replay of it is the same record.
    compaction_id: str = field(default="", compare=False)

    def matches(self, digests: Sequence[bytes]) -> bool:
        return self.prefix_len <= len(digests) and prefix_hash(digests[: self.prefix_len]) == self.prefix_hash

    @property
    def bare(self) -> bool:
        """Nothing is rewritten: the record only holds a summary made ahead of the first compaction."""
        return self.summary is None and not self.replaced

    def ahead_usable(self, digests: Sequence[bytes]) -> bool:
        if self.ahead is None:
            return False
        return self.ahead.usable(
            head_len=self.head_len, prefix_len=self.prefix_len, fallback=self.fallback, digests=digests
        )


def new_compaction_id() -> str:
    return secrets.token_hex(8)


def prefix_hash(digests: Sequence[bytes]) -> bytes:
    return xxhash.xxh3_128_digest(b"".join(digests))


def conversation_key(
    *, session: str | None, model: str, head_digests: Sequence[bytes], tenant: str = "", sent_with: str = ""
) -> str:
    """The client's `x-inflight-session` when it sends one, else the model and the head's hash; then its scope.

    The scope keeps tenants apart: `tenant`, the digest of the client's key, so that no client reads or
    evicts (`MAX_RECORDS_PER_KEY`) another's records; and `sent_with`, the digest of the tools an in-place
    summary is sent with (and `tool_choice: none`), so that a summary steered by other tools serves no
    request but theirs. It follows the last `#`: a key with a scope, or whose name holds a `#`, has one
    (empty for the latter when it has no scope), so that no two keys meet by accident."""
    name = f"session:{session}" if session else f"head:{model}:{prefix_hash(head_digests).hex()}"
    scope = ".".join(part for part in (f"t{tenant}" if tenant else "", f"w{sent_with}" if sent_with else "") if part)
    return f"{name}#{scope}" if scope or "#" in name else name


def shadow_key(key: str) -> str:
    """Where shadow mode keeps a conversation's records (`compaction.mode: shadow`): in its own scope, so that a plan
    that was never sent (made with the ledger where no summarizer was asked) is never replayed by a turn sent in
    earnest, and the live records never by a plan."""
    name, _, scope = key.rpartition("#") if "#" in key else (key, "", "")
    return f"{name}#{scope}.shadow" if scope else f"{name}#shadow"


def best_record(records: Sequence[Record], digests: Sequence[bytes]) -> Record | None:
    """Of the records kept under a key, the one covering the longest prefix of these messages."""
    matching = [r for r in records if r.matches(digests)]
    return max(matching, key=lambda r: (r.prefix_len, len(r.replaced)), default=None)


def with_record(records: Sequence[Record], old: Record | None, new: Record) -> list[Record]:
    """`new` replaces the record it extends (or joins the others), newest last, bounded."""
    kept = [r for r in records if r is not old and r != new]
    return [*kept, new][-MAX_RECORDS_PER_KEY:]


class RecordStore(Protocol):
    """Where records live (`inflight.records` has the implementations: memory, SQLite, Redis).

    A lease is how processes that share a store agree that one of them runs a conversation's
    background summary: held by `owner` until released or `ttl_s` runs out. `degraded` is True while
    a shared store fails and records are served from this process's memory instead."""

    @property
    def degraded(self) -> bool: ...

    async def load(self, key: str) -> list[Record]: ...

    async def save(self, key: str, records: list[Record]) -> None: ...

    async def lease(self, name: str, owner: str, ttl_s: float) -> bool: ...

    async def release(self, name: str, owner: str) -> None: ...

    async def close(self) -> None: ...
