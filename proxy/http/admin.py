"""The proxy's own routes: a health check for load balancers, and what this process has learned."""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from proxy.pipeline import ChatPipeline


async def healthz(request: Request) -> Response:
    return JSONResponse({"status": "ok"})


def stats_route(pipeline: ChatPipeline) -> Callable[[Request], Awaitable[Response]]:
    """Calibration ratios, learned context windows and the background summaries' queue, for a person
    wondering why a request was compacted (or a benchmark watching the summarizer)."""

    async def stats(request: Request) -> Response:
        jobs = pipeline.compactions.jobs
        report = {"calibration": pipeline.calibration.report(), "learned_windows": pipeline.registry.learned()}
        report["worker_pid"] = os.getpid()  # which process answered (`inflight serve --workers N`)
        return JSONResponse(report | {"summary_jobs": jobs.stats() if jobs is not None else None})

    return stats
