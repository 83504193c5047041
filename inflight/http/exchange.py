"""One request as the proxy handles it: its timings, its log line, and the report its headers and metrics show.

Each step of a request adds to its `Exchange`; the log line is built and written here, once, when
the response is done (or failed), and the finish hook (the metrics) is called then. Fields are
`key=value` pairs in the order they were added.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from inflight.compaction.report import CacheFigures, TurnReport
from inflight.offload import LaneWait

if TYPE_CHECKING:
    from inflight.metrics.tracing import RequestTrace

log = logging.getLogger("inflight")
MAX_FIELD_CHARS = 256
# The log record's attribute that holds a request line's fields, for a formatter that writes them as its own
# (`log.format: json`: `inflight.http.server.JsonFormatter`); the text line ignores it.
REQUEST_FIELDS = "inflight_fields"


class LineFields:
    """Whether a request's log record carries its fields (`REQUEST_FIELDS`): set by `log.format: json`
    (`inflight.http.server.log_formatter`), since building them costs every request a dict."""

    wanted = False


# The report of a request no turn handled, one for all of them: frozen to the type checker, never assign its fields.
NOTHING_DONE = TurnReport()


def clipped(text: str) -> str:
    """`text` at most MAX_FIELD_CHARS long, saying how much more there was."""
    return f"{text[:MAX_FIELD_CHARS]}...(+{len(text) - MAX_FIELD_CHARS})" if len(text) > MAX_FIELD_CHARS else text


def clean(value: object) -> str:
    """A log field that cannot forge a line or a field, nor fill the log: control characters and spaces
    escaped, clipped to MAX_FIELD_CHARS (a client's 2 MB model name is 2 MB no more)."""
    text = clipped(str(value))
    if text.isprintable() and " " not in text:
        return text
    return text.encode("unicode_escape").decode("ascii").replace(" ", "\\x20")


@dataclass
class Exchange:
    method: str
    path: str
    route: str = ""  # the route it matched, e.g. `/v1/{path}` (a metric label: never the raw path)
    on_finish: Callable[[Exchange], None] | None = field(default=None, repr=False)
    clock: Callable[[], float] = field(default=time.perf_counter, repr=False)  # seconds, for its timings
    started: float = field(init=False)  # when it began, by `clock`
    status: int = 0
    fields: dict[str, object] = field(default_factory=dict)  # made clean for the log line when it is written
    report: TurnReport = NOTHING_DONE  # what the turn did: the x-inflight-* headers, the metrics
    finished: bool = False
    answered_at: float | None = None  # when the upstream's answer was last in (headers, or a held first event)
    upstream_s: float = 0.0  # waited on the upstream until then: every request sent to it (a retry's too)
    lane: LaneWait = field(default_factory=LaneWait)  # waited for a heavy lane (`inflight.offload`)
    # The prompt cache's figures, worked out once the answer is out (off the request's path).
    cache_figures: Callable[[], CacheFigures | None] | None = field(default=None, repr=False)
    send_timed_out: bool = False  # the client was cut for reading nothing (`limits.client_send_timeout_s`)
    # The client got an error, not the upstream's answer, though the status says 200 (a keep-alive stream's 200 went
    # out before the error came): nothing of it is billed, and the usage figures count none of it.
    unanswered: bool = False
    client: str | None = None  # a conversation request's tenant (the digest of its key), for the usage figures
    trace: RequestTrace | None = field(default=None, repr=False)  # its spans, when telemetry is on
    _sent_at: float | None = field(default=None, repr=False)
    _waited_before: float = field(default=0.0, repr=False)  # by the upstream requests before the latest one

    @property
    def headers(self) -> dict[str, str]:
        """The `x-inflight-*` headers for the client, rendered from the report."""
        return self.report.headers()

    def __post_init__(self) -> None:
        self.started = self.clock()

    def note(self, key: str, value: object) -> None:
        self.fields[key] = value

    def note_all(self, fields: dict[str, object]) -> None:
        self.fields.update(fields)

    def upstream_sending(self) -> None:
        """A request to the upstream is about to be opened (called before each, a retry's too)."""
        self._waited_before = self.upstream_s
        self._sent_at = self.clock()

    def upstream_answered(self) -> None:
        """The upstream's answer is in: its headers, and again once a held first event is."""
        now = self.answered_at = self.clock()
        if self._sent_at is not None:
            self.upstream_s = self._waited_before + now - self._sent_at

    @property
    def upstream_ms(self) -> float | None:
        """`upstream_s` in milliseconds, once the upstream answered (None: it never did)."""
        return self.upstream_s * 1000 if self.answered_at is not None else None

    @property
    def queue_s(self) -> float | None:
        """How long its work waited for a heavy lane (None: it needed none)."""
        return self.lane.seconds if self.lane.used else None

    @property
    def added_s(self) -> float | None:
        """The proxy's own time until the upstream's answer was in (None: it never answered): everything
        before the first request upstream and between its attempts, a heavy lane's queue included."""
        if self.answered_at is None:
            return None
        return max(0.0, self.answered_at - self.started - self.upstream_s)

    def finish(self) -> None:
        """Write the request's log line and call the finish hook (only the first call does)."""
        if self.finished:
            return
        self.finished = True
        if self.cache_figures is not None:
            try:
                self.report = self.report.with_cache(self.cache_figures())
                self.note_all(self.report.cache_fields())
            except Exception:  # a bug of ours in a figure must not cost the log line
                log.exception("the prompt cache's figures could not be worked out")
        total_ms = (self.clock() - self.started) * 1000
        upstream = f"{self.upstream_ms:.1f}" if self.upstream_ms is not None else "-"
        added = self.added_s
        proxy = f"{added * 1000:.1f}" if added is not None else "-"
        fields = "".join(f" {key}={clean(value)}" for key, value in self.fields.items())
        queued = self.queue_s
        queue = f" queue_ms={queued * 1000:.1f}" if queued is not None else ""
        extra = None
        if LineFields.wanted:  # the same, as values of their own for the JSON lines, None where the line has `-`
            own = {"method": self.method, "path": self.path, "status": self.status, **self.fields}
            own["proxy_ms"] = round(added * 1000, 1) if added is not None else None
            if queued is not None:
                own["queue_ms"] = round(queued * 1000, 1)
            own["upstream_ms"] = round(self.upstream_ms, 1) if self.upstream_ms is not None else None
            own["total_ms"] = round(total_ms, 1)
            extra = {REQUEST_FIELDS: own}
        log.info(
            "%s %s %d%s proxy_ms=%s%s upstream_ms=%s total_ms=%.1f",
            self.method,
            clean(self.path),
            self.status,
            fields,
            proxy,
            queue,
            upstream,
            total_ms,
            extra=extra,
        )
        if self.on_finish is not None:
            try:
                self.on_finish(self)
            except Exception:  # the metrics must not fail a response that is out already
                log.exception("[metrics] could not observe %s %s", self.method, clean(self.path))
