"""The metrics `GET /metrics` reports, in Prometheus's format: requests, latencies, compactions, summaries, stores.

`Metrics` has its own registry (tests build several apps in one process, so nothing goes in
prometheus_client's global one). Request figures are read from each request's `Exchange` once it finishes;
the compaction code reports through the `Observer` hooks, which this class implements.

With `inflight serve --workers N` every worker writes its values to files in the directory that
`PROMETHEUS_MULTIPROC_DIR` names (prometheus_client's multiprocess mode, chosen when it is first
imported; `inflight.http.workers` sets the variable before the workers start), and a scrape, whichever
worker answers it, adds up all of them.
"""

from __future__ import annotations

import asyncio
import logging
import os
from typing import Any, Protocol, TypeVar

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, values
from prometheus_client.exposition import choose_encoder
from prometheus_client.multiprocess import MultiProcessCollector

from inflight.compaction.actions import Action
from inflight.compaction.report import Plan, TurnReport
from inflight.frozen import frozen
from inflight.metrics.observer import SummarizerOutcome
from inflight.metrics.usage import ClientUsage, Usage, client_of, used_by

# Seconds. The proxy's own share is usually under a millisecond: fine buckets there.
ADDED_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)
UPSTREAM_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 30, 60, 120, 300, 600)
SUMMARIZER_BUCKETS = (0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 30, 60, 120, 300)
SHARE_BUCKETS = (0.1, 0.25, 0.5, 0.65, 0.8, 0.9, 0.95, 0.99, 1.0)
TOKEN_BUCKETS = (1000, 2000, 4000, 8000, 16000, 32000, 64000, 128000, 256000, 512000, 1_000_000, 2_000_000)
M = TypeVar("M", Counter, Gauge, Histogram)
# Finished requests are added to the metrics in batches: at most this many seconds after they finish, or
# once this many wait, and always before a scrape or `/inflight/usage` answered by the same process.
FLUSH_S = 0.5
MAX_PENDING = 4096

log = logging.getLogger("inflight")


class FinishedRequest(Protocol):
    """What a finished request tells the metrics (the edge's `Exchange` is one)."""

    @property
    def route(self) -> str: ...

    @property
    def status(self) -> int: ...

    @property
    def added_s(self) -> float | None: ...

    @property
    def upstream_s(self) -> float: ...

    @property
    def queue_s(self) -> float | None: ...

    @property
    def report(self) -> TurnReport: ...

    @property
    def send_timed_out(self) -> bool: ...

    @property
    def client(self) -> str | None: ...  # the tenant of a conversation request (None: another route)

    @property
    def unanswered(self) -> bool: ...  # an error came after a 200 already sent (a keep-alive stream's)


@frozen(slots=True)
class Finished:
    """What the metrics keep of a finished request until they add it in (`Metrics.flush`)."""

    route: str
    status: int
    added_s: float | None
    upstream_s: float
    queue_s: float | None
    report: TurnReport
    send_timed_out: bool
    client: str | None
    unanswered: bool = False

    @classmethod
    def of(cls, request: FinishedRequest) -> Finished:
        return cls(
            request.route,
            request.status,
            request.added_s,
            request.upstream_s,
            request.queue_s,
            request.report,
            request.send_timed_out,
            request.client,
            request.unanswered,
        )


def multiprocess_directory() -> str | None:
    """Where the workers' values are, when prometheus_client keeps them in files (else None)."""
    if not getattr(values.ValueClass, "_multiprocess", False):
        return None
    return os.environ.get("PROMETHEUS_MULTIPROC_DIR")


@frozen(slots=True)
class ClientSeries:
    """One client label's `inflight_client_*` series, looked up once: a request adds to several of them."""

    requests: Counter
    client_tokens: Counter
    upstream_tokens: Counter
    saved_tokens: Counter
    cost_sent: Counter
    cost_client: Counter
    refusals_avoided: Counter

    @classmethod
    def of(cls, metrics: Metrics, label: str) -> ClientSeries:
        tokens, cost = metrics.client_tokens, metrics.client_cost
        return cls(
            metrics.client_requests.labels(label),
            tokens.labels(label, "client"),
            tokens.labels(label, "upstream"),
            tokens.labels(label, "saved"),
            cost.labels(label, "sent"),
            cost.labels(label, "client"),
            metrics.client_refusals_avoided.labels(label),
        )


class Metrics:
    def __init__(self, *, top_clients: int = 10) -> None:
        self.registry = CollectorRegistry()
        self.usage = Usage(top=top_clients)  # per client: `GET /inflight/usage`, and the `inflight_client_*` series
        self._client_series: dict[str, ClientSeries] = {}  # at most the labels `usage` gives: bounded
        self._define_requests(self.registry)
        self._define_compactions(self.registry)
        self._define_clients(self.registry)
        self._children: dict[tuple[object, ...], Any] = {}  # `labels()` costs microseconds: each child once
        self._pending: list[Finished] = []  # finished requests not added yet (`flush`)
        self._flush_timer: asyncio.TimerHandle | None = None
        for side in ("before", "after"):  # the label values known ahead, at 0 from the start
            self._child(self.tokens, side)
        for outcome in ("ok", "rejected", "error"):
            self._child(self.summarizer_calls, outcome)
        for result in ("hit", "miss"):
            self._child(self.lookups, result)
        for side in ("sent", "client"):
            self._child(self.cost, side)
        self.jobs_changed(queued=0, running=0)
        self.exposed = self.registry
        directory = multiprocess_directory()
        if directory is not None:  # every worker's values, from their files
            self.exposed = CollectorRegistry()
            MultiProcessCollector(self.exposed, path=directory)  # type: ignore[no-untyped-call]

    def _define_requests(self, registry: CollectorRegistry) -> None:
        self.requests = Counter(
            "inflight_requests", "Requests answered, by route and status.", ["route", "status"], registry=registry
        )
        self.added = Histogram(
            "inflight_added_latency_seconds",
            "Time the proxy itself spent before the upstream's answer was in (total minus upstream waits).",
            ["route"],
            buckets=ADDED_BUCKETS,
            registry=registry,
        )
        self.upstream = Histogram(
            "inflight_upstream_latency_seconds",
            "Time waiting for the upstream's response headers (and a held first event), retries included.",
            ["route"],
            buckets=UPSTREAM_BUCKETS,
            registry=registry,
        )
        self.lane_wait = Histogram(
            "inflight_heavy_lane_wait_seconds",
            "Time a big request's work waited for a heavy lane (a thread per core), by route.",
            ["route"],
            buckets=ADDED_BUCKETS,
            registry=registry,
        )
        self.retries = Counter("inflight_retries", "Requests retried after a context refusal.", registry=registry)
        self.send_timeouts = Counter(
            "inflight_client_send_timeouts",
            "Answers cut because the client took none of their bytes for limits.client_send_timeout_s.",
            registry=registry,
        )

    def _define_compactions(self, registry: CollectorRegistry) -> None:
        self.retrievals = Counter(
            "inflight_retrievals",
            "inflight_retrieve calls the proxy answered: with the original (answered) or as unavailable.",
            ["outcome"],
            registry=registry,
        )
        self.compactions = Counter(
            "inflight_compactions", "Compaction actions taken (x-inflight-actions).", ["action"], registry=registry
        )
        self.tokens = Histogram(
            "inflight_compaction_tokens",
            "Calibrated prompt tokens of compacted requests, before and after.",
            ["side"],
            buckets=TOKEN_BUCKETS,
            registry=registry,
        )
        self.shadow_compactions = Counter(
            "inflight_shadow_compactions",
            "Compaction actions planned in shadow mode and not sent (x-inflight-shadow-actions).",
            ["action"],
            registry=registry,
        )
        self.shadow_tokens = Histogram(
            "inflight_shadow_compaction_tokens",
            "Calibrated prompt tokens of requests compaction would have rewritten in shadow mode: before, and after.",
            ["side"],
            buckets=TOKEN_BUCKETS,
            registry=registry,
        )
        self.summarizer_calls = Counter(
            "inflight_summarizer_calls", "Summarizer model calls, by outcome.", ["outcome"], registry=registry
        )
        self.summarizer_latency = Histogram(
            "inflight_summarizer_latency_seconds",
            "Time of each summarizer model call.",
            buckets=SUMMARIZER_BUCKETS,
            registry=registry,
        )
        self.fallbacks = Counter(
            "inflight_summarizer_fallbacks", "Requests whose compaction used the ledger fallback.", registry=registry
        )
        self.jobs = Gauge(
            "inflight_summary_jobs",
            "Background summaries queued and running.",
            ["state"],
            multiprocess_mode="livesum",
            registry=registry,
        )
        self.lookups = Counter(
            "inflight_record_lookups", "Compaction record lookups, by result.", ["result"], registry=registry
        )
        self.rewrites = Counter(
            "inflight_prefix_rewrites",
            "Requests whose compaction changed what had been sent before in their conversation (the prompt cache "
            "serves only what precedes the change).",
            registry=registry,
        )
        self.cached_share = Histogram(
            "inflight_cached_share",
            "Share of each compactable request's prompt tokens in the common prefix with its conversation's "
            "previous request: what a prefix cache can serve (an estimate).",
            buckets=SHARE_BUCKETS,
            registry=registry,
        )
        self.cost = Counter(
            "inflight_cost_units",
            "Estimated prompt cost of compactable requests, in units of one uncached input token at the `pricing:` "
            "prices: what was sent, and what the client's own request would have cost (side=client).",
            ["side"],
            registry=registry,
        )
        self.store_errors = Counter(
            "inflight_store_errors",
            "Failed calls to the shared record store (sqlite, redis) or the archive.",
            ["store"],
            registry=registry,
        )

    def _define_clients(self, registry: CollectorRegistry) -> None:
        label = ["client"]  # the digest of the client's key for the top clients by tokens sent, else `other`
        self.client_requests = Counter(
            "inflight_client_requests", "Conversation requests, by client.", label, registry=registry
        )
        self.client_tokens = Counter(
            "inflight_client_tokens",
            "Prompt tokens by client: as the client sent them (kind=client), as they went upstream (upstream), "
            "taken off by compaction (saved), and sent to the summarizer for its conversations (summarizer).",
            [*label, "kind"],
            registry=registry,
        )
        self.client_cost = Counter(
            "inflight_client_cost_units",
            "Estimated prompt cost by client, in units of one uncached input token: what was sent (side=sent), and "
            "what the client's own requests would have cost (side=client).",
            [*label, "side"],
            registry=registry,
        )
        self.client_refusals_avoided = Counter(
            "inflight_client_refusals_avoided",
            "Requests over the window (or refused and retried) that the client got an answer to, by client.",
            label,
            registry=registry,
        )

    def render(self, accept: str) -> tuple[bytes, str]:
        """The metrics as the scraper's `Accept` asks (Prometheus text unless OpenMetrics), and its content type."""
        encode, content_type = choose_encoder(accept)
        return encode(self.exposed), content_type

    def exchange_done(self, exchange: FinishedRequest) -> None:
        """Take in a finished request (`Exchange.finish`, on the event loop): its status, latencies, and what its
        compaction did.

        It is added with others at the next `flush`, at most `FLUSH_S` later: added one by one, the metrics
        took about 6% of the CPU time of a request the proxy only relays."""
        self._pending.append(Finished.of(exchange))
        if len(self._pending) >= MAX_PENDING:
            self.flush()
        elif self._flush_timer is None:
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:  # no event loop to wait on (a script, a test): added now
                self.flush()
                return
            self._flush_timer = loop.call_later(FLUSH_S, self.flush)

    def flush(self) -> None:
        """Add the requests taken in since the last flush (on the event loop: a scrape's render runs in a thread)."""
        if self._flush_timer is not None:
            self._flush_timer.cancel()
            self._flush_timer = None
        pending, self._pending = self._pending, []
        by_label: dict[str, ClientUsage] = {}  # a client series is added to once a batch
        for finished in pending:
            try:
                self._finished(finished, by_label)
            except Exception:  # one request's figures must not cost the others theirs
                log.exception("[metrics] could not observe a request to %s", finished.route)
        for label, usage in by_label.items():
            self._client_used(label, usage)

    def _finished(self, finished: Finished, by_label: dict[str, ClientUsage]) -> None:
        route = finished.route
        self._child(self.requests, route, str(finished.status)).inc()
        added = finished.added_s
        if added is not None:
            self._child(self.added, route).observe(added)
            self._child(self.upstream, route).observe(finished.upstream_s)
        queued = finished.queue_s
        if queued is not None:
            self._child(self.lane_wait, route).observe(queued)
        if finished.send_timed_out:
            self.send_timeouts.inc()
        self._reported(finished.report)
        self._retrieved(finished.report)
        if finished.client is not None:
            usage = used_by(finished.report, status=finished.status, answered=not finished.unanswered)
            label = self.usage.add(client_of(finished.client), usage)
            if (batched := by_label.get(label)) is None:
                by_label[label] = usage
            else:
                batched.add(usage)

    def _reported(self, report: TurnReport) -> None:
        """What the turn's report says: the prompt cache's figures, and what compaction did or planned."""
        if report.cache is not None and not report.shadow_mode:  # a plan's cache figures are not the live cache's
            self.cached_share.observe(report.cache.share)
            if report.cache.rewrite:
                self.rewrites.inc()
            for side, units in (("sent", report.cache.cost), ("client", report.cache.cost_client)):
                if units is not None:
                    self._child(self.cost, side).inc(units)
        if report.sent is not None and report.sent.actions != (Action.NONE,):
            self._actions(report.sent, counter=self.compactions, tokens=self.tokens)
            if Action.FALLBACK in report.sent.actions:
                self.fallbacks.inc()
            if report.retried:
                self.retries.inc()
        if report.shadow is not None:  # what shadow mode planned and did not send
            self._actions(report.shadow, counter=self.shadow_compactions, tokens=self.shadow_tokens)

    def _retrieved(self, report: TurnReport) -> None:
        """The `inflight_retrieve` calls the proxy answered for the turn."""
        for outcome, calls in (("answered", report.retrieved), ("unavailable", report.unavailable)):
            if calls:
                self._child(self.retrievals, outcome).inc(calls)

    def refused(self, route: str) -> None:
        """A request answered 401 before its route saw it (`route`: the label that route's requests have)."""
        self._child(self.requests, route, "401").inc()

    def _actions(self, plan: Plan, *, counter: Counter, tokens: Histogram) -> None:
        """Each action but `none` counted, and, for a request compacted, its tokens before and after."""
        for action in plan.actions:
            if action != Action.NONE:
                self._child(counter, action).inc()
        if plan.compacted:
            self._child(tokens, "before").observe(plan.tokens_before)
            self._child(tokens, "after").observe(plan.tokens_after)

    def record_lookup(self, *, hit: bool) -> None:
        self._child(self.lookups, "hit" if hit else "miss").inc()

    def jobs_changed(self, *, queued: int, running: int) -> None:
        self._child(self.jobs, "queued").set(queued)
        self._child(self.jobs, "running").set(running)

    def store_error(self, *, store: str) -> None:
        self._child(self.store_errors, store).inc()

    def _client_used(self, label: str, usage: ClientUsage) -> None:
        """Add `usage` to the series of the client label `label`."""
        series = self._client_series.get(label)
        if series is None:
            series = self._client_series[label] = ClientSeries.of(self, label)
        series.requests.inc(usage.requests)
        for counter, value in (
            (series.client_tokens, usage.client_tokens),
            (series.upstream_tokens, usage.upstream_tokens),
            (series.saved_tokens, usage.saved_tokens),
            (series.cost_sent, usage.cost_units),
            (series.cost_client, usage.cost_units_client),
            (series.refusals_avoided, usage.refusals_avoided),
        ):
            if value:
                counter.inc(value)

    def summarizer_spent(self, tenant: str, tokens: int) -> None:
        label = self.usage.summarized(client_of(tenant), tokens)
        self._child(self.client_tokens, label, "summarizer").inc(tokens)

    def summarizer_called(self, *, outcome: SummarizerOutcome, seconds: float) -> None:
        self._child(self.summarizer_calls, outcome).inc()
        self.summarizer_latency.observe(seconds)

    def _child(self, metric: M, *labels: str) -> M:
        key = (id(metric), *labels)
        child: M | None = self._children.get(key)
        if child is None:
            child = self._children[key] = metric.labels(*labels)
        return child
