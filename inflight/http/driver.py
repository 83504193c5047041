"""The driver of a turn: carries out each command of `inflight.pipeline.turn.Turn` with the upstream and
the client, and answers with what happened, until the answer is relayed.

The turn decides (compact or not, hold the answer or not, retry once); this file only does I/O: the
upstream's model list and exact count, the compaction's waits, the request upstream, reading enough of
the answer to tell a refusal, and the relay. It renders the turn's report on the exchange (the
`x-inflight-*` headers, the log line's fields, the metrics) and hands the archive the turn.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from typing import Any

import orjson
from starlette.requests import Request

from inflight.codecs.sse import EventBuffer
from inflight.config import Limits
from inflight.errors import ProxyError
from inflight.formats import UsageReader, WireFormat
from inflight.formats.retrieve_tool import Document, shape_of
from inflight.http.exchange import Exchange
from inflight.http.hold import Held, hold_until_known, may_refuse
from inflight.http.keepalive import KeepAlive
from inflight.http.relay import Relay, closed, prepend, relay, tap
from inflight.http.retrieval import Retriever, read_all, readable
from inflight.http.target import checked_path
from inflight.pipeline.accounting import Counted
from inflight.pipeline.archiving import Archiver
from inflight.pipeline.engine import Pipeline
from inflight.pipeline.handoff import handoff_for
from inflight.pipeline.turn import (
    Answer,
    Answered,
    AnswerRead,
    CheckSummary,
    Command,
    CountExactly,
    Discover,
    Discovered,
    Event,
    ExactCount,
    Prepare,
    Prepared,
    ReadAnswer,
    Send,
    Steps,
    Summarize,
    Summarized,
    SummaryReady,
)
from inflight.pipeline.turn import Relay as RelayCommand
from inflight.policy.windows import FetchModels
from inflight.upstream.client import UpstreamClient, missing_v1
from inflight.upstream.exceptions import UpstreamErrors
from inflight.upstream.headers import header_value, is_event_stream, response_headers
from inflight.upstream.response import Response

log = logging.getLogger("inflight")
COUNT_TIMEOUT_S = 10.0  # the upstream's exact count; past it, our estimate decides
MAX_SHORT_BYTES = 64 * 1024  # an upstream's "no such route" is short


class Driver:
    """Carries one turn through: each command done with the upstream, each outcome told back to the turn."""

    def __init__(
        self,
        turn: Steps,
        *,
        pipeline: Pipeline,
        wire: WireFormat,
        request: Request,
        exchange: Exchange,
        upstream: UpstreamClient,
        limits: Limits,
        archive: Archiver | None = None,
    ) -> None:
        self.turn = turn
        self.pipeline = pipeline
        self.wire = wire
        self.request = request
        self.exchange = exchange
        self.upstream = upstream
        self.limits = limits
        self.archive = archive  # `archive.enabled`: every counted turn, and what its compaction dropped
        self.identity = False  # ask for an unencoded answer: a keep-alive stream sent its headers already
        self.response: Response | None = None  # the upstream's latest answer, until it is relayed or closed
        self.held: Held | None = None  # what was read of it to tell a refusal

    async def drive(self) -> Relay | KeepAlive:
        """The answer for the client: the relay of the upstream's, or a keep-alive stream that ends in it."""
        try:
            return await self._carry_out(self.turn.start())
        except BaseException:
            await self._give_up()
            raise

    async def _carry_out(self, command: Command) -> Relay | KeepAlive:
        while True:
            self.exchange.report = self.turn.report
            self.exchange.note_all(self.turn.take_fields())
            if isinstance(command, RelayCommand | Answer):
                self.turn.close()  # the turn's last command
            if isinstance(command, RelayCommand):
                return await self._relay(command)
            if isinstance(command, Answer):
                if self.archive is not None and command.archived is not None:
                    self.archive.turn(*command.archived, status=command.status)
                return own_answer(command.body, self.exchange, status=command.status, content_type=command.content_type)
            waits = isinstance(command, Prepare | Summarize) and command.keepalive_after is not None
            if waits and not self.identity:  # a compaction or summary that may take long, and no stream begun yet
                assert isinstance(command, Prepare | Summarize) and command.keepalive_after is not None
                working = asyncio.ensure_future(self._do(command))
                try:
                    await asyncio.wait_for(asyncio.shield(working), command.keepalive_after)
                except TimeoutError:  # still working: begin the stream, and keep it alive until it is sent
                    self.identity = True  # the headers go out now, with no Content-Encoding: the upstream sends none
                    work = asyncio.ensure_future(self._after(working))
                    return KeepAlive(work, command.keepalive_after, self.exchange, self.wire)
                except BaseException:
                    working.cancel()
                    raise
                event: Event = working.result()
            else:
                event = await self._do(command)
            command = self.turn.send(event)
            if isinstance(event, Answered) and not isinstance(command, RelayCommand | ReadAnswer):
                await self._close()  # refused: not kept open while the retry is compacted

    async def _give_up(self) -> None:
        """The turn ended in an error or was cancelled: its steps are closed, and the upstream's answer too."""
        self.turn.close()
        await self._close()

    async def _after(self, working: asyncio.Future[Event]) -> Relay:
        """The rest of the turn once the compaction (or the agent's summary) a keep-alive stream waited for is done:
        the upstream's answer, or inflight's own."""
        try:
            answer = await self._carry_out(self.turn.send(await working))
        except BaseException:
            await self._give_up()
            raise
        assert isinstance(answer, Relay)  # a stream once begun is not begun again (`identity` is set)
        return answer

    async def _do(self, command: Command) -> Event:
        if isinstance(command, Prepare):  # every turn's first two commands, asked first
            return await self._prepare(command)
        if isinstance(command, Send):
            return await self._send(command)
        if isinstance(command, Discover):
            await self.pipeline.discover(discovery(self.upstream, self.request))
            return Discovered()
        if isinstance(command, CountExactly):
            return ExactCount(await exact_count(self.upstream, self.request, command.counted))
        if isinstance(command, CheckSummary):
            return SummaryReady(await self.pipeline.summary_ready(command.counted, command.options))
        if isinstance(command, Summarize):
            return Summarized(await handoff_for(self.pipeline, command.counted, command.options, command.asked))
        assert isinstance(command, ReadAnswer)
        response, self.response, self.held = self.response, None, None
        assert response is not None
        return AnswerRead(await read_short(response, self.upstream.host))

    async def _prepare(self, command: Prepare) -> Prepared:
        counted, accounting, options = command.counted, command.accounting, command.options
        prepared = await self.pipeline.prepare(counted, accounting, options, retry=command.retry)
        self.exchange.cache_figures = prepared.cache_figures  # worked out when the log line is written
        return Prepared(prepared)

    async def _send(self, command: Send) -> Answered:
        await self._close()
        identity = self.identity or command.identity
        self.response = response = await post_upstream(
            self.upstream, self.request, self.exchange, command.body, rewritten=command.rewritten, identity=identity
        )
        if not command.hold or not may_refuse(response.status, event_stream=command.event_stream):
            return Answered(response.status)
        self.held = held = await hold_until_known(
            response,
            self.wire,
            event_stream=command.event_stream,
            host=self.upstream.host,
            max_event_bytes=self.limits.max_event_bytes,
        )
        self.exchange.upstream_answered()  # for a held response: when its first event (or its error) was in
        return Answered(response.status, b"".join(held.chunks), held.refusal)

    def _archive(self, command: RelayCommand, status: int, retriever: Retriever | None) -> None:
        """Archive the turn now, or, when the model may call `inflight_retrieve`, once its calls are answered
        (with what was read back)."""
        archive, archived, prepared = self.archive, command.archived, command.prepared
        if archive is None or archived is None or prepared is None:
            return
        if retriever is None:
            archive.turn(*archived, prepared, status=status)
        else:
            retriever.done = lambda handles: archive.turn(*archived, prepared, status=status, retrieved=handles)

    async def _answered_whole(self, response: Response, first: bytes, retriever: Retriever) -> Relay:
        """A JSON answer with the model's `inflight_retrieve` calls answered, as one body for the client."""
        try:
            answered, _ = await retriever.whole(first)
        finally:
            retriever.finished()
        headers = response_headers(response.headers, self.exchange.headers, event_stream=response.event_stream)
        headers = [(name, value) for name, value in headers if name != b"content-length"]
        headers.append((b"content-length", str(len(answered)).encode()))
        return Relay(
            response.status, headers, once(answered), response.aclose, self.exchange, streaming=False, body=answered
        )

    def _retriever(self, command: RelayCommand) -> Retriever | None:
        """What answers the model's `inflight_retrieve` calls for this turn (None: the format has no shape)."""
        shape = shape_of(self.wire)
        if shape is None or command.prepared is None or command.archived is None:
            return None
        counted, accounting, options = command.archived
        limit = command.prepared.limit

        def room_in(payload: Document) -> int | None:
            return self.pipeline.room_left(
                payload, counted=counted, accounting=accounting, limit=limit, tenant=options.tenant
            )

        async def post(body: bytes) -> Response:
            return await post_upstream(self.upstream, self.request, self.exchange, body, rewritten=True, identity=True)

        return Retriever(
            pipeline=self.pipeline,
            wire=self.wire,
            shape=shape,
            exchange=self.exchange,
            host=self.upstream.host,
            post=post,
            sent=command.prepared.body,
            model=counted.model,
            tenant=options.tenant,
            room_in=room_in,
        )

    async def _close(self) -> None:
        response, self.response, self.held = self.response, None, None
        if response is not None:
            await response.aclose()

    async def _relay(self, command: RelayCommand) -> Relay:
        """Relay the answer unchanged, reading the upstream's counts on the way to calibrate the estimates."""
        response, held, turn, exchange = self.response, self.held, self.turn, self.exchange
        assert response is not None
        prepared = command.prepared
        if prepared is None:  # not a request inflight counted: as it came
            return relay(response, exchange, chunks=held_first(held))
        retriever = self._retriever(command) if prepared.retrieves and readable(response) else None
        self._archive(command, response.status, retriever)
        if response.status != 200:
            return relay(response, exchange, chunks=held_first(held))
        reader = UsageReader(
            self.wire,
            event_stream=response.event_stream,
            content_encoding=response.content_encoding,
            max_event_bytes=self.limits.max_event_bytes,
            max_inflate_bytes=self.limits.max_inflate_bytes,
        )

        def counted_by_upstream() -> None:
            prompt_tokens = reader.finish()
            turn.answered_usage(prompt_tokens, reader.output_tokens)
            if exchange.trace is not None:
                exchange.trace.used(prompt_tokens, reader.output_tokens)

        if retriever is not None and not reader.event_stream:  # read whole: the calls answered before it goes
            first = await read_all(response, self.upstream.host)
            reader.feed(first)
            counted_by_upstream()  # the first answer's counts: those of the request the turn sent
            return await self._answered_whole(response, first, retriever)
        # All of it is in (most JSON answers, and a stream sent whole): relayed at once, unless calls are stitched in.
        whole = response.whole_body() if held is None and prepared.report is None and retriever is None else None
        if whole is not None:  # all of it is in: its counts read now, with no iterator in between
            reader.feed(whole)
            counted_by_upstream()
            return relay(response, exchange, body=whole)
        # What was held goes first, through the same iterator: one layer fewer for each chunk of a stream.
        rest, read = (response.aiter_raw(), []) if held is None else (held.rest, held.chunks)
        passing = tap(rest, reader.feed, counted_by_upstream, first=read)
        if retriever is not None:  # the first answer's counts are read as it passes, before any continuation
            passing = retriever.stream(passing, max_event_bytes=self.limits.max_event_bytes)
        answer = relay(response, exchange, chunks=passing)
        if retriever is not None:  # a stream the calls are stitched into: continuations to wait on, a length of its own
            answer.streaming = True
            answer.headers = [(name, value) for name, value in answer.headers if name != b"content-length"]
        if prepared.report is None:
            return answer
        return reported(answer, self.wire, prepared.report, max_event_bytes=self.limits.max_event_bytes)


def held_first(held: Held | None) -> AsyncIterator[bytes] | None:
    """What was held, then the rest of the body (None: nothing was held, the response's own iterator serves)."""
    return None if held is None else prepend(held.chunks, held.rest)


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
    if exchange.trace is not None:  # the attempt's span, its `traceparent` sent upstream
        headers = exchange.trace.sending(headers, host=upstream.host, path=target.partition(b"?")[0].decode("latin-1"))
    exchange.upstream_sending()
    response = await upstream.open("POST", target, headers=headers, content=body)
    exchange.upstream_answered()
    if exchange.trace is not None:
        exchange.trace.answered(response.status)
    return response


async def read_short(response: Response, host: str) -> bytes:
    """An answer read whole up to `MAX_SHORT_BYTES` (an upstream's "no such route" is short; past that
    it is cut), and the response closed."""
    chunks: list[bytes] = []
    try:
        size = 0
        with UpstreamErrors(host):
            async for chunk in response.aiter_raw():
                chunks.append(chunk)
                size += len(chunk)
                if size > MAX_SHORT_BYTES:
                    break
    finally:
        await response.aclose()
    return b"".join(chunks)[:MAX_SHORT_BYTES]


async def once(body: bytes) -> AsyncIterator[bytes]:
    yield body


def own_answer(
    body: bytes, exchange: Exchange, *, status: int = 200, content_type: bytes = b"application/json"
) -> Relay:
    """A JSON answer of inflight's own (or the upstream's, read whole), relayed like any other: the
    exchange's `x-inflight-*` headers, its log line when it is out."""

    async def whole() -> AsyncIterator[bytes]:
        yield body

    async def nothing_to_close() -> None:
        return None

    own = [(b"content-type", content_type), (b"content-length", str(len(body)).encode())]
    headers = response_headers(own, exchange.headers, event_stream=is_event_stream(own))
    return Relay(status, headers, whole(), nothing_to_close, exchange, streaming=False)


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
    try:
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
    finally:
        await closed(chunks)  # a read-back's stream under it, left early, closes its continuation


async def exact_count(upstream: UpstreamClient, request: Request, counted: Counted) -> int | None:
    """Ask the format's exact count (`spec.exact_count`) with the client's credentials (and betas); None when
    the upstream gives no count (an error, a timeout): the estimate stands."""
    counter = counted.wire.spec.exact_count
    assert counter is not None
    call = counter.request(counted.payload, model=counted.model)
    raw = request.scope["headers"]
    credentials = [(n, v) for n, v in upstream.credential_headers(raw) if n != b"host"]
    betas = [(n, v) for n, v in raw if n == b"anthropic-beta"]
    headers = [(b"content-type", b"application/json"), *call.headers, *credentials, *betas]
    try:
        status, answer = await upstream.send_whole(
            "POST", call.path, headers=headers, content=orjson.dumps(call.body), timeout_s=COUNT_TIMEOUT_S
        )
        return counter.tokens(orjson.loads(answer)) if status == 200 else None
    except (ProxyError, ValueError) as exc:
        log.info("[tokens] %s gave no count (%s)", call.path, exc)
        return None


def discovery(upstream: UpstreamClient, request: Request) -> FetchModels:
    """Fetches the upstream's model list with this client's credentials (used once per process)."""

    async def fetch_models() -> bytes:
        credentials = upstream.credential_headers(request.scope["headers"])
        status, body = await upstream.fetch("/v1/models", headers=credentials)
        if status != 200:  # it answered: not `UpstreamUnreachable`, which the log would blame on the network
            path = upstream.target_for(b"/v1/models").decode("latin-1")
            hint = missing_v1(upstream.base_url) if status == 404 else ""
            raise LookupError(f"{upstream.host} answered GET {path} with {status}{hint}")
        return body

    return fetch_models
