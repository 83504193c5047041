"""Answering the model's `inflight_retrieve` calls in the client's place, so the client never sees them.

When a compacted request offered the tool (`Prepared.retrieves`) and the answer calls it (and none of the
client's own tools), each call is answered with the original its handle names (`Pipeline.read_back`), and the
conversation goes upstream again with the calls and their results, up to `compaction.retrieval.max_rounds`
times. The client gets one answer: a whole JSON body with the rounds' output joined and their usage summed, or
one stream whose later rounds are stitched in after the text already sent (`inflight.formats.retrieve_stream`).
An answer that calls the client's tools too goes to the client without the tool's calls. Whatever goes wrong
here, the client gets the best answer the upstream gave, never an error of ours.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field, replace
from typing import TypeVar

import orjson

from inflight.codecs.sse import EventBuffer
from inflight.compaction.retrieval import NO_ROOM, UNAVAILABLE
from inflight.formats import WireFormat
from inflight.formats.retrieve_stream import Stitch, stitch_for
from inflight.formats.retrieve_tool import Call, Document, ToolShape
from inflight.http.exchange import Exchange
from inflight.http.relay import closed
from inflight.offload import call_sized
from inflight.pipeline.engine import Pipeline
from inflight.pipeline.retrieval import handle_in
from inflight.upstream.exceptions import STREAM_ERRORS, UpstreamErrors
from inflight.upstream.response import Response

log = logging.getLogger("inflight")
T = TypeVar("T")
UNAVAILABLE_START = UNAVAILABLE.split("{")[0]
MAX_ANSWER_BYTES = 64 * 1024 * 1024  # an answer read whole to look for calls; a larger one goes as it came
# What a read-back leaves of the room our count says is left, for the upstream counting a little more than our
# calibrated estimate: a fixed floor, and a share of the continuation's size.
MARGIN_TOKENS = 64
MARGIN_SHARE = 0.02
READ_TOKENS = 1_024  # about what reading back one call costs, in the tokens `call_sized` weighs work by
CALL_TOKENS = 64  # roughly what one call adds to a continuation (its call, its result, their framing)
TOO_MANY = UNAVAILABLE.format(why="too many calls in one answer")


@dataclass
class Retriever:
    """The calls of one turn, answered: what was sent, and how to send a continuation."""

    pipeline: Pipeline
    wire: WireFormat
    shape: ToolShape
    exchange: Exchange
    host: str  # the upstream's, for its errors
    post: Callable[[bytes], Awaitable[Response]]  # a body POSTed upstream on the request's path, unencoded answer
    sent: bytes  # the body the turn sent upstream (with the tool)
    model: str
    tenant: str
    rounds: int = 0  # continuations sent
    calls: int = 0  # calls answered
    unavailable: int = 0  # of those, answered "unavailable"
    handles: list[str] = field(default_factory=list)  # what was read back, for the log and the archive
    done: Callable[[list[str]], None] | None = None  # told what was read back once the answer is complete
    room_in: Callable[[Document], int | None] = lambda payload: None  # tokens a continuation leaves in the budget

    def finished(self) -> None:
        """Say once what was read back (the archive's turn)."""
        done, self.done = self.done, None
        if done is not None:
            done(self.handles)

    def answers(self, calls: list[Call], *, room: int | None) -> list[tuple[Call, str]]:
        """Each call with the text it is answered with, all of them within `room` tokens (None: unbounded; 0: each
        is answered "no room left" without reading anything). Beyond `compaction.retrieval.max_calls` a call is
        answered "too many calls", unread."""
        self.calls += len(calls)
        answered = []
        most = self.pipeline.retrieval_calls(self.model)
        for index, call in enumerate(calls):
            self.handles.append((handle_in(call.arguments) or "?")[:40])
            if room == 0 or index >= most:
                self.unavailable += 1
                answered.append((call, NO_ROOM if room == 0 else TOO_MANY))
                continue
            text = self.pipeline.read_back(call.arguments, model=self.model, tenant=self.tenant, room=room)
            if room is not None:
                room -= self.pipeline.text_tokens(self.model, text)
            self.unavailable += text.startswith(UNAVAILABLE_START)
            answered.append((call, text))
        return answered

    @property
    def size(self) -> int:
        """Roughly the tokens of the body sent, which parsing and writing a continuation costs in proportion to."""
        return len(self.sent) // 4

    async def continued(
        self, payload: Document | None, answer: Document, calls: list[Call], *, read: bool = True
    ) -> Document | None:
        """The next continuation's body: the last one (None: the body the turn sent) with the answer and the calls'
        results, each clipped to the room the budget has left less a margin (`MARGIN_TOKENS`, `MARGIN_SHARE`); off
        the event loop for a big conversation. `read=False` answers each call "no room left".

        None when the answer and its calls alone leave no room: such a continuation would be refused."""

        def held() -> tuple[Document, int | None]:
            base: Document = payload if payload is not None else orjson.loads(self.sent)
            return base, self.room_in(self.shape.continued(base, answer, [(call, "") for call in calls]))

        size = self.size + len(calls) * CALL_TOKENS  # the calls' answers, results and count grow with their number
        base, room = await call_sized(held, size)
        if room is not None and room < 0:
            self.exchange.note("retrieval_error", "no-room-left")
            return None
        if room is not None:
            room = max(room - MARGIN_TOKENS - int(MARGIN_SHARE * self.size), 0)
        bound = room if read else 0
        # Reading back and counting what is read is work in proportion to the originals: off the loop when many.
        read_size = min(len(calls), self.pipeline.retrieval_calls(self.model)) * READ_TOKENS if read else 0
        results = await call_sized(lambda: self.answers(calls, room=bound), read_size)
        return await call_sized(lambda: self.shape.continued(base, answer, results), size)

    async def answered(
        self, payload: Document | None, answer: Document, calls: list[Call], ask: Callable[[Document], Awaitable[T]]
    ) -> tuple[Document, T] | None:
        """One round: the continuation of `payload` with the calls answered, sent with `ask`; refused for its size
        all the same, sent once more with each call answered "no room left", so the model still answers. None: no
        continuation went (no room for one, or it failed: logged, and the client gets what the upstream gave)."""
        counted = (self.calls, len(self.handles), self.unavailable)
        body = await self.continued(payload, answer, calls)
        if body is None:
            return None
        try:
            try:
                return body, await ask(body)
            except UpstreamRefused as refused:
                again = await self.continued(payload, answer, calls, read=False) if self.too_long(refused) else None
                if again is None:
                    raise
                self.calls, self.unavailable = counted[0] + len(calls), counted[2] + len(calls)  # the same, unread
                del self.handles[counted[1] + len(calls) :]
                self.exchange.note("retrieval_retry", "no-room-left")
                return again, await ask(again)
        except Exception as exc:
            log.warning("[retrieval] a continuation failed (%s); what the upstream gave so far goes to the client", exc)
            self.exchange.note("retrieval_error", type(exc).__name__)
            return None

    async def answer_to(self, body: Document) -> Document:
        """A continuation's whole JSON answer."""
        return await self.read_json(await self.send(body))

    def too_long(self, refused: UpstreamRefused) -> bool:
        """Whether a continuation was refused for its size (the format's context-length refusal)."""
        if refused.status is None:
            return False
        return self.wire.refusal(refused.status, refused.body, content_encoding=None) is not None

    async def send(self, body: Document) -> Response:
        """A continuation POSTed upstream, asking for an unencoded answer (it is read here)."""
        self.rounds += 1
        return await self.post(await call_sized(lambda: orjson.dumps(body), self.size))

    def noted(self) -> None:
        """The log line's fields for what was read back."""
        if self.calls:
            self.exchange.note("retrieved", ",".join(self.handles))
            self.exchange.note("retrieval_rounds", self.rounds)
            answered = self.calls - self.unavailable
            self.exchange.report = replace(self.exchange.report, retrieved=answered, unavailable=self.unavailable)

    async def whole(self, first: bytes) -> tuple[bytes, Document | None]:
        """The client's JSON answer, given the upstream's first; also the first parsed (for its usage)."""
        try:
            loaded = orjson.loads(first)
        except orjson.JSONDecodeError:
            return first, None
        answer = self.shape.whole_of(loaded)
        if answer is None:
            return first, None
        calls, others = self.shape.calls(answer)
        if not calls:
            return first, answer
        payload: Document | None = None
        earlier: list[Document] = []
        current = answer
        while calls and not others and self.rounds < self.pipeline.retrieval_rounds(self.model):
            sent = await self.answered(payload, current, calls, self.answer_to)
            if sent is None:
                break
            payload, following = sent
            earlier.append(current)
            current = following
            calls, others = self.shape.calls(current)
        self.noted()
        out = self.shape.without_calls(current, earlier)
        return orjson.dumps([out] if isinstance(loaded, list) else out), answer  # an array stays one (Gemini's)

    async def read_json(self, response: Response) -> Document:
        """A continuation's answer, which must be a 200 JSON object."""
        try:
            body = await read_all(response, self.host)
        finally:
            await response.aclose()
        if response.status != 200:
            raise UpstreamRefused(f"the upstream answered {response.status}", response.status, body)
        document = self.shape.whole_of(orjson.loads(body))
        if document is None:
            raise UpstreamRefused("the upstream's answer is not a JSON object")
        return document

    async def continuation(self, payload: Document) -> Response:
        """A continuation's streaming answer, which must be a 200."""
        response = await self.send(payload)
        if response.status != 200:
            try:
                body = await read_all(response, self.host)
            finally:
                await response.aclose()
            raise UpstreamRefused(f"the upstream answered {response.status}", response.status, body)
        return response

    async def stream(self, first: AsyncIterator[bytes], *, max_event_bytes: int) -> AsyncIterator[bytes]:
        """The client's stream: the first answer's events as they come, without the tool's calls, then each
        continuation's stitched in. However it ends (the client may leave), the archive is told."""
        rounds = self._stitched(first, max_event_bytes=max_event_bytes)
        try:
            async for out in rounds:
                yield out
        finally:
            try:
                await closed(rounds)  # and with it the continuation under way
            finally:
                self.noted()
                self.finished()

    async def _stitched(self, first: AsyncIterator[bytes], *, max_event_bytes: int) -> AsyncIterator[bytes]:
        stitch = stitch_for(self.wire.spec.name)
        assert stitch is not None
        payload: Document | None = None
        chunks: AsyncIterator[bytes] = first
        as_came: dict[bytes, bytes] = {}  # the last events' bytes as they came, for those held back to the end
        try:
            while True:
                cut = Overflow()
                as_came.clear()
                async for out in stitched(
                    chunks, stitch, max_event_bytes=max_event_bytes, overflow=cut, as_came=as_came
                ):
                    yield out
                if cut.happened:  # the rest went as it came: nothing more can be stitched
                    return
                calls, others = stitch.calls()
                if not calls or others or self.rounds >= self.pipeline.retrieval_rounds(self.model):
                    break
                sent = await self.answered(payload, stitch.answer(), calls, self.continuation)
                if sent is None:
                    break
                payload, response = sent
                stitch.next_round()
                chunks = guarded(response, self.host)
        finally:
            await closed(chunks)  # a continuation left early (the client gone) is closed with the stream
        for out in stitch.finish():
            yield as_came.get(out, out)


@dataclass
class Overflow:
    """Whether a stream had no end of an event within `max_event_bytes`, so its rest went as it came."""

    happened: bool = False


KEPT_AS_CAME = 16  # events whose bytes as they came are kept for the stream's end (its last few are held back)


async def stitched(
    chunks: AsyncIterator[bytes],
    stitch: Stitch,
    *,
    max_event_bytes: int,
    overflow: Overflow,
    as_came: dict[bytes, bytes] | None = None,
) -> AsyncIterator[bytes]:
    """One round's events through the stitch, as they come. An event it passes unchanged goes on as it came, with
    its own line ends (llama.cpp's server ends lines with CRLF); `as_came` keeps each event's bytes for those the
    stitch holds back to the end."""
    events = EventBuffer()
    kept = as_came if as_came is not None else {}
    async for chunk in chunks:
        events.add(chunk)
        while (found := events.next_with_separator()) is not None:
            event, separator = found
            kept[event + b"\n\n"] = event + separator
            if len(kept) > KEPT_AS_CAME:  # only the last few can be held back to the end
                del kept[next(iter(kept))]
            for out in stitch.event(event):
                yield kept.get(out, out)
        if len(events) > max_event_bytes:  # no end of an event in sight: the rest goes as it comes
            overflow.happened = True
            yield events.pending
            async for rest in chunks:
                yield rest
            return
    if events.pending.strip():
        for out in stitch.event(events.pending):
            yield out


class UpstreamRefused(Exception):
    """A continuation was not answered with what the first answer promised (a 200 of the same kind)."""

    def __init__(self, message: str, status: int | None = None, body: bytes = b"") -> None:
        super().__init__(message)
        self.status = status  # the upstream's status, when it answered
        self.body = body[:65536]  # its error body, to tell a refusal for size


async def guarded(response: Response, host: str) -> AsyncIterator[bytes]:
    """A continuation's body as it comes, closed at the end."""
    try:
        with UpstreamErrors(host):
            async for chunk in response.aiter_raw():
                yield chunk
    except STREAM_ERRORS:
        return
    finally:
        await response.aclose()


async def read_all(response: Response, host: str) -> bytes:
    """A whole answer, bounded by `MAX_ANSWER_BYTES`."""
    whole = response.whole_body()
    if whole is not None:
        return whole
    chunks: list[bytes] = []
    size = 0
    with UpstreamErrors(host):
        async for chunk in response.aiter_raw():
            chunks.append(chunk)
            size += len(chunk)
            if size > MAX_ANSWER_BYTES:
                raise UpstreamRefused("the answer is too large to read whole")
    return b"".join(chunks)


def readable(response: Response) -> bool:
    """Whether the answer can be read here: 200 and not content-encoded."""
    return response.status == 200 and response.content_encoding in (None, b"identity")
