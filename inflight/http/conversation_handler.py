"""A conversation's endpoint (`POST /v1/chat/completions`, one per wire format): read, count, budget,
compact if needed, send, relay; retry once if refused.

Each step is one call into the module that owns it; this file only puts them in order. What is
particular to the API is the wire format's (`inflight.formats`): how the body reads as the core's
conversation and is written back, how a refusal and usage look, how an error is shaped.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import orjson
from starlette.requests import Request

from inflight.codecs.sse import EventBuffer
from inflight.config import Limits
from inflight.errors import ProxyError, UpstreamUnreachable
from inflight.formats import UsageReader, WireFormat
from inflight.http.body import read_limited
from inflight.http.disconnect import cancelled_on_disconnect
from inflight.http.exchange import Exchange
from inflight.http.hold import Held, hold_until_known
from inflight.http.intake import read_request
from inflight.http.keepalive import KeepAlive
from inflight.http.relay import Relay, prepend, relay, tap
from inflight.http.target import checked_path
from inflight.pipeline.accounting import Accounting, Counted
from inflight.pipeline.archiving import Archiver
from inflight.pipeline.engine import CLIENT_MODES, Options, Pipeline
from inflight.pipeline.outgoing import Prepared
from inflight.policy.retry import RetryAim
from inflight.policy.windows import FetchModels
from inflight.upstream.client import UpstreamClient
from inflight.upstream.headers import KEY_HEADERS, header_value, is_event_stream
from inflight.upstream.response import Response

log = logging.getLogger("inflight")
COUNT_TIMEOUT_S = 10.0  # the upstream's exact count; past it, our estimate decides


@dataclass
class Call:
    """One counted request on its way: what the steps after intake, and a retry, need."""

    request: Request
    exchange: Exchange  # the log line and the x-inflight-* headers
    counted: Counted
    accounting: Accounting
    options: Options
    identity: bool = False  # ask the upstream for an unencoded body (a keep-alive stream sent its headers)


class ConversationHandler:
    """The handler of one wire format's conversation endpoint."""

    def __init__(
        self,
        wire: WireFormat,
        pipeline: Pipeline,
        upstream: UpstreamClient,
        *,
        limits: Limits,
        archive: Archiver | None = None,
    ) -> None:
        self.wire = wire
        self.pipeline = pipeline
        self.upstream = upstream
        self.limits = limits
        self.archive = archive  # `archive.enabled`: every counted turn, and what its compaction dropped

    async def __call__(self, request: Request, exchange: Exchange) -> Relay | KeepAlive:
        encoding = request.headers.get("content-encoding", "")
        intake = await read_request(
            await read_limited(request, self.limits),
            encoding,
            self.pipeline,
            self.wire,
            limit=self.limits.max_body_bytes,
        )
        model = intake.payload.get("model")
        exchange.note("model", model if isinstance(model, str) else "-")
        async with cancelled_on_disconnect(request.scope, request.receive):  # the body is in: watch the client leaving
            if intake.counted is None:  # not ours to judge: the upstream answers whatever this is with its own error
                return relay(await self.send(request, exchange, intake.raw, rewritten=False), exchange)
            options = options_of(request, self.wire)
            fetch_models = discovery(self.upstream, request)
            accounting = await self.pipeline.account(intake.counted, fetch_models, tenant=options.tenant)
            if self.pipeline.asks_exact_count(intake.counted, accounting, options):
                accounting = await self.exact(request, exchange, intake.counted, accounting, options.tenant)
            exchange.note_all(accounting.log_fields())
            call = Call(request, exchange, intake.counted, accounting, options)
            interval = self.keepalive_after(call)
            if interval is None:
                return await self.respond(call, await self.prepare(call))
            preparing = asyncio.ensure_future(self.prepare(call))
            try:
                await asyncio.wait_for(asyncio.shield(preparing), interval)
            except TimeoutError:  # still compacting: begin the stream, and keep it alive until it is sent
                call.identity = True  # the headers go out now, with no Content-Encoding: the upstream must send none
                work = asyncio.ensure_future(self.respond_when(preparing, call))
                return KeepAlive(work, interval, exchange, self.wire)
            except BaseException:
                preparing.cancel()
                raise
            return await self.respond(call, preparing.result())

    async def exact(
        self, request: Request, exchange: Exchange, counted: Counted, accounting: Accounting, tenant: str
    ) -> Accounting:
        """The upstream's own count of the prompt (`messages.count_tokens: near`), else our estimate."""
        tokens = await exact_count(self.upstream, request, counted)
        exchange.note("exact_count", tokens if tokens is not None else "failed")
        if tokens is None:
            return accounting
        return self.pipeline.with_exact_count(accounting, tokens, tenant=tenant)

    def keepalive_after(self, call: Call) -> float | None:
        """For a streaming request that may be compacted, `summarize.keepalive_after_s` of its model (else None)."""
        if not call.counted.streams or not self.pipeline.compacts(call.counted, call.options):
            return None
        return self.pipeline.keepalive_after(call.counted.model)

    async def respond_when(self, preparing: asyncio.Future[Prepared], call: Call) -> Relay:
        return await self.respond(call, await preparing)

    async def respond(self, call: Call, prepared: Prepared) -> Relay:
        """From the prepared body to the relay of the upstream's answer (a retry included)."""
        exchange, accounting = call.exchange, call.accounting
        response = await self.send_prepared(call, prepared)
        if not self.pipeline.compacts(call.counted, call.options) or prepared.too_long:
            # A retry could only shrink it to the same floor: a refusal of this one goes to the client as it is.
            return self.relay_with_usage(call, response, prepared)
        try:
            held = await hold_until_known(
                response,
                self.wire,
                event_stream=call.counted.streams,
                host=self.upstream.host,
                max_event_bytes=self.limits.max_event_bytes,
            )
        except BaseException:
            await response.aclose()
            raise
        exchange.upstream_answered()  # for a held response: when its first event (or its error) was in
        if held.refusal is None and self.refuses_server_compaction(call, response.status, held):
            await response.aclose()
            return await self.without_server_compaction(call)
        if held.refusal is None:
            return self.relay_with_usage(call, response, prepared, held=held)
        await response.aclose()
        aim = self.pipeline.learn(call.counted, accounting, held.refusal, prepared, tenant=call.options.tenant)
        exchange.note_all({"refused_by": held.refusal.upstream, "retry_limit": aim.limit})
        if aim.blind:
            exchange.note("retry_aim", "blind")
        return await self.retry(call, aim, refused=prepared)

    def refuses_server_compaction(self, call: Call, status: int, held: Held) -> bool:
        """The upstream refused the request's `context_management` compaction, which inflight did not take over."""
        if not call.counted.request.server_managed or self.pipeline.takes_over_server_compaction(call.counted):
            return False
        return self.wire.rejects_server_compaction(status, b"".join(held.chunks))

    async def without_server_compaction(self, call: Call) -> Relay:
        """Once: the same request with its compaction taken over by inflight, from now on for this model."""
        self.pipeline.learn_no_server_compaction(call.counted.model)
        call.exchange.note("context_management", "refused")
        fetch_models = discovery(self.upstream, call.request)
        call.accounting = await self.pipeline.account(call.counted, fetch_models, tenant=call.options.tenant)
        call.exchange.note_all(call.accounting.log_fields())
        return await self.respond(call, await self.prepare(call))

    async def retry(self, call: Call, aim: RetryAim, *, refused: Prepared) -> Relay:
        """Once: the original request compacted again against what the refusal taught us."""
        prepared = await self.prepare(call, retry=aim)
        prepared.follows(refused)
        call.exchange.headers["x-inflight-actions"] += ",retry"
        call.exchange.headers["x-inflight-retried"] = "1"
        response = await self.send_prepared(call, prepared)
        return self.relay_with_usage(call, response, prepared)

    async def prepare(self, call: Call, *, retry: RetryAim | None = None) -> Prepared:
        """The body to send (compacted if needed); its headers and log fields go on the exchange."""
        pipeline = self.pipeline
        prepared = await pipeline.prepare(call.counted, call.accounting, call.options, retry=retry)
        call.exchange.headers = dict(prepared.headers)
        call.exchange.note_all(prepared.fields)
        call.exchange.later["cache"] = prepared.cache_fields  # after the answer: off the request's path
        if prepared.too_long is not None:
            # Fail open: our count may be wrong, and only the upstream knows. Its answer is the client's.
            log.warning("[compaction] %s", prepared.too_long)
            call.exchange.note("fits", "no")
        return prepared

    async def send(
        self, request: Request, exchange: Exchange, body: bytes, *, rewritten: bool, identity: bool = False
    ) -> Response:
        return await post_upstream(self.upstream, request, exchange, body, rewritten=rewritten, identity=identity)

    async def send_prepared(self, call: Call, prepared: Prepared) -> Response:
        """The prepared body upstream; a report of ours goes into the answer, which must come unencoded."""
        identity = call.identity or prepared.report is not None
        return await self.send(
            call.request, call.exchange, prepared.body, rewritten=prepared.rewritten, identity=identity
        )

    def relay_with_usage(
        self, call: Call, response: Response, prepared: Prepared, *, held: Held | None = None
    ) -> Relay:
        """Relay unchanged, reading the upstream's prompt count on the way to calibrate this model's estimates."""
        chunks = response.aiter_raw() if held is None else prepend(held.chunks, held.rest)
        if self.archive is not None:
            self.archive.turn(call.counted, call.accounting, call.options, prepared, status=response.status)
        if response.status != 200:
            return relay(response, call.exchange, chunks=chunks)
        reader = UsageReader(
            self.wire,
            event_stream=is_event_stream(response.headers),
            content_encoding=header_value(response.headers, b"content-encoding"),
            max_event_bytes=self.limits.max_event_bytes,
            max_inflate_bytes=self.limits.max_inflate_bytes,
        )
        pipeline, model, tenant = self.pipeline, call.accounting.model, call.options.tenant

        def calibrate() -> None:
            actual = reader.finish()
            if actual is not None and not prepared.approximate:  # an estimate from samples calibrates nothing
                estimate, fixed = prepared.sent_tokens, prepared.sent_fixed
                output = reader.output_tokens
                pipeline.record_usage(
                    model, estimate=estimate, actual=actual, fixed=fixed, tenant=tenant, output=output
                )

        answer = relay(response, call.exchange, chunks=tap(chunks, reader.feed, calibrate))
        if prepared.report is None:
            return answer
        return reported(answer, self.wire, prepared.report, max_event_bytes=self.limits.max_event_bytes)


async def post_upstream(
    upstream: UpstreamClient,
    request: Request,
    exchange: Exchange,
    body: bytes,
    *,
    rewritten: bool,
    identity: bool = False,
) -> Response:
    """`body` POSTed to the request's path upstream with the client's headers, timed on the exchange.
    `rewritten`: not the client's bytes (its length is recomputed); `identity`: ask for no encoding."""
    target = upstream.target_for(checked_path(request.scope), request.scope["query_string"])
    client_headers = request.scope["headers"]
    if identity:
        client_headers = [(k, v) for k, v in client_headers if k.lower() != b"accept-encoding"]
        client_headers.append((b"accept-encoding", b"identity"))
    headers = upstream.headers_for(client_headers, rewrite_body=rewritten)
    exchange.upstream_sending()
    response = await upstream.open("POST", target, headers=headers, content=body)
    exchange.upstream_answered()
    return response


def reported(answer: Relay, wire: WireFormat, report: dict[str, Any], *, max_event_bytes: int) -> Relay:
    """The answer with the report of what inflight did in the upstream's place (Anthropic's
    `context_management`) written in: the JSON body whole, or the stream's event that carries it. An
    encoded answer (the upstream ignored our `identity`) goes as it came."""
    if header_value(answer.headers, b"content-encoding") not in (None, b"identity"):
        log.info("[context_management] the answer came encoded: sent without the report of the edits made")
        return answer
    if is_event_stream(answer.headers):
        answer.chunks = reported_events(answer.chunks, wire, report, max_event_bytes=max_event_bytes)
        return answer
    answer.headers = [(name, value) for name, value in answer.headers if name != b"content-length"]
    answer.chunks = reported_whole(answer.chunks, wire, report)
    return answer


async def reported_whole(
    chunks: AsyncIterator[bytes], wire: WireFormat, report: dict[str, Any]
) -> AsyncIterator[bytes]:
    body = b"".join([chunk async for chunk in chunks])
    try:
        yield wire.reported_body(body, report)
    except ValueError:  # not JSON after all: as it came
        yield body


async def reported_events(
    chunks: AsyncIterator[bytes], wire: WireFormat, report: dict[str, Any], *, max_event_bytes: int
) -> AsyncIterator[bytes]:
    """The stream event by event as it comes, each through `wire.reported_event`; past `max_event_bytes`
    with no end of an event in sight, the rest as it comes."""
    events = EventBuffer()
    async for chunk in chunks:
        events.add(chunk)
        while (event := events.next_event()) is not None:
            try:
                yield wire.reported_event(event, report) + b"\n\n"
            except ValueError:
                yield event + b"\n\n"
        if len(events) > max_event_bytes:
            yield events.pending
            async for rest in chunks:
                yield rest
            return
    if events.pending:
        yield events.pending


async def exact_count(upstream: UpstreamClient, request: Request, counted: Counted) -> int | None:
    """`POST` the prompt to the format's `count_path` with the client's credentials (and betas); None when
    the upstream gives no count (an error, a timeout): the estimate stands."""
    wire = counted.wire
    assert wire.count_path is not None
    raw = request.scope["headers"]
    credentials = [(n, v) for n, v in upstream.credential_headers(raw) if n != b"host"]
    betas = [(n, v) for n, v in raw if n == b"anthropic-beta"]
    headers = [(b"content-type", b"application/json"), *credentials, *betas]
    body = orjson.dumps(wire.count_request(counted.payload))
    try:
        status, answer = await upstream.send_whole(
            "POST", wire.count_path, headers=headers, content=body, timeout_s=COUNT_TIMEOUT_S
        )
        return wire.counted_tokens(orjson.loads(answer)) if status == 200 else None
    except (ProxyError, ValueError) as exc:
        log.info("[tokens] %s gave no count (%s)", wire.count_path, exc)
        return None


def discovery(upstream: UpstreamClient, request: Request) -> FetchModels:
    """Fetches the upstream's model list with this client's credentials (used once per process)."""

    async def fetch_models() -> bytes:
        credentials = upstream.credential_headers(request.scope["headers"])
        status, body = await upstream.fetch("/v1/models", headers=credentials)
        if status != 200:
            raise UpstreamUnreachable(f"GET /v1/models answered {status}")
        return body

    return fetch_models


def client_mode(header: str) -> str:
    """What a client's `x-inflight-compaction` asks: `off`, `force` or `shadow`; anything else, nothing."""
    mode = header.strip().lower()
    return mode if mode in CLIENT_MODES else ""


def options_of(request: Request, wire: WireFormat) -> Options:
    """The `x-inflight-*` headers, and the format's own session header (the key uses it after the body's)."""
    hint = request.headers.get(wire.session_header) if wire.session_header is not None else None
    return Options(
        mode=client_mode(request.headers.get("x-inflight-compaction", "")),
        session=request.headers.get("x-inflight-session"),
        session_hint=hint,
        credentials=[(name, value) for name, value in request.scope["headers"] if name in KEY_HEADERS],
        client=request.client.host if request.client else "",
    )
