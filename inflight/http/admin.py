"""The proxy's own routes: a health check for load balancers, what this process has learned, its metrics."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from inflight.metrics.prometheus import Metrics
from inflight.pipeline.engine import Pipeline


async def healthz(request: Request) -> Response:
    return JSONResponse({"status": "ok"})


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
