"""create_app(settings): the routes, the lifespan that owns the upstream clients, and the wiring.

The routes come from the registered wire formats (`inflight.formats.registered`): each format's
conversation endpoints, and the rest of its API forwarded to its upstream (which receives the proxy's
key in the format's own header). The guards' error shapes and the metrics' route labels come from the
formats too.
"""

from __future__ import annotations

import asyncio
import functools
import gc
import hashlib
import os
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

from starlette.requests import Request
from starlette.routing import BaseRoute
from starlette.types import ASGIApp

from inflight.archive import open_archive
from inflight.config import ConfigError, Settings
from inflight.errors import UpstreamNotConfigured
from inflight.formats import Responses, Route, WireFormat, key_headers, registered
from inflight.formats.compaction_items import ItemKey
from inflight.http.access import AccessGuard, OriginGuard, QueryKey
from inflight.http.admin import Readiness, healthz, metrics_route, stats_route, usage_route
from inflight.http.archive_routes import ArchiveRoutes
from inflight.http.conversation_handler import ConversationHandler
from inflight.http.endpoint import Endpoint, Handler
from inflight.http.exchange import Exchange
from inflight.http.passthrough import PassThrough
from inflight.http.routes import ExactRouter, JsonRoute, RouteTable, WrongAddresses, route_label
from inflight.http.viewer import Viewer
from inflight.metrics.prometheus import Metrics
from inflight.metrics.usage import client_of
from inflight.pipeline.archiving import Archiver
from inflight.pipeline.compact_turn import CompactTurn
from inflight.pipeline.engine import build_pipeline
from inflight.pipeline.summarizer import Summarizers
from inflight.tokens import FALLBACK_ENCODING, load_encoding
from inflight.upstream.client import UpstreamClient

if TYPE_CHECKING:
    from inflight.metrics.tracing import Tracing

GC_YOUNG_THRESHOLD = 10_000  # objects allocated between two collections of the youngest generation
METHODS = ["GET", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "HEAD"]


def create_app(
    settings: Settings,
    *,
    formats: Sequence[WireFormat] | None = None,
    on_started: Callable[[], None] = lambda: None,
) -> ASGIApp:
    """Build a proxy app whose state lives in objects it owns, none in module globals.

    `formats`: the wire formats it serves (default: `registered`). `on_started`: called once the app is ready to
    serve (`inflight serve` tunes the garbage collector there: `tune_collector`)."""
    secret, note = item_secret(settings)
    item_key = ItemKey(secret, first_use_note=note)
    served = tuple(formats) if formats is not None else registered(item_key)
    upstream, by_format = upstream_clients(settings, served)
    clients = [upstream, *by_format.values()]

    def upstream_of(wire: WireFormat) -> UpstreamClient:
        return by_format.get(wire.spec.name, upstream)

    metrics = Metrics(top_clients=settings.metrics.top_clients)
    tracing = open_tracing(settings)
    observe = traced(metrics.exchange_done, tracing)
    summarizers = Summarizers(settings, upstream, by_format=by_format, observer=metrics, tracing=tracing)
    pipeline = build_pipeline(settings, summarizers=summarizers, background=True, observer=metrics)
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
        # Building an encoding takes about a second: do it before the first request, off the event loop.
        await asyncio.to_thread(load_encoding, FALLBACK_ENCODING)
        on_started()
        try:
            yield
        finally:
            metrics.flush()  # the requests that finished since the last batch
            try:
                if archive is not None:
                    await archive.close()  # first, because it writes its waiting entries
                await pipeline.aclose()
            finally:
                await summarizers.aclose()
                for client in clients:
                    await client.aclose()
                await shut(tracing)

    loopback_only = not settings.access.admin and not settings.access.allow_anonymous

    def conversations(route: Route, wire: WireFormat) -> JsonRoute:
        """A wire format's conversation endpoint: requests are counted, compacted when needed, and retried once."""
        handler: Handler = ConversationHandler(
            wire, pipeline, upstream_of(wire), limits=settings.limits, archive=archive, route=route, tracing=tracing
        )
        handler = served_by(settings, wire, handler)
        endpoint = Endpoint(handler, route=route.path, on_finish=observe, wire=wire)
        return JsonRoute(route.path, endpoint, methods=["POST"])

    # A request only one format's clients send (`anthropic-version`) goes to that format's own upstream.
    by_client_header = [
        (header, upstream_of(wire))
        for wire in served
        if (header := wire.spec.client_header) is not None and wire.spec.name in settings.format_upstreams
    ]

    def forwarded(pattern: str, wire: WireFormat) -> JsonRoute:
        """Every other request of `wire`'s API under `pattern`, forwarded unchanged to its upstream."""
        others = [(header, client) for header, client in by_client_header if client is not upstream_of(wire)]
        passthrough: Handler = PassThrough(upstream_of(wire), limits=settings.limits, by_client_header=others)
        passthrough = served_by(settings, wire, passthrough)
        endpoint = Endpoint(passthrough, route=route_label(pattern), on_finish=metrics.exchange_done, wire=wire)
        return JsonRoute(pattern, endpoint, methods=METHODS)

    def compact_route() -> list[JsonRoute]:
        """`POST /v1/responses/compact`, answered by us if the upstream lacks it (`responses.compact_fallback`)."""
        responses = next((wire for wire in served if isinstance(wire, Responses)), None)
        if responses is None or not settings.responses.compact_fallback:
            return []
        compact_turn = functools.partial(CompactTurn, item_key=item_key)
        handler = ConversationHandler(
            responses,
            pipeline,
            upstream_of(responses),
            limits=settings.limits,
            make_turn=compact_turn,
            tracing=tracing,
        )
        endpoint = Endpoint(handler, route="/v1/responses/compact", on_finish=observe, wire=responses)
        return [JsonRoute("/v1/responses/compact", endpoint, methods=["POST"])]

    wrong_addresses = WrongAddresses(served)  # what a wrong base URL is told, and the warnings already given
    routes: list[BaseRoute] = [
        JsonRoute("/healthz", healthz, methods=["GET"]),
        JsonRoute("/readyz", Readiness(upstream).answer, methods=["GET"]),  # the default upstream answers too
        JsonRoute("/inflight/stats", stats_route(pipeline), methods=["GET"]),
        JsonRoute("/inflight/usage", usage_route(metrics), methods=["GET"]),
        JsonRoute("/metrics", metrics_route(metrics), methods=["GET"]),
        *ArchiveRoutes(archive.store if archive is not None else None, loopback_only=loopback_only).routes(),
        *Viewer().routes(),
        *(conversations(route, wire) for wire in served for route in wire.spec.routes),
        *compact_route(),
        *wrong_addresses.routes(METHODS),  # a base URL with /v1 where none belongs (`/v1/v1/...`, `/v1/v1beta/...`)
        *(forwarded(pattern, wire) for pattern, wire in forwarded_patterns(served)),
    ]
    # A plain Router, not a Starlette app: the endpoints render their own errors, so the app's two
    # error-handling middlewares would only wrap every `send` of every response for nothing.
    router = ExactRouter(routes, lifespan=lifespan, default=wrong_addresses.not_found)
    query_keys = frozenset(name for wire in served if (name := wire.spec.query_key) is not None)
    return guarded(
        router,
        settings,
        routes=RouteTable(routes),
        client_keys=upstream.client_keys,
        query_keys=query_keys,
        metrics=metrics,
    )


def open_tracing(settings: Settings) -> Tracing | None:
    """The OpenTelemetry exporter when telemetry is configured (`telemetry.otlp`, `OTEL_EXPORTER_OTLP_*`), else
    None: nothing of OpenTelemetry is then imported."""
    if not settings.telemetry.exports(os.environ):
        return None
    try:
        from inflight.metrics.tracing import Tracing
    except ImportError as exc:
        raise ConfigError(
            f"telemetry is configured but OpenTelemetry is not installed ({exc.name}): "
            "pip install 'inflight[telemetry]'"
        ) from exc
    return Tracing(settings.telemetry)


async def shut(tracing: Tracing | None) -> None:
    """Export the spans not yet exported, before the process ends."""
    if tracing is not None:
        await asyncio.to_thread(tracing.shutdown)


def traced(observe: Callable[[Exchange], None], tracing: Tracing | None) -> Callable[[Exchange], None]:
    """`observe` (the metrics), then, with telemetry on, the request's spans ended with its report."""
    if tracing is None:
        return observe

    def finish(exchange: Exchange) -> None:
        observe(exchange)
        if exchange.trace is not None:
            client = client_of(exchange.client) if exchange.client is not None else None
            exchange.trace.finish(exchange.report, status=exchange.status, client=client)

    return finish


def guarded(
    router: ASGIApp,
    settings: Settings,
    *,
    routes: RouteTable,
    client_keys: frozenset[bytes],
    query_keys: frozenset[bytes] = frozenset(),
    metrics: Metrics,
) -> ASGIApp:
    """The router wrapped in the guards the access settings call for; they answer before any route does."""
    app = router
    if settings.access.keys or settings.access.admin:
        app = AccessGuard(app, settings.access, client_keys=client_keys, routes=routes, on_refused=metrics.refused)
    # We hold a key for anyone who can reach us, so only pages from our own address may call, never another
    # origin's.
    if settings.holds_key and not settings.access.keys:
        app = OriginGuard(app, settings, routes=routes)
    # First of all, a key in the query (Gemini's `?key=`) becomes its header, for the guards and everything after.
    return QueryKey(app, routes=routes, names=query_keys) if query_keys else app


def tune_collector() -> None:
    """Tune the garbage collector for serving: what exists once started lives as long as the process, and each
    request makes a few hundred short-lived objects.

    The survivors are frozen, so the collector's full passes no longer walk them again and again under load;
    the youngest generation is collected every `GC_YOUNG_THRESHOLD` allocations instead of every 700."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(GC_YOUNG_THRESHOLD, *gc.get_threshold()[1:])


def upstream_clients(
    settings: Settings, served: Sequence[WireFormat]
) -> tuple[UpstreamClient, dict[str, UpstreamClient]]:
    """The proxy's upstream client, plus one per format that has its own upstream (`upstreams.<format>`) or
    takes the proxy's key in a header other than `Authorization` (Anthropic's `x-api-key`).

    If the proxy holds a key, each client replaces a client's key in any format's credential header with it."""
    client_keys = key_headers(served)
    header_bound = settings.limits.max_upstream_header_bytes
    upstream = UpstreamClient(settings.upstream, client_keys=client_keys, max_header_bytes=header_bound)
    by_format = {
        wire.spec.name: UpstreamClient(
            settings.upstream_for(wire.spec.name),
            key_header=wire.spec.credentials[0],
            client_keys=client_keys,
            max_header_bytes=header_bound,
        )
        for wire in served
        if wire.spec.name in settings.format_upstreams or wire.spec.credentials[0] != b"authorization"
    }
    return upstream, by_format


def served_by(settings: Settings, wire: WireFormat, handler: Handler) -> Handler:
    """`handler`, or, if the config gives `wire` no upstream, one that answers every request with a 502 saying
    what to set and forwards nothing."""
    unserved = settings.unserved(wire.spec.name)
    if unserved is None:
        return handler

    async def refuse(request: Request, exchange: Exchange) -> ASGIApp:
        raise UpstreamNotConfigured(unserved)

    return refuse


def forwarded_patterns(served: Sequence[WireFormat]) -> list[tuple[str, WireFormat]]:
    """The rest of each format's API, most specific pattern first (`/v1/messages/{path:path}` before
    `/v1/{path:path}`); these routes come after every exact route."""
    patterns = [(pattern, wire) for wire in served for pattern in wire.spec.forwarded]
    return sorted(patterns, key=lambda item: -len(item[0].partition("{")[0]))


def item_secret(settings: Settings) -> tuple[bytes, str | None]:
    """The secret for our compaction items: `responses.item_key`, else one derived from the upstream's key
    (the same in every worker and after a restart), else a random one for this process only, with the note to log
    when the first item is sealed with it (the note concerns only a proxy that answers the compaction itself)."""
    if settings.responses.item_key:
        return settings.responses.item_key.encode(), None
    if settings.upstream_for("responses").api_key:
        key = settings.upstream_for("responses").api_key
        return hashlib.sha256(b"inflight compaction items\0" + key.encode()).digest(), None
    note = (
        "[responses] inflight answered /v1/responses/compact itself: the compaction items it gives the client are "
        "sealed with a key of this process only, so after a restart or in another worker they open no more and "
        "their turns go as a note (set responses.item_key, or upstream.api_key, to keep them)"
    )
    return os.urandom(32), note if settings.responses.compact_fallback else None
