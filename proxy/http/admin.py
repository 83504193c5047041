"""The proxy's own routes: a health check for load balancers, and what this process has learned."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from proxy.policy.calibration import Calibration
from proxy.policy.windows import ContextRegistry


async def healthz(request: Request) -> Response:
    return JSONResponse({"status": "ok"})


class Stats:
    """Calibration ratios and learned context windows, for a person wondering why a request was compacted."""

    def __init__(self, registry: ContextRegistry, calibration: Calibration) -> None:
        self.registry = registry
        self.calibration = calibration

    async def __call__(self, request: Request) -> Response:
        return JSONResponse({"calibration": self.calibration.report(), "learned_windows": self.registry.learned()})
