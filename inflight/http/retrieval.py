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

import orjson

from inflight.codecs.sse import EventBuffer
from inflight.compaction.retrieval import UNAVAILABLE
from inflight.formats import WireFormat
from inflight.formats.retrieve_stream import Stitch, stitch_for
from inflight.formats.retrieve_tool import Call, Document, ToolShape
from inflight.http.exchange import Exchange
from inflight.offload import call_sized
from inflight.pipeline.engine import Pipeline
from inflight.pipeline.retrieval import handle_in
from inflight.upstream.exceptions import STREAM_ERRORS, UpstreamErrors
from inflight.upstream.response import Response

log = logging.getLogger("inflight")
UNAVAILABLE_START = UNAVAILABLE.split("{")[0]
MAX_ANSWER_BYTES = 64 * 1024 * 1024  # an answer read whole to look for calls; a larger one goes as it came


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
        """Each call with the text it is answered with, all of them within `room` tokens (None: unbounded)."""
        self.calls += len(calls)
        answered = []
        for call in calls:
            self.handles.append((handle_in(call.arguments) or "?")[:40])
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

    async def continued(self, payload: Document | None, answer: Document, calls: list[Call]) -> Document | None:
        """The next continuation's body: the last one (None: the body the turn sent) with the answer and the calls'
        results, each clipped to the room the budget has left; off the event loop for a big conversation.

        None when the answer and its calls alone leave no room: such a continuation would be refused."""

        def held() -> tuple[Document, int | None]:
            base: Document = payload if payload is not None else orjson.loads(self.sent)
            return base, self.room_in(self.shape.continued(base, answer, [(call, "") for call in calls]))

        base, room = await call_sized(held, self.size)
        if room is not None and room < 0:
            self.exchange.note("retrieval_error", "no-room-left")
            return None
        results = self.answers(calls, room=room)
        return await call_sized(lambda: self.shape.continued(base, answer, results), self.size)

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
            answer = orjson.loads(first)
        except orjson.JSONDecodeError:
            return first, None
        if not isinstance(answer, dict):
            return first, None
        calls, others = self.shape.calls(answer)
        if not calls:
            return first, answer
        payload: Document | None = None
        earlier: list[Document] = []
        current = answer
        while calls and not others and self.rounds < self.pipeline.retrieval_rounds(self.model):
            payload = await self.continued(payload, current, calls)
            if payload is None:
                break
            try:
                following = await self.read_json(await self.send(payload))
            except Exception as exc:  # the continuation failed: the client gets what the upstream gave so far
                log.warning("[retrieval] a continuation failed (%s); the answer so far goes to the client", exc)
                self.exchange.note("retrieval_error", type(exc).__name__)
                break
            earlier.append(current)
            current = following
            calls, others = self.shape.calls(current)
        self.noted()
        return orjson.dumps(self.shape.without_calls(current, earlier)), answer

    async def read_json(self, response: Response) -> Document:
        """A continuation's answer, which must be a 200 JSON object."""
        try:
            body = await read_all(response, self.host)
        finally:
            await response.aclose()
        if response.status != 200:
            raise UpstreamRefused(f"the upstream answered {response.status}")
        document = orjson.loads(body)
        if not isinstance(document, dict):
            raise UpstreamRefused("the upstream's answer is not a JSON object")
        return document

    async def continuation(self, payload: Document) -> Response | None:
        """A continuation's streaming answer (None: it failed, and the client's stream is ended as it is)."""
        response: Response | None = None
        try:
            response = await self.send(payload)
            if response.status != 200:
                raise UpstreamRefused(f"the upstream answered {response.status}")
        except Exception as exc:
            log.warning("[retrieval] a continuation failed (%s); the stream so far is ended", exc)
            self.exchange.note("retrieval_error", type(exc).__name__)
            if response is not None:
                await response.aclose()
            return None
        return response

    async def stream(self, first: AsyncIterator[bytes], *, max_event_bytes: int) -> AsyncIterator[bytes]:
        """The client's stream: the first answer's events as they come, without the tool's calls, then each
        continuation's stitched in. However it ends (the client may leave), the archive is told."""
        try:
            async for out in self._stitched(first, max_event_bytes=max_event_bytes):
                yield out
        finally:
            self.finished()

    async def _stitched(self, first: AsyncIterator[bytes], *, max_event_bytes: int) -> AsyncIterator[bytes]:
        stitch = stitch_for(self.wire.spec.name)
        assert stitch is not None
        payload: Document | None = None
        chunks: AsyncIterator[bytes] = first
        as_came: dict[bytes, bytes] = {}  # the last events' bytes as they came, for those held back to the end
        while True:
            cut = Overflow()
            as_came.clear()
            async for out in stitched(chunks, stitch, max_event_bytes=max_event_bytes, overflow=cut, as_came=as_came):
                yield out
            if cut.happened:  # the rest went as it came: nothing more can be stitched
                return
            calls, others = stitch.calls()
            if not calls or others or self.rounds >= self.pipeline.retrieval_rounds(self.model):
                break
            payload = await self.continued(payload, stitch.answer(), calls)
            if payload is None:
                break
            response = await self.continuation(payload)
            if response is None:
                break
            stitch.next_round()
            chunks = guarded(response, self.host)
        for out in stitch.finish():
            yield as_came.get(out, out)
        self.noted()


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
