"""A conversation's endpoint (`POST /v1/chat/completions`, one per wire format): read and count the
request, then make its turn and drive it.

What the request needs (compaction, a retry) is decided by `inflight.pipeline.turn.Turn`; the I/O
is done by `inflight.http.driver.Driver`. What is particular to the API is the wire format's.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from starlette.requests import Request

from inflight.config import Limits
from inflight.errors import BadRequest
from inflight.formats import Route, Target, WireFormat
from inflight.http.body import read_limited
from inflight.http.disconnect import CancelledOnDisconnect
from inflight.http.driver import Driver, post_upstream
from inflight.http.exchange import Exchange
from inflight.http.intake import read_request
from inflight.http.keepalive import KeepAlive
from inflight.http.relay import Relay, relay
from inflight.metrics.usage import client_of
from inflight.pipeline.accounting import Counted
from inflight.pipeline.archiving import Archiver
from inflight.pipeline.engine import CLIENT_MODES, Mode, Options, Pipeline
from inflight.pipeline.retrieval import HEADER as RETRIEVAL_HEADER
from inflight.pipeline.turn import Steps, Turn
from inflight.upstream.client import UpstreamClient
from inflight.upstream.headers import header_value

if TYPE_CHECKING:
    from inflight.metrics.tracing import Tracing

MakeTurn = Callable[[Pipeline, Counted, Options], Steps]
# The request headers a client asks the proxy with, as the ASGI scope names them.
COMPACTION_HEADER = b"x-inflight-compaction"
SESSION_HEADER = b"x-inflight-session"
RETRIEVAL_NAME = RETRIEVAL_HEADER.encode("latin-1")
GOAL_HEADER = b"x-inflight-goal"  # `cost` or `fit` overrides `compaction.goal` for the request
GOALS = frozenset({"cost", "fit"})


class ConversationHandler:
    """The handler of one wire format's conversation endpoint (or of `/v1/responses/compact`, with its turn)."""

    def __init__(
        self,
        wire: WireFormat,
        pipeline: Pipeline,
        upstream: UpstreamClient,
        *,
        limits: Limits,
        archive: Archiver | None = None,
        route: Route | None = None,
        make_turn: MakeTurn = Turn,
        tracing: Tracing | None = None,
    ) -> None:
        self.tracing = tracing  # telemetry on: a span per request
        self.wire = wire
        self.make_turn = make_turn  # the request's turn: a conversation's, or the compact endpoint's
        self.route = route  # the format's route this handler serves: what its path says, for `read`
        self.pipeline = pipeline
        self.upstream = upstream
        self.limits = limits
        self.archive = archive  # `archive.enabled`: every counted turn, and what its compaction dropped

    async def __call__(self, request: Request, exchange: Exchange) -> Relay | KeepAlive:
        if self.tracing is None:
            return await self._handle(request, exchange)
        trace = exchange.trace = self.tracing.request(
            request.scope["headers"], method=request.method, route=exchange.route, wire=self.wire.spec.name
        )
        try:
            return await self._handle(request, exchange)
        finally:
            trace.detach()

    async def _handle(self, request: Request, exchange: Exchange) -> Relay | KeepAlive:
        encoding = (header_value(request.scope["headers"], b"content-encoding") or b"").decode("latin-1")
        raw = await read_limited(request, self.limits)
        options = options_of(request, self.wire, client_keys=self.upstream.client_keys)  # after the body: a 400 here
        exchange.client = options.tenant
        if options.tenant:
            exchange.note("client", client_of(options.tenant))
        intake = await read_request(
            raw,
            encoding,
            self.pipeline,
            self.wire,
            limit=self.limits.max_body_bytes,
            options=options,
            target=Target(self.route, request.path_params),
        )
        if intake.unread is not None:
            exchange.note("unread", intake.unread)
        model = intake.payload.get("model") or request.path_params.get("model")  # Gemini's path names it
        exchange.note("model", model if isinstance(model, str) else "-")
        if exchange.trace is not None and isinstance(model, str):
            exchange.trace.named(model)
        async with CancelledOnDisconnect(request.scope, request.receive):  # the body is in: watch the client leaving
            if intake.counted is None:  # not ours to judge: the upstream answers whatever this is with its own error
                response = await post_upstream(self.upstream, request, exchange, intake.raw, rewritten=False)
                return relay(response, exchange)
            turn = self.make_turn(self.pipeline, intake.counted, options)
            driver = Driver(
                turn,
                pipeline=self.pipeline,
                wire=self.wire,
                request=request,
                exchange=exchange,
                upstream=self.upstream,
                limits=self.limits,
                archive=self.archive,
            )
            return await driver.drive()


def options_of(request: Request, wire: WireFormat, *, client_keys: frozenset[bytes]) -> Options:
    """The `x-inflight-*` headers, the format's own session header (the key uses it after the body's), and
    the client's key (`client_keys`: the headers that carry one), read in one pass over the raw headers."""
    hint_header = wire.spec.session_header
    hint_name = hint_header.lower().encode("latin-1") if hint_header is not None else None
    wanted = {COMPACTION_HEADER, SESSION_HEADER, RETRIEVAL_NAME, GOAL_HEADER, hint_name}
    found: dict[bytes, str] = {}
    credentials: list[tuple[bytes, bytes]] = []
    for name, value in request.scope["headers"]:  # names are lower-case in the ASGI scope
        if name in client_keys:
            credentials.append((name, value))
        elif name in wanted and name not in found:  # the first of a repeated header, as starlette's `get` reads it
            found[name] = value.decode("latin-1")
    asked = found.get(COMPACTION_HEADER, "")
    if asked.strip() and asked.strip().lower() not in CLIENT_MODES:  # a typo must not pass as the configured mode
        raise BadRequest(
            f"x-inflight-compaction: expected off, force or shadow (or no header), got {asked!r}",
            param="x-inflight-compaction",
            code="invalid_header",
        )
    goal = found.get(GOAL_HEADER, "").strip().lower()
    if goal and goal not in GOALS:
        raise BadRequest(
            f"x-inflight-goal: expected cost or fit (or no header), got {found[GOAL_HEADER]!r}",
            param="x-inflight-goal",
            code="invalid_header",
        )
    client = request.scope.get("client")
    return Options(
        mode=Mode.asked(asked),
        session=found.get(SESSION_HEADER),
        session_hint=found.get(hint_name) if hint_name is not None else None,
        credentials=credentials,
        client=client[0] if client else "",
        retrieval=found.get(RETRIEVAL_NAME, ""),
        goal=goal,
    )
