"""create_app(): routes, the lifespan that owns the upstream client, and the error boundary."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from proxy.chat import ChatCompletions
from proxy.compaction import MemoryRecordStore
from proxy.config import Settings
from proxy.errors import ProxyError, render
from proxy.forward import Relay, Timing, UpstreamClient, relay_response
from proxy.models import ContextRegistry
from proxy.tokens import FALLBACK_ENCODING, TokenCounter
from proxy.usage import Calibration

log = logging.getLogger("inflight")

METHODS = ["GET", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "HEAD"]


class Endpoint:
    """Adapts a `(request, timing) -> ASGI app` handler: one log line per request, errors rendered."""

    def __init__(self, handler: object) -> None:
        self.handler = handler

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        request = Request(scope, receive)
        timing = Timing(scope["method"], scope["path"])
        try:
            response: Relay = await self.handler(request, timing)  # type: ignore[operator]
        except ProxyError as exc:
            timing.status = exc.status_code
            timing.notes.append(f"error={exc.code or exc.error_type}")
            await render(exc)(scope, receive, send)
            timing.emit()
            return
        await response(scope, receive, send)  # the relay emits the log line when the body is done


class PassThrough:
    def __init__(self, upstream: UpstreamClient) -> None:
        self.upstream = upstream

    async def handle(self, request: Request, timing: Timing) -> Relay:
        headers = self.upstream.outgoing_headers(request.scope["headers"])
        content = None
        if "transfer-encoding" in request.headers and "content-length" not in request.headers:
            # Transfer-Encoding is hop-by-hop: our own hop frames the streamed body in chunks again.
            headers.append((b"transfer-encoding", b"chunked"))
            content = request.stream()
        elif request.headers.get("content-length", "0") != "0":
            content = request.stream()
        url = self.upstream.url_for(request.url.path, request.scope["query_string"])
        response = await self.upstream.open(request.method, url, headers=headers, content=content)
        timing.upstream_answered()
        return relay_response(response, timing)


async def healthz(request: Request) -> Response:
    return JSONResponse({"status": "ok"})


async def stats(request: Request) -> Response:
    """What this process has learned: calibration ratios and context windows."""
    registry: ContextRegistry = request.app.state.registry
    calibration: Calibration = request.app.state.calibration
    return JSONResponse({"calibration": calibration.report(), "learned_windows": registry.learned()})


async def internal_error(request: Request, exc: Exception) -> Response:
    log.exception("internal error on %s %s", request.method, request.url.path, exc_info=exc)
    return render(ProxyError(f"inflight internal error: {type(exc).__name__}"))


def create_app(settings: Settings) -> Starlette:
    """Build a proxy app; everything it holds lives on this app, nothing in module globals."""
    upstream = UpstreamClient(settings.upstream)
    counter = TokenCounter()
    registry = ContextRegistry(settings)
    calibration = Calibration()
    cache = settings.compaction.cache
    records = MemoryRecordStore(max_entries=cache.max_entries, ttl_s=cache.ttl_s)
    summarizer_client = httpx.AsyncClient(trust_env=False)
    chat = ChatCompletions(
        settings,
        upstream,
        counter=counter,
        registry=registry,
        calibration=calibration,
        records=records,
        summarizer_client=summarizer_client,
    )
    passthrough = PassThrough(upstream)

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        # Building an encoding takes about a second: do it before the first request, off the loop.
        await asyncio.to_thread(counter.encoding, FALLBACK_ENCODING)
        try:
            yield
        finally:
            await upstream.aclose()
            await summarizer_client.aclose()

    routes = [
        Route("/healthz", healthz, methods=["GET"]),
        Route("/inflight/stats", stats, methods=["GET"]),
        Route("/v1/chat/completions", Endpoint(chat.handle), methods=["POST"]),
        Route("/v1/{path:path}", Endpoint(passthrough.handle), methods=METHODS),
    ]
    app = Starlette(routes=routes, lifespan=lifespan, exception_handlers={Exception: internal_error})
    app.state.settings = settings
    app.state.upstream = upstream
    app.state.registry = registry
    app.state.calibration = calibration
    return app
