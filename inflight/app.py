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

from inflight.archive import open_archive
from inflight.config import Settings
from inflight.formats import CHAT_COMPLETIONS, MESSAGES, Responses, WireFormat
from inflight.formats.compaction_items import ItemKey
from inflight.http.access import AccessGuard, OriginGuard
from inflight.http.admin import healthz, metrics_route, stats_route
from inflight.http.archive_routes import ArchiveRoutes
from inflight.http.compact_handler import CompactHandler
from inflight.http.conversation_handler import ConversationHandler
from inflight.http.endpoint import Endpoint
from inflight.http.passthrough import PassThrough
from inflight.http.routes import JsonRoute, not_found
from inflight.http.viewer import Viewer
from inflight.metrics.prometheus import Metrics
from inflight.pipeline.archiving import Archiver
from inflight.pipeline.engine import build_pipeline
from inflight.pipeline.summarizer import Summarizers
from inflight.tokens import FALLBACK_ENCODING, load_encoding
from inflight.upstream.client import UpstreamClient

METHODS = ["GET", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "HEAD"]


def create_app(settings: Settings) -> ASGIApp:
    """Build a proxy app; everything it holds lives in objects it owns, nothing in module globals."""
    header_bound = settings.limits.max_upstream_header_bytes
    upstream = UpstreamClient(settings.upstream, max_header_bytes=header_bound)
    # A format's own upstream (`upstreams.<format>`); Anthropic's takes the proxy's key as `x-api-key`.
    by_format = {
        name: UpstreamClient(settings.upstream_for(name), key_header=key_header, max_header_bytes=header_bound)
        for name, key_header in (("chat_completions", b""), ("responses", b""), ("messages", b"x-api-key"))
        if name in settings.upstreams or key_header
    }
    clients = [upstream, *by_format.values()]

    def upstream_of(wire: WireFormat) -> UpstreamClient:
        return by_format.get(wire.name, upstream)

    metrics = Metrics()
    summarizers = Summarizers(settings, upstream, by_format=by_format, observer=metrics)
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
            max_key_chars=settings.limits.max_key_chars,
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
                for client in clients:
                    await client.aclose()

    loopback_only = not settings.access.admin and not settings.access.allow_anonymous

    def conversations(route: str, wire: WireFormat) -> JsonRoute:
        """A wire format's conversation endpoint: counted, compacted when needed, retried once."""
        handler = ConversationHandler(wire, pipeline, upstream_of(wire), limits=settings.limits, archive=archive)
        endpoint = Endpoint(handler, route=route, on_finish=metrics.exchange_done, wire=wire)
        return JsonRoute(route, endpoint, methods=["POST"])

    def forwarded(route: str, wire: WireFormat = CHAT_COMPLETIONS) -> JsonRoute:
        """Every other request under `route`, forwarded as it came to `wire`'s upstream."""
        anthropic = upstream_of(MESSAGES) if "messages" in settings.upstreams else None
        passthrough = PassThrough(upstream_of(wire), limits=settings.limits, anthropic=anthropic)
        label = route.replace("{path:path}", "{path}")  # the metrics' route label
        endpoint = Endpoint(passthrough, route=label, on_finish=metrics.exchange_done, wire=wire)
        return JsonRoute(route, endpoint, methods=METHODS)

    def compact_route() -> list[JsonRoute]:
        """`POST /v1/responses/compact`, answered by us when the upstream has none (`responses.compact_fallback`)."""
        if not settings.responses.compact_fallback:
            return []
        handler = CompactHandler(responses, item_key, pipeline, upstream_of(responses), limits=settings.limits)
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
        conversations("/v1/messages", MESSAGES),
        forwarded("/v1/messages/{path:path}", MESSAGES),  # count_tokens, batches: to Anthropic's upstream
        forwarded("/v1/{path:path}"),
    ]
    # A bare router, not a Starlette app: the endpoints render their own errors, so the app's two
    # error-handling middlewares would only add a wrapper to every `send` of every response.
    router = Router(routes=routes, lifespan=lifespan, default=not_found)
    guarded = settings.access.keys or settings.access.admin
    app: ASGIApp = AccessGuard(router, settings.access, on_refused=metrics.refused) if guarded else router
    # A key held for anyone who can reach us: only our own address, never another origin's page.
    return OriginGuard(app, settings) if settings.holds_upstream_key and not settings.access.keys else app


def item_secret(settings: Settings) -> bytes:
    """The secret behind our compaction items: `responses.item_key`, else one derived from the upstream's
    key (the same in every worker and after a restart), else a random one for this process."""
    if settings.responses.item_key:
        return settings.responses.item_key.encode()
    if settings.upstream_for("responses").api_key:
        key = settings.upstream_for("responses").api_key
        return hashlib.sha256(b"inflight compaction items\0" + key.encode()).digest()
    if settings.responses.compact_fallback:
        logging.getLogger("inflight").info(
            "compaction items are sealed with a key of this process only (set responses.item_key "
            "to read them after a restart or in another worker)"
        )
    return os.urandom(32)
