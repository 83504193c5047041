"""The proxy's own routes: a health check for load balancers, and what this process has learned."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from proxy.policy.calibration import Calibration
from proxy.policy.windows import ContextRegistry


async def healthz(request: Request) -> Response:
    return JSONResponse({"status": "ok"})


def stats_route(registry: ContextRegistry, calibration: Calibration) -> Callable[[Request], Awaitable[Response]]:
    """Calibration ratios and learned context windows, for a person wondering why a request was compacted."""

    async def stats(request: Request) -> Response:
        return JSONResponse({"calibration": calibration.report(), "learned_windows": registry.learned()})

    return stats
