"""What the compaction machinery tells whoever watches it (`inflight.metrics.prometheus`), without knowing who that is.

The pure core and the stores call these hooks; the server passes its `Metrics`, a command nothing
(`NO_OBSERVER`). Each hook is called on the event loop, once per event, and must return at once.
"""

from __future__ import annotations

from typing import Literal, Protocol

SummarizerOutcome = Literal["ok", "rejected", "error"]


class Observer(Protocol):
    def record_lookup(self, *, hit: bool) -> None:
        """A conversation's records were loaded: `hit` when one of them matched its messages."""

    def jobs_changed(self, *, queued: int, running: int) -> None:
        """The background summaries of this process now number `queued` waiting and `running`."""

    def store_error(self, *, store: str) -> None:
        """The shared record store (`sqlite`, `redis`) failed a call; memory stood in."""

    def summarizer_called(self, *, outcome: SummarizerOutcome, seconds: float) -> None:
        """One summarizer model answered (`ok`), answered a reply that was refused (`rejected`), or failed."""


class NoObserver:
    def record_lookup(self, *, hit: bool) -> None:
        pass

    def jobs_changed(self, *, queued: int, running: int) -> None:
        pass

    def store_error(self, *, store: str) -> None:
        pass

    def summarizer_called(self, *, outcome: SummarizerOutcome, seconds: float) -> None:
        pass


NO_OBSERVER: Observer = NoObserver()
