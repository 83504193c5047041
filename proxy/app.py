"""create_app(settings): the routes, the lifespan that owns the upstream clients, and the wiring."""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from starlette.routing import Router
from starlette.types import ASGIApp

from proxy.archive import open_archive
from proxy.config import Settings
from proxy.formats import CHAT_COMPLETIONS, Responses, WireFormat
from proxy.formats.compaction_items import ItemKey
from proxy.http.access import AccessGuard
from proxy.http.admin import healthz, metrics_route, stats_route
from proxy.http.archive_routes import ArchiveRoutes
from proxy.http.compact_handler import CompactHandler
from proxy.http.conversation_handler import ConversationHandler
from proxy.http.endpoint import Endpoint
from proxy.http.passthrough import PassThrough
from proxy.http.routes import JsonRoute, not_found
from proxy.http.viewer import Viewer
from proxy.metrics.prometheus import Metrics
from proxy.pipeline.archiving import Archiver
from proxy.pipeline.engine import build_pipeline
from proxy.pipeline.summarizer import Summarizers
from proxy.tokens import FALLBACK_ENCODING, load_encoding
from proxy.upstream.client import UpstreamClient

METHODS = ["GET", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "HEAD"]


def create_app(settings: Settings) -> ASGIApp:
    """Build a proxy app; everything it holds lives in objects it owns, nothing in module globals."""
    upstream = UpstreamClient(settings.upstream)
    metrics = Metrics()
    summarizers = Summarizers(settings, upstream, observer=metrics)
    pipeline = build_pipeline(settings, summarizers=summarizers, background=True, observer=metrics)
    item_key = ItemKey(item_secret(settings))
    responses = Responses(item_key)  # opens the compaction items this deployment hands out
    archive = None
    if settings.archive.enabled:
        store = open_archive(settings.state, settings.archive)
        archive = Archiver(
            store,
            settings_for=lambda model: pipeline.model_settings(model).compaction,
            on_error=lambda: metrics.store_error(store="archive"),
        )

    @asynccontextmanager
    async def lifespan(app: object) -> AsyncIterator[None]:
        # Building an encoding takes about a second: do it before the first request, off the loop.
        await asyncio.to_thread(load_encoding, FALLBACK_ENCODING)
        try:
            yield
        finally:
            try:
                if archive is not None:
                    await archive.close()  # first: it writes what waits
                await pipeline.aclose()
            finally:
                await summarizers.aclose()
                await upstream.aclose()

    loopback_only = not settings.access.admin and not settings.access.allow_anonymous

    def conversations(route: str, wire: WireFormat) -> JsonRoute:
        """A wire format's conversation endpoint: counted, compacted when needed, retried once."""
        handler = ConversationHandler(wire, pipeline, upstream, limits=settings.limits, archive=archive)
        endpoint = Endpoint(handler, route=route, on_finish=metrics.exchange_done, wire=wire)
        return JsonRoute(route, endpoint, methods=["POST"])

    other = Endpoint(PassThrough(upstream, limits=settings.limits), route="/v1/{path}", on_finish=metrics.exchange_done)

    def compact_route() -> list[JsonRoute]:
        """`POST /v1/responses/compact`, answered by us when the upstream has none (`responses.compact_fallback`)."""
        if not settings.responses.compact_fallback:
            return []
        handler = CompactHandler(responses, item_key, pipeline, upstream, limits=settings.limits)
        endpoint = Endpoint(handler, route="/v1/responses/compact", on_finish=metrics.exchange_done, wire=responses)
        return [JsonRoute("/v1/responses/compact", endpoint, methods=["POST"])]

    routes = [
        JsonRoute("/healthz", healthz, methods=["GET"]),
        JsonRoute("/inflight/stats", stats_route(pipeline), methods=["GET"]),
        JsonRoute("/metrics", metrics_route(metrics), methods=["GET"]),
        *ArchiveRoutes(archive.store if archive is not None else None, loopback_only=loopback_only).routes(),
        *Viewer().routes(),
        conversations("/v1/chat/completions", CHAT_COMPLETIONS),
        conversations("/v1/responses", responses),
        *compact_route(),
        JsonRoute("/v1/{path:path}", other, methods=METHODS),
    ]
    # A bare router, not a Starlette app: the endpoints render their own errors, so the app's two
    # error-handling middlewares would only add a wrapper to every `send` of every response.
    router = Router(routes=routes, lifespan=lifespan, default=not_found)
    guarded = settings.access.keys or settings.access.admin
    return AccessGuard(router, settings.access, on_refused=metrics.refused) if guarded else router


def item_secret(settings: Settings) -> bytes:
    """The secret behind our compaction items: `responses.item_key`, else one derived from the upstream's
    key (the same in every worker and after a restart), else a random one for this process."""
    if settings.responses.item_key:
        return settings.responses.item_key.encode()
    if settings.upstream.api_key:
        return hashlib.sha256(b"inflight compaction items\0" + settings.upstream.api_key.encode()).digest()
    if settings.responses.compact_fallback:
        logging.getLogger("inflight").info(
            "inflight: compaction items are sealed with a key of this process only (set responses.item_key "
            "to read them after a restart or in another worker)"
        )
    return os.urandom(32)
