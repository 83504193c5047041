"""One request as the proxy handles it: what its log line, its `x-inflight-*` headers and its retry need.

Each step of a request adds to its `Exchange`; the log line is built and written here, once, when
the response is done (or failed). Fields are `key=value` pairs in the order they were added.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

log = logging.getLogger("inflight")


def clean(value: object) -> str:
    """A log field that cannot forge a line or a field: control characters and spaces escaped."""
    text = str(value)
    if text.isprintable() and " " not in text:
        return text
    return text.encode("unicode_escape").decode("ascii").replace(" ", "\\x20")


@dataclass
class Exchange:
    method: str
    path: str
    started: float = field(default_factory=time.perf_counter)
    status: int = 0
    upstream_ms: float | None = None
    fields: dict[str, str] = field(default_factory=dict)
    headers: dict[str, str] = field(default_factory=dict)  # x-inflight-* headers for the client
    finished: bool = False

    def note(self, key: str, value: object) -> None:
        self.fields[key] = clean(value)

    def note_all(self, fields: dict[str, object]) -> None:
        for key, value in fields.items():
            self.fields[key] = clean(value)

    def upstream_answered(self) -> None:
        self.upstream_ms = (time.perf_counter() - self.started) * 1000

    def finish(self) -> None:
        """Write the request's log line (only the first call does)."""
        if self.finished:
            return
        self.finished = True
        total_ms = (time.perf_counter() - self.started) * 1000
        upstream = f"{self.upstream_ms:.1f}" if self.upstream_ms is not None else "-"
        fields = "".join(f" {key}={value}" for key, value in self.fields.items())
        log.info(
            "%s %s %d%s upstream_ms=%s total_ms=%.1f",
            self.method,
            clean(self.path),
            self.status,
            fields,
            upstream,
            total_ms,
        )
