"""Estimate how much of each request the upstream's prompt cache can serve, and count the rewrites that break it.

Providers cache the prefix a request shares with earlier ones (OpenAI automatically, Anthropic at the
client's breakpoints) and bill it at a fraction of the price. Between compactions a conversation only
grows, so each request begins with the previous one and the cache serves all of it. A compaction
rewrites what was sent, and the cache then serves only what comes before the first change. This
module keeps, per conversation, the last request sent (its messages' identities and token counts) and
compares the next one with it:

- cached: the tokens of the common prefix (the fixed part and the messages up to the first that
  differs), an estimate of what the cache serves, in our own units;
- a rewrite: the request does not begin with the one sent before, although the client's own
  request begins with its previous one (so the proxy changed the history, not the client).

This is kept in this process only (an LRU per conversation, bounded in bytes): with several workers,
each compares a turn with the last one it saw of that conversation.
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
from inflight.frozen import frozen
from inflight.policy.cost import prompt_cost

ENTRY_OVERHEAD_BYTES = 720  # memory per conversation besides its messages: objects, key, the LRU's links (measured)
ID_BYTES = 16  # a message's identity: its digest (xxh3-128 of its canonical JSON), or that of its replacement


@frozen(slots=True)
class SentRequest:
    """One request as the prompt cache sees it: its messages' identities and the running token total."""

    ids: bytes  # ID_BYTES per message, in order
    ends: array[int]  # running total of tokens (fixed part plus messages) at the end of each message
    client: bytes  # the client's own messages' digests, joined, to tell whether the client changed its history

    @classmethod
    def of(cls, ids: bytes, counts: Sequence[int], *, fixed: int, client: Sequence[bytes]) -> SentRequest:
        return cls(ids, running_totals(counts, fixed), b"".join(client))

    @classmethod
    def untouched(cls, digests: Sequence[bytes], counts: Sequence[int], *, fixed: int) -> SentRequest:
        """The client's own request, sent as it came: its messages are identified by their digests."""
        joined = b"".join(digests)
        return cls(joined, running_totals(counts, fixed), joined)

    @property
    def tokens(self) -> int:
        return self.ends[-1] if self.ends else 0


def running_totals(counts: Sequence[int], fixed: int) -> array[int]:
    """The tokens up to the end of each message: the fixed part, then each message's count added."""
    return array("q", accumulate(counts, initial=fixed))[1:]


@frozen(slots=True)
class LastSent:
    """What is kept of a conversation's last request: identities, token totals and a digest of the client's history.

    The digest tells whether the client's history in the next request begins with this one."""

    ids: bytes
    ends: array[int]
    client_bytes: int
    client_digest: bytes

    @classmethod
    def of(cls, sent: SentRequest) -> LastSent:
        return cls(sent.ids, sent.ends, len(sent.client), xxhash.xxh3_128_digest(sent.client))

    def size(self, key: str) -> int:
        """The bytes this entry takes under `key`, for the tracker's bound.

        That is its identities and token totals, the key, plus about 600 bytes of object and LRU overhead
        (measured with tracemalloc)."""
        return len(self.ids) + self.ends.itemsize * len(self.ends) + len(key) + ENTRY_OVERHEAD_BYTES


@frozen(slots=True)
class CacheTurn:
    """How the cache treats one request compared with the previous one in its conversation.

    It also holds the same figures for the client's own request against the client's previous one, i.e.
    what the turn would have cost without compaction."""

    tokens: int
    cached: int  # the common prefix's tokens (0 for the first request of a conversation this process sees)
    rewrite: bool  # whether the proxy changed what it had sent before
    client_tokens: int = 0
    client_cached: int = 0

    @property
    def share(self) -> float:
        return self.cached / self.tokens if self.tokens else 0.0

    def cost(self, prices: Prices) -> float:
        """What the upstream bills for this prompt, in units of one uncached input token (an estimate)."""
        return prompt_cost(prices, tokens=self.tokens, cached=self.cached)

    def client_cost(self, prices: Prices) -> float:
        """What the client's own request would have been billed, had it been sent unchanged."""
        return prompt_cost(prices, tokens=self.client_tokens, cached=self.client_cached)


def view_ids(view: Iterable[ViewItem], digests: Sequence[bytes], replaced: Mapping[int, Replacement]) -> bytes:
    """The identities of a compacted request's messages, joined.

    An unchanged message is identified by its digest. A masked or truncated one, which depends only on its
    original, by a hash of the original's digest (as the replacement recorded it: a client that later clears that
    result changes nothing sent), the kind of change and its size. The summary by a hash of its text.
    """
    ids = []
    for message, tokens, origin in view:
        if origin is None:
            ids.append(xxhash.xxh3_128_digest(repr(message.get("content")).encode("utf-8", "surrogatepass")))
        elif (replacement := replaced.get(origin)) is not None:
            ids.append(xxhash.xxh3_128_digest(b"%s%s%d" % (replacement.digest, replacement.kind.encode(), tokens)))
        else:
            ids.append(digests[origin])
    return b"".join(ids)


def common_messages(previous: bytes, current: bytes) -> int:
    """How many leading messages two requests share, by identity, found by binary search over prefixes."""
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
    """Compare `current` with the request sent before it (None if it is the first)."""
    if previous is None:
        return CacheTurn(current.tokens, 0, rewrite=False)
    shared = common_messages(previous.ids, current.ids)
    cached = current.ends[shared - 1] if shared else 0
    kept = shared * ID_BYTES == len(previous.ids)
    # A rewrite is ours only if the client's own history still begins with what it sent before.
    rewrite = not kept and xxhash.xxh3_128_digest(current.client[: previous.client_bytes]) == previous.client_digest
    return CacheTurn(current.tokens, cached, rewrite=rewrite)


class PrefixTracker:
    """Remembers the last request sent in each conversation (in this process), to compare the next one with.

    It keeps at most `max_bytes` (24 bytes per message and about 600 per conversation), evicting the least
    recently seen conversation first."""

    def __init__(self, max_bytes: int, *, max_tallies: int = 10_000) -> None:
        self._last: LRUCache[str, tuple[LastSent, int]] = LRUCache(maxsize=max_bytes, getsizeof=lambda kept: kept[1])
        self._client_entries = False  # whether any conversation has an entry for the client's own request
        # Per conversation (its key's digest), the turns seen and the rewrites among them, for `/inflight/stats`.
        self._tallies: LRUCache[bytes, list[int]] = LRUCache(maxsize=max_tallies)

    def rewrites(self) -> dict[str, object]:
        """The prefix rewrites of the conversations this process saw lately (at most `max_tallies` of them)."""
        tallies = list(self._tallies.values())
        rewritten = [rewrites for _, rewrites in tallies if rewrites]
        turns = sum(turns for turns, _ in tallies)
        total = sum(rewritten)
        return {
            "conversations": len(tallies),
            "rewritten_conversations": len(rewritten),
            "turns": turns,
            "rewrites": total,
            "most_in_one_conversation": max(rewritten, default=0),
            "per_rewritten_conversation": round(total / len(rewritten), 2) if rewritten else None,
            "per_100_turns": round(100 * total / turns, 2) if turns else None,
        }

    def _tally(self, key: str, rewrite: bool) -> None:
        digest = xxhash.xxh3_128_digest(key.encode("utf-8", "surrogatepass"))
        tally = self._tallies.get(digest)
        if tally is None:
            self._tallies[digest] = tally = [0, 0]
        tally[0] += 1
        tally[1] += rewrite

    def observe(self, key: str, sent: SentRequest, client: SentRequest | None = None) -> CacheTurn:
        """Compare `sent` with the conversation's previous request, and `client` with the client's previous one.

        `client` is the client's own request when compaction changed it. Only a compacted conversation keeps a
        separate entry for the client: before its first compaction, what the client sent is what was sent."""
        previous = self._last.get(key)
        turn = self._compare(key, previous, sent)
        self._tally(key, turn.rewrite)
        if client is None:
            # Compacted before but sent unchanged now: update the client's entry too.
            if self._client_entries and (own := f"client:{key}") in self._last:
                self._compare(own, self._last.get(own), sent)
            return CacheTurn(turn.tokens, turn.cached, turn.rewrite, turn.tokens, turn.cached)
        own = f"client:{key}"
        self._client_entries = True
        theirs = self._compare(own, self._last.get(own, previous), client)
        return CacheTurn(turn.tokens, turn.cached, turn.rewrite, theirs.tokens, theirs.cached)

    def _compare(self, key: str, kept: tuple[LastSent, int] | None, sent: SentRequest) -> CacheTurn:
        turn = compare(kept[0] if kept is not None else None, sent)
        last = LastSent.of(sent)
        size = last.size(key)
        if size <= self._last.maxsize:
            self._last[key] = (last, size)
        return turn


@dataclass(slots=True)
class CacheFigures:
    """Totals over a conversation's (or a replay's) turns: rewrites per 100 turns, the cached share, and the
    estimated cost of what was sent next to what the client's own requests would have cost."""

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
        """The cost of what was sent divided by what the client's requests would have cost (below 1: inflight saved)."""
        return self.cost / self.client_cost if self.client_cost else None

    @property
    def rewrites_per_100_turns(self) -> float | None:
        return 100 * self.rewrites / self.turns if self.turns else None

    @property
    def cached_share(self) -> float | None:
        return self.cached / self.tokens if self.tokens else None
