"""Compaction records: how a conversation was rewritten, so the next turn can be rewritten the same way.

Every turn the client resends its full, uncompacted history. A record says which prefix of that
history was replaced (its length and a hash of its messages), by which summary, and which later
messages were masked or truncated into what. Re-applying it costs no LLM call and produces the
same bytes as last turn, so the upstream's prompt cache keeps hitting.
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from dataclasses import field
from typing import Literal, Protocol

import xxhash

from inflight.compaction.conversation import Message
from inflight.compaction.ledger import Ledger
from inflight.frozen import frozen

MAX_RECORDS_PER_KEY = 8  # conversations that share a head (same system prompt and task) each get their own record


@frozen
class Replacement:
    """The original message with this `digest` is sent as `message`, which is `tokens` long."""

    digest: bytes
    message: Message
    tokens: int
    kind: Literal["truncate", "mask"]


@frozen
class Precomputed:
    """A summary made ahead by a background job (`inflight.compaction.background`), kept until a turn needs it.

    It covers the conversation up to message `cut` (the first `cut` digests hash to `cut_hash`), including
    earlier summaries. So any record of the same conversation that summarizes less, or has only a local
    digest, can use it instead of its own.
    """

    cut: int
    cut_hash: bytes
    text: str
    base: int = 0  # the prefix_len of the record it was made from
    ledger: Ledger | None = None  # that record's ledger extended with the facts up to `cut`, also made ahead
    calls: int = field(default=0, compare=False)  # summarizer calls it took, for the log
    made_ms: float = field(default=0.0, compare=False)

    def usable(self, *, head_len: int, prefix_len: int, fallback: bool, digests: Sequence[bytes]) -> bool:
        """Whether it matches this conversation and summarizes more than the record does (or replaces a digest)."""
        if not head_len < self.cut <= len(digests) or prefix_hash(digests[: self.cut]) != self.cut_hash:
            return False
        return self.cut > prefix_len or fallback


@frozen
class Record:
    head_len: int
    prefix_len: int  # original messages [head_len, prefix_len) are replaced by `summary`
    prefix_hash: bytes
    summary: Message | None = None
    summary_tokens: int = 0
    fallback: bool = False  # the summary is a local digest, not an LLM summary
    replaced: dict[int, Replacement] = field(default_factory=dict)
    ledger: Ledger | None = None  # facts about everything the summary replaced, extended at each compaction
    ahead: Precomputed | None = None  # a summary made in the background for the next compaction to use
    # The compaction that made it (`x-inflight-compaction-id`, the archive); replaying it keeps the same id.
    compaction_id: str = field(default="", compare=False)

    def matches(self, digests: Sequence[bytes]) -> bool:
        return self.prefix_len <= len(digests) and prefix_hash(digests[: self.prefix_len]) == self.prefix_hash

    @property
    def bare(self) -> bool:
        """Whether the record rewrites nothing and only carries a summary made ahead for the first compaction."""
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
    """Build the key records are stored under: the session id, or the model and the head's hash, then a scope.

    The name is the client's `x-inflight-session` when sent, else the model and a hash of the head.
    The scope follows the last `#` and keeps records apart: `tenant` (a digest of the client's key) stops one
    client reading or evicting another's records, and `sent_with` (a digest of the tools an in-place summary is
    sent with) keeps a summary shaped by other tools from serving this request. A name that itself contains `#`
    always gets a `#`, with an empty scope if needed, so two different keys can never be equal by accident."""
    name = f"session:{session}" if session else f"head:{model}:{prefix_hash(head_digests).hex()}"
    scope = ".".join(part for part in (f"t{tenant}" if tenant else "", f"w{sent_with}" if sent_with else "") if part)
    return f"{name}#{scope}" if scope or "#" in name else name


def shadow_key(key: str) -> str:
    """Return the key shadow mode (`compaction.mode: shadow`) stores a conversation's records under.

    Its own scope keeps unsent plans, which use the ledger instead of asking the summarizer, apart from real
    records: a real turn never replays a plan, and a plan never replays a real record."""
    name, _, scope = key.rpartition("#") if "#" in key else (key, "", "")
    return f"{name}#{scope}.shadow" if scope else f"{name}#shadow"


def best_record(records: Sequence[Record], digests: Sequence[bytes]) -> Record | None:
    """Return the stored record that matches these messages and covers the longest prefix of them."""
    matching = [r for r in records if r.matches(digests)]
    return max(matching, key=lambda r: (r.prefix_len, len(r.replaced)), default=None)


def key_digest(key: str) -> bytes:
    """A conversation key's digest: what a map of this process keeps per conversation in its place."""
    return xxhash.xxh3_128_digest(key.encode("utf-8", "surrogatepass"))


def with_record(records: Sequence[Record], old: Record | None, new: Record) -> list[Record]:
    """Add `new` in place of the record it extends, newest last, keeping at most `MAX_RECORDS_PER_KEY`."""
    kept = [r for r in records if r is not old and r != new]
    return [*kept, new][-MAX_RECORDS_PER_KEY:]


class RecordStore(Protocol):
    """Where records are stored (`inflight.records` has the implementations: memory, SQLite, Redis).

    A lease lets processes sharing a store agree which one runs a conversation's background summary:
    `owner` has it until it releases it or `ttl_s` runs out. `degraded` is True while a shared store
    fails and records are served from this process's memory instead."""

    @property
    def degraded(self) -> bool: ...

    async def load(self, key: str) -> list[Record]: ...

    async def save(self, key: str, records: list[Record]) -> None: ...

    async def lease(self, name: str, owner: str, ttl_s: float) -> bool: ...

    async def release(self, name: str, owner: str) -> None: ...

    async def close(self) -> None: ...
