"""Hooks through which the compaction code reports events, without knowing who listens (`inflight.metrics.prometheus`).

The core and the stores call these hooks. The server passes its `Metrics`; a CLI command passes
`NO_OBSERVER`. Each hook is called on the event loop, once per event, and must return at once.
"""

from __future__ import annotations

from typing import Literal, Protocol

SummarizerOutcome = Literal["ok", "rejected", "error"]


class Observer(Protocol):
    def record_lookup(self, *, hit: bool) -> None:
        """A conversation's records were loaded; `hit` is True when one of them matched its messages."""

    def jobs_changed(self, *, queued: int, running: int) -> None:
        """This process now has `queued` background summaries waiting and `running` running."""

    def store_error(self, *, store: str) -> None:
        """A call to the shared record store (`sqlite`, `redis`) failed, and memory was used instead."""

    def summarizer_called(self, *, outcome: SummarizerOutcome, seconds: float) -> None:
        """A summarizer call finished: it answered (`ok`), its reply was rejected (`rejected`), or it failed."""

    def summarizer_spent(self, tenant: str, tokens: int) -> None:
        """A summarizer call of `tokens` input tokens is made for a conversation of the client `tenant`."""


class NoObserver:
    def record_lookup(self, *, hit: bool) -> None:
        pass

    def jobs_changed(self, *, queued: int, running: int) -> None:
        pass

    def store_error(self, *, store: str) -> None:
        pass

    def summarizer_called(self, *, outcome: SummarizerOutcome, seconds: float) -> None:
        pass

    def summarizer_spent(self, tenant: str, tokens: int) -> None:
        pass


NO_OBSERVER: Observer = NoObserver()
