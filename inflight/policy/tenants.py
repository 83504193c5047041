"""Identify clients and limit what they can use: tenant digests, bounded map keys, and summarizer budgets.

A tenant is the key a client presents, read as `access.keys` reads it (`Authorization: Bearer …`, else
`x-api-key`), or whatever `Authorization` it sends when the proxy has no keys of its own; only a
digest of it is kept. Conversations and calibration are kept per tenant, so no client can read,
evict or skew another's. Any client-sent string used as a map key (a model, a session) is clipped
at `limits.max_key_chars` with a digest of the whole appended, so such maps stay small.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Sequence

from cachetools import LRUCache

from inflight.compaction.actions import Action
from inflight.config.settings import SummarizerBudget

TENANT_DIGEST_BYTES = 12  # 96 bits: two keys will not collide by chance, and a collision cannot be searched for
KEY_DIGEST_BYTES = 16
MAX_CLIENTS = 10_000  # how many clients' summarizer spending is tracked (least recently seen dropped)
BUDGET_ACTION = Action.SUMMARY_BUDGET


def presented_key(credentials: Sequence[tuple[bytes, bytes]]) -> bytes | None:
    """The key as `access.keys` reads it: a bearer token, else the first other key header (`x-api-key`: the
    credentials are the wire formats' key headers only); any other `Authorization` whole."""
    api_key = None
    for name, value in credentials:
        if name == b"authorization":
            scheme, _, key = value.partition(b" ")
            return key.strip() if scheme.lower() == b"bearer" else value.strip()
        if api_key is None:
            api_key = value.strip()
    return api_key


def tenant_of(credentials: Sequence[tuple[bytes, bytes]]) -> str:
    """The digest of the client's key, in hex ("" for a client that presents none)."""
    key = presented_key(credentials)
    if not key:
        return ""
    return hashlib.blake2b(key, digest_size=TENANT_DIGEST_BYTES, person=b"inflight-tenant").hexdigest()


def bounded_key(text: str, max_chars: int) -> str:
    """`text` if it has at most `max_chars`, else its start plus a digest of the whole, `max_chars` long in all."""
    if len(text) <= max_chars:
        return text
    digest = hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=KEY_DIGEST_BYTES).hexdigest()
    return f"{text[: max(max_chars - len(digest) - 1, 0)]}~{digest}"


def tenant_model_key(model: str, tenant: str, max_chars: int) -> str:
    """The map key for one client's figures about a model (its window bracket, its reply sizes).

    Keying by tenant means one client's requests never change another's figures."""
    return f"{tenant}:{bounded_key(model, max_chars)}"


class Bucket:
    """A token bucket holding at most `capacity`, refilled at `capacity` per `period_s`; capacity 0 means no limit."""

    __slots__ = ("at", "capacity", "level", "per_s")

    def __init__(self, capacity: int, period_s: float, now: float) -> None:
        self.capacity = float(capacity)
        self.per_s = capacity / period_s
        self.level = self.capacity
        self.at = now

    def available(self, now: float) -> float:
        if not self.capacity:
            return float("inf")
        self.level = min(self.capacity, self.level + (now - self.at) * self.per_s)
        self.at = now
        return self.level

    def take(self, amount: float) -> None:
        if self.capacity:
            self.level -= amount


class Spending:
    """One client's (or the whole proxy's) summarizer calls per minute and input tokens per hour."""

    __slots__ = ("calls", "tokens")

    def __init__(self, calls_per_minute: int, tokens_per_hour: int, now: float) -> None:
        self.calls = Bucket(calls_per_minute, 60.0, now)
        self.tokens = Bucket(tokens_per_hour, 3600.0, now)

    def allows(self, tokens: int, now: float) -> bool:
        return self.calls.available(now) >= 1 and self.tokens.available(now) >= max(tokens, 1)

    def take(self, tokens: int) -> None:
        self.calls.take(1)
        self.tokens.take(tokens)


class SummaryBudget:
    """Limits the summarizer calls clients may cause (`limits.summarizer`), per client and for the whole proxy.

    A client is identified by its tenant (the digest of its key), else by its address. Background jobs spend
    from the budget of the client whose request started them."""

    def __init__(
        self,
        settings: SummarizerBudget,
        *,
        clock: Callable[[], float] = time.monotonic,
        max_clients: int = MAX_CLIENTS,
        on_spend: Callable[[str, int], None] | None = None,
    ) -> None:
        self.settings = settings
        self.clock = clock
        self.on_spend = on_spend  # told each call charged: the tenant whose conversation caused it, its tokens
        self.refused = 0  # calls not made, for the stats
        self._all = Spending(settings.global_calls_per_minute, settings.global_tokens_per_hour, clock())
        self._clients: LRUCache[str, Spending] = LRUCache(maxsize=max_clients)

    def allows(self, client: str, tokens: int = 0) -> bool:
        """Whether `client` may have a summarizer call of `tokens` input tokens now."""
        now = self.clock()
        return self._all.allows(tokens, now) and self._of(client, now).allows(tokens, now)

    def spend(self, client: str, tokens: int, *, tenant: str = "") -> bool:
        """Charge one call of `tokens` to `client`'s budget and the proxy's; return False, charging nothing, if over.
        `tenant`: whose key the conversation came with, for the usage figures (`client` may be an address)."""
        if not self.allows(client, tokens):
            self.refused += 1
            return False
        self._all.take(tokens)
        self._of(client, self.clock()).take(tokens)
        if self.on_spend is not None:
            self.on_spend(tenant, tokens)
        return True

    def _of(self, client: str, now: float) -> Spending:
        spending = self._clients.get(client)
        if spending is None:
            settings = self.settings
            spending = self._clients[client] = Spending(settings.calls_per_minute, settings.tokens_per_hour, now)
        return spending
