"""The proxy's own routes: a health check for load balancers, what this process has learned, its metrics.

`/healthz` says the process serves (liveness); `/readyz` that its default upstream answers too
(`Readiness`), for a load balancer to send requests only where they can go on.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import socket
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from inflight.config.settings import redacted_url
from inflight.errors import ProxyError, UpstreamTimeout
from inflight.metrics.prometheus import Metrics
from inflight.pipeline.engine import Pipeline
from inflight.upstream.client import UpstreamClient
from inflight.upstream.exceptions import PoolTimeout
from inflight.upstream.pool import Timeouts

log = logging.getLogger("inflight")

READY_TIMEOUT_S = 2.0  # how long the upstream has to answer a readiness probe
READY_CACHE_S = 5.0  # how long an answer stands: a storm of probes costs the upstream one request per this
READY_PATH = b"/v1/models"  # what a probe asks (any answer counts, a 401 or a 404 too: the upstream is there)
NO_STORE = {"cache-control": "no-store"}
Cause = TypeVar("Cause", bound=BaseException)


async def healthz(request: Request) -> Response:
    return JSONResponse({"status": "ok"})


@dataclass(frozen=True)
class Probe:
    """What the last readiness probe found: `answered`, the upstream's status (None: no answer, `reason` says why)."""

    answered: int | None
    reason: str = ""
    busy: bool = False  # every connection to the upstream was in use: it is serving, so ready

    @property
    def ready(self) -> bool:
        return self.answered is not None or self.busy


class Readiness:
    """Whether the default upstream answers: a `GET /models` through the app's own client, with
    `timeout_s` for all of it. Any HTTP answer counts. The result stands for `cache_s`, and probes
    that come while one is out wait for it, so the upstream sees at most one request per `cache_s`.
    A change (ready to not, and back) is logged."""

    def __init__(
        self,
        upstream: UpstreamClient,
        *,
        timeout_s: float = READY_TIMEOUT_S,
        cache_s: float = READY_CACHE_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.upstream = upstream
        self.url = redacted_url(upstream.base_url)
        self.timeout_s = timeout_s
        self.cache_s = cache_s
        self.clock = clock
        self.lock = asyncio.Lock()
        self.last: Probe | None = None
        self.checked_at = 0.0

    async def probe(self) -> Probe:
        if (last := self.fresh()) is not None:
            return last
        async with self.lock:
            if (last := self.fresh()) is not None:  # another probe asked while this one waited
                return last
            found = await self.ask()
            self.note(found)
            self.last, self.checked_at = found, self.clock()
            return found

    def fresh(self) -> Probe | None:
        if self.last is not None and self.clock() - self.checked_at < self.cache_s:
            return self.last
        return None

    async def ask(self) -> Probe:
        upstream, limit = self.upstream, self.timeout_s
        timeouts = Timeouts(connect=limit, read=limit, write=limit, pool=limit)
        try:
            async with asyncio.timeout(limit):
                response = await upstream.open(
                    "GET",
                    upstream.target_for(READY_PATH),
                    headers=upstream.headers_for([]),
                    content=None,
                    timeouts=timeouts,
                )
                await response.aclose()  # its body is not wanted: the connection goes unless it was read whole
        except TimeoutError:
            return Probe(None, f"no answer within {limit:g} s")
        except UpstreamTimeout as exc:
            if caused_by(exc, PoolTimeout):
                return Probe(None, busy=True)
            return Probe(None, f"no answer within {limit:g} s")
        except ProxyError as exc:
            return Probe(None, why(exc))
        except Exception as exc:  # a bug of ours: not ready, and the traceback logged
            log.exception("[readyz] the probe of upstream %s failed", self.url)
            return Probe(None, f"the probe failed ({type(exc).__name__})")
        return Probe(response.status)

    def note(self, found: Probe) -> None:
        """Log a change: not ready (or not ready for another reason), and ready again."""
        last = self.last
        if not found.ready and (last is None or last.ready or last.reason != found.reason):
            log.warning("[readyz] not ready: upstream %s: %s", self.url, found.reason)
        elif found.ready and last is not None and not last.ready:
            log.info("[readyz] ready again: upstream %s answered", self.url)

    async def answer(self, request: Request) -> Response:
        """`GET /readyz`: 200 when the upstream answered, else 503 naming it and why."""
        found = await self.probe()
        if found.busy:
            return JSONResponse({"status": "ready", "upstream": self.url, "busy": True}, headers=NO_STORE)
        if found.answered is not None:
            body = {"status": "ready", "upstream": self.url, "upstream_status": found.answered}
            return JSONResponse(body, headers=NO_STORE)
        body = {"status": "not_ready", "upstream": self.url, "reason": found.reason}
        return JSONResponse(body, status_code=503, headers=NO_STORE)


def caused_by(exc: BaseException, kind: type[Cause]) -> Cause | None:
    """The first exception of `kind` in `exc`'s chain of causes (itself included), or None."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, kind):
            return seen
        seen = seen.__cause__ or seen.__context__
    return None


def why(exc: ProxyError) -> str:
    """An upstream failure in a few words ("connection refused"), else its message."""
    if (oserror := caused_by(exc, OSError)) is not None and getattr(oserror, "errno", None) == errno.ECONNREFUSED:
        return "connection refused"
    if (unresolved := caused_by(exc, socket.gaierror)) is not None:
        return f"name not resolved ({unresolved.strerror})"
    return exc.message


def stats_route(pipeline: Pipeline) -> Callable[[Request], Awaitable[Response]]:
    """Calibration ratios, learned context windows and the background summaries' queue, for a person
    wondering why a request was compacted (or a benchmark watching the summarizer)."""

    async def stats(request: Request) -> Response:
        # worker_pid: which process answered (`inflight serve --workers N`)
        return JSONResponse(pipeline.stats() | {"worker_pid": os.getpid()})

    return stats


def usage_route(metrics: Metrics) -> Callable[[Request], Awaitable[Response]]:
    """What each client used and saved (`inflight.metrics.usage`): the top `?limit=` clients (100), the rest as
    `other`, and the totals; this worker's own figures."""

    async def usage(request: Request) -> Response:
        try:
            limit = max(0, min(int(request.query_params.get("limit", "100")), 10_000))
        except ValueError:
            limit = 100
        metrics.flush()  # the requests finished since the last batch
        return JSONResponse(metrics.usage.report(limit) | {"worker_pid": os.getpid()})

    return usage


def metrics_route(metrics: Metrics) -> Callable[[Request], Awaitable[Response]]:
    """`GET /metrics` for Prometheus: every worker's figures (`inflight.metrics.prometheus`)."""

    async def scrape(request: Request) -> Response:
        metrics.flush()  # this worker's waiting batch, added on the loop it belongs to
        # The render runs off the loop: with several workers it reads each one's file.
        body, content_type = await asyncio.to_thread(metrics.render, request.headers.get("accept", ""))
        return Response(body, headers={"content-type": content_type})

    return scrape
