"""What each client used and saved: requests, tokens sent and saved, summaries, cost, refusals avoided.

A client is the digest of its key (`inflight.policy.tenants.tenant_of`; "" for one that presents none). This
process keeps the figures of at most `MAX_CLIENTS` clients; the least recently seen one's are then folded into
`other`. For Prometheus, a client gets a label of its own once it is among the `top` clients by tokens sent;
the others are counted as `other`. A label once given is kept, so every series only grows, and at most
`2 * top` are given in a process's life (room for the top clients to change), so the label stays bounded
whatever number of keys clients send.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from cachetools import LRUCache

from inflight.compaction.report import TurnReport

OTHER = "other"  # the label (and the JSON entry) of every client without one of its own
ANONYMOUS = "anonymous"  # a client that presents no key
MAX_CLIENTS = 10_000
DIGEST_CHARS = 16  # of the tenant's hex digest: what the log line, the label and the JSON show
RANK_EVERY = 256  # requests between two recomputations of the tokens a client needs to be among the top


@dataclass(slots=True)
class ClientUsage:
    """One client's figures since the process started (tokens are inflight's calibrated counts)."""

    requests: int = 0
    client_tokens: int = 0  # the prompts as the client sent them
    upstream_tokens: int = 0  # the prompts as they went upstream (a shadowed request's as the client sent it)
    saved_tokens: int = 0  # client_tokens - upstream_tokens
    summarizer_tokens: int = 0  # the input of the summarizer calls its conversations caused
    cost_units: int = 0  # what was sent, in units of one uncached input token (`pricing:`)
    cost_units_client: int = 0  # what the client's own requests would have cost
    refusals_avoided: int = 0  # requests over the window, or refused and retried, that the client got an answer to
    # Tokens, savings and cost count the requests the upstream answered only (a client that left mid-answer included).

    def add(self, other: ClientUsage) -> None:
        """Add `other`'s figures to these (field by field: this runs on every request)."""
        self.requests += other.requests
        self.client_tokens += other.client_tokens
        self.upstream_tokens += other.upstream_tokens
        self.saved_tokens += other.saved_tokens
        self.summarizer_tokens += other.summarizer_tokens
        self.cost_units += other.cost_units
        self.cost_units_client += other.cost_units_client
        self.refusals_avoided += other.refusals_avoided


def client_of(tenant: str) -> str:
    """What a tenant is called in the figures: its digest's start, or `anonymous`."""
    return tenant[:DIGEST_CHARS] if tenant else ANONYMOUS


def used_by(report: TurnReport, *, status: int, answered: bool = True) -> ClientUsage:
    """What one finished request adds to its client's figures: a request refused or failed (a 4xx or 5xx, the
    upstream's or ours, a client gone before its answer began, or an error after a keep-alive's 200: `answered`
    False) adds only itself, since nobody bills its tokens."""
    usage = ClientUsage(requests=1)
    if status >= 400 or not answered:
        return usage
    sent, window = report.sent, report.window
    if sent is not None:
        usage.client_tokens, usage.upstream_tokens = sent.tokens_before, sent.tokens_after
    elif window is not None:
        usage.client_tokens = usage.upstream_tokens = window.prompt_tokens
    # A forced compaction of a short history can come out longer than it went in: that saved nothing.
    usage.saved_tokens = max(usage.client_tokens - usage.upstream_tokens, 0)
    if report.cache is not None and not report.shadow_mode:
        usage.cost_units = report.cache.cost or 0
        usage.cost_units_client = report.cache.cost_client or 0
    over = window is not None and sent is not None and sent.compacted and sent.tokens_before > window.context_window
    if (over or report.retried) and status < 400 and not report.shadow_mode:
        usage.refusals_avoided = 1
    return usage


class Clients(LRUCache[str, ClientUsage]):
    """The clients kept one by one, the least recently seen evicted into `on_evict` (so totals never shrink)."""

    def __init__(self, maxsize: int, *, on_evict: Callable[[ClientUsage], None]) -> None:
        super().__init__(maxsize=maxsize)
        self.on_evict = on_evict

    def popitem(self) -> tuple[str, ClientUsage]:
        client, usage = super().popitem()
        self.on_evict(usage)
        return client, usage


class Usage:
    """Every client's figures in this process, and which clients have a metrics label of their own."""

    def __init__(self, *, top: int = 10, max_clients: int = MAX_CLIENTS) -> None:
        self.top = top
        self.max_labels = 2 * top
        self.other = ClientUsage()  # the clients no longer kept one by one
        self._clients = Clients(max_clients, on_evict=self.other.add)
        self._labelled: set[str] = set()
        self._needed = -1  # a client must have sent more tokens than this to be among the top (as last worked out)
        self._until_rank = 0

    def add(self, client: str, usage: ClientUsage) -> str:
        """Add `usage` to `client`'s figures; return its metrics label (its name, or `other`)."""
        kept = self._clients.get(client)
        if kept is None:
            kept = self._clients[client] = ClientUsage()
        kept.add(usage)
        return self.label(client, kept.client_tokens)

    def summarized(self, client: str, tokens: int) -> str:
        """A summarizer call of `tokens` input tokens caused by `client`'s conversation; return its label."""
        return self.add(client, ClientUsage(summarizer_tokens=tokens))

    def label(self, client: str, volume: int) -> str:
        if client in self._labelled:
            return client
        if len(self._labelled) >= self.max_labels:
            return OTHER
        self._until_rank -= 1
        if self._until_rank <= 0:
            self._rank()
        if volume > self._needed:
            self._rank()  # a label is for good: judged on the figures as they are now, not as last worked out
            if volume > self._needed:
                self._labelled.add(client)
                return client
        return OTHER

    def _rank(self) -> None:
        """Work out again the tokens the `top`-th client has sent (every `RANK_EVERY` requests: it costs a pass)."""
        self._until_rank = RANK_EVERY
        if len(self._clients) <= self.top:  # every client is among the top
            self._needed = -1
            return
        # More than the next one down: a client tied with the rest (10,000 clients of one request each) is not top.
        self._needed = heapq.nlargest(self.top + 1, (usage.client_tokens for usage in self._clients.values()))[-1]

    def report(self, limit: int = 100) -> dict[str, Any]:
        """The `limit` clients that sent the most tokens, the rest as `other`, and the totals (for
        `GET /inflight/usage`)."""
        ranked = sorted(self._clients.items(), key=lambda item: item[1].client_tokens, reverse=True)
        other = ClientUsage()
        other.add(self.other)
        for _, usage in ranked[limit:]:
            other.add(usage)
        total = ClientUsage()
        total.add(other)
        for _, usage in ranked[:limit]:
            total.add(usage)
        return {
            "clients": {client: asdict(usage) for client, usage in ranked[:limit]},
            OTHER: asdict(other),
            "total": asdict(total),
            "clients_seen": len(self._clients),
        }
