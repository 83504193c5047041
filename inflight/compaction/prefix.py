"""What of each request the upstream's prompt cache can serve, and the prefix rewrites that cost it.

Providers cache the prefix a request shares with the ones before it (OpenAI on its own, Anthropic
at the client's breakpoints) and bill it at a fraction of the price. Between compactions a
conversation only grows, so each request begins with the one before and the cache serves all of
it; a compaction rewrites what was sent, and the cache then serves only what comes before the
first change. This keeps, per conversation, the request sent last (its messages' identities and
their tokens) and compares the next one with it:

- cached: the tokens of the common prefix (the fixed part and the messages up to the first that
  differs): an estimate of what the cache serves, in our own units;
- a rewrite: the request does not begin with the one sent before, although the client's own
  request begins with its previous one (the client did not change its history: the proxy did).

Kept in this process only (an LRU by conversation, bounded in bytes): with several workers each
compares a turn with the last one it saw of that conversation.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from itertools import accumulate

import xxhash
from cachetools import LRUCache

from inflight.compaction.draft import ViewItem
from inflight.compaction.record import Replacement
from inflight.config import Prices
from inflight.policy.cost import prompt_cost

ENTRY_OVERHEAD_BYTES = 600  # a conversation's entry beyond its messages: objects, key, the LRU's links
ID_BYTES = 16  # a message's identity: its digest (xxh3-128 of its canonical JSON), or of what replaced it


@dataclass(frozen=True)
class SentRequest:
    """One request as the prompt cache sees it: its messages' identities, and its tokens through each."""

    ids: bytes  # ID_BYTES per message, in order
    ends: array[int]  # tokens of the fixed part and the messages through each one
    client: bytes  # the client's own messages' digests, joined: whether the client changed its history

    @classmethod
    def of(cls, ids: bytes, counts: Sequence[int], *, fixed: int, client: Sequence[bytes]) -> SentRequest:
        return cls(ids, array("q", accumulate(counts, initial=fixed))[1:], b"".join(client))

    @property
    def tokens(self) -> int:
        return self.ends[-1] if self.ends else 0


@dataclass(frozen=True)
class LastSent:
    """What is kept of a conversation's request sent last: its identities and tokens, and a digest of the client's
    history then (to tell whether the next request's client history begins with it)."""

    ids: bytes
    ends: array[int]
    client_bytes: int
    client_digest: bytes

    @classmethod
    def of(cls, sent: SentRequest) -> LastSent:
        return cls(sent.ids, sent.ends, len(sent.client), xxhash.xxh3_128_digest(sent.client))

    def size(self, key: str) -> int:
        """Bytes it holds under `key`, as the tracker bounds them: its identities and tokens, the key, and the
        objects around them and the cache's own bookkeeping (measured with tracemalloc: about 600 bytes)."""
        return len(self.ids) + self.ends.itemsize * len(self.ends) + len(key) + ENTRY_OVERHEAD_BYTES


@dataclass(frozen=True)
class CacheTurn:
    """What the cache makes of one request, against the one sent before it in its conversation; and of the
    client's own request against the client's previous one (what it would have cost without compaction)."""

    tokens: int
    cached: int  # the common prefix's tokens (0 for a conversation's first request this process sees)
    rewrite: bool  # the proxy changed what it had sent before
    client_tokens: int = 0
    client_cached: int = 0

    @property
    def share(self) -> float:
        return self.cached / self.tokens if self.tokens else 0.0

    def cost(self, prices: Prices) -> float:
        """What the upstream bills for this prompt, in units of one uncached input token (an estimate)."""
        return prompt_cost(prices, tokens=self.tokens, cached=self.cached)

    def client_cost(self, prices: Prices) -> float:
        """What the client's own request would have been billed, had the upstream taken it."""
        return prompt_cost(prices, tokens=self.client_tokens, cached=self.client_cached)


def view_ids(view: Iterable[ViewItem], digests: Sequence[bytes], replaced: Mapping[int, Replacement]) -> bytes:
    """The identities of a compacted request's messages: a client's message its digest; one replaced (masked,
    truncated: a pure function of the original) a digest of its digest, how and its size; the summary a digest
    of its text."""
    ids = []
    for message, tokens, origin in view:
        if origin is None:
            ids.append(xxhash.xxh3_128_digest(repr(message.get("content")).encode("utf-8", "surrogatepass")))
        elif (replacement := replaced.get(origin)) is not None:
            ids.append(xxhash.xxh3_128_digest(b"%s%s%d" % (digests[origin], replacement.kind.encode(), tokens)))
        else:
            ids.append(digests[origin])
    return b"".join(ids)


def common_messages(previous: bytes, current: bytes) -> int:
    """How many leading messages two requests share (by their identities): a binary search over prefixes."""
    if current.startswith(previous):
        return len(previous) // ID_BYTES
    low, high = 0, min(len(previous), len(current)) // ID_BYTES  # low shared, high + 1 not
    while low < high:
        middle = (low + high + 1) // 2
        if previous[: middle * ID_BYTES] == current[: middle * ID_BYTES]:
            low = middle
        else:
            high = middle - 1
    return low


def compare(previous: LastSent | None, current: SentRequest) -> CacheTurn:
    """`current` against the request sent before it (None: the first)."""
    if previous is None:
        return CacheTurn(current.tokens, 0, rewrite=False)
    shared = common_messages(previous.ids, current.ids)
    cached = current.ends[shared - 1] if shared else 0
    kept = shared * ID_BYTES == len(previous.ids)
    client_kept = xxhash.xxh3_128_digest(current.client[: previous.client_bytes]) == previous.client_digest
    return CacheTurn(current.tokens, cached, rewrite=not kept and client_kept)


class PrefixTracker:
    """The request sent last in each conversation (this process's), to measure the next one against; at most
    `max_bytes` of them (24 bytes a message and about 600 a conversation), the least recently seen going first."""

    def __init__(self, max_bytes: int) -> None:
        self._last: LRUCache[str, tuple[LastSent, int]] = LRUCache(maxsize=max_bytes, getsizeof=lambda kept: kept[1])

    def observe(self, key: str, sent: SentRequest, client: SentRequest | None = None) -> CacheTurn:
        """`sent` against the conversation's request sent before it; and `client`, the client's own request when
        compaction changed it, against the client's previous one. Only a compacted conversation keeps that second
        entry: before its first compaction the client's previous request is the one sent."""
        previous = self._last.get(key)
        turn = self._compare(key, previous, sent)
        own = f"client:{key}"
        if client is None:
            if own in self._last:  # compacted before, sent as it came now: the client's entry follows
                self._compare(own, self._last.get(own), sent)
            return CacheTurn(turn.tokens, turn.cached, turn.rewrite, turn.tokens, turn.cached)
        theirs = self._compare(own, self._last.get(own, previous), client)
        return CacheTurn(turn.tokens, turn.cached, turn.rewrite, theirs.tokens, theirs.cached)

    def _compare(self, key: str, kept: tuple[LastSent, int] | None, sent: SentRequest) -> CacheTurn:
        turn = compare(kept[0] if kept is not None else None, sent)
        last = LastSent.of(sent)
        size = last.size(key)
        if size <= self._last.maxsize:
            self._last[key] = (last, size)
        return turn


@dataclass
class CacheFigures:
    """A conversation's (or a replay's) turns, as the figures people read: rewrites per 100 turns, cached share,
    and the estimated cost of what was sent beside what the client's own requests would have cost."""

    turns: int = 0
    rewrites: int = 0
    tokens: int = 0
    cached: int = 0
    cost: float = 0.0  # in units of one uncached input token
    client_cost: float = 0.0

    @classmethod
    def total(cls, many: Iterable[CacheFigures]) -> CacheFigures:
        every = cls()
        for figures in many:
            every.turns, every.rewrites = every.turns + figures.turns, every.rewrites + figures.rewrites
            every.tokens, every.cached = every.tokens + figures.tokens, every.cached + figures.cached
            every.cost, every.client_cost = every.cost + figures.cost, every.client_cost + figures.client_cost
        return every

    def add(self, turn: CacheTurn, prices: Prices | None = None) -> None:
        self.turns += 1
        self.rewrites += turn.rewrite
        self.tokens += turn.tokens
        self.cached += turn.cached
        if prices is not None:
            self.cost += turn.cost(prices)
            self.client_cost += turn.client_cost(prices)

    @property
    def cost_ratio(self) -> float | None:
        """What was sent cost, against what the client's requests would have cost (below 1: inflight saved)."""
        return self.cost / self.client_cost if self.client_cost else None

    @property
    def rewrites_per_100_turns(self) -> float | None:
        return 100 * self.rewrites / self.turns if self.turns else None

    @property
    def cached_share(self) -> float | None:
        return self.cached / self.tokens if self.tokens else None
