"""Reading just enough of a response to tell whether it is a context-length refusal worth a retry.

An error body is read whole (bounded); a stream up to its first event that tells (the wire format
passes over the ones that do not: the Responses API announces a response before it fails it). What was read is kept and
relayed first when the response is not a refusal, so the client still gets every byte.

A stream is held for at most `max_event_bytes` (`limits.max_event_bytes`): an upstream whose first line
is 300 MB with no newline, or that sends comments forever, is then relayed as it comes, and that
request is not retried.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass

from inflight.codecs.sse import EventBuffer
from inflight.formats import WireFormat
from inflight.policy.refusals import MAX_BODY as MAX_ERROR_BODY
from inflight.policy.refusals import Refusal
from inflight.upstream.exceptions import UpstreamErrors
from inflight.upstream.response import Response as UpstreamResponse


@dataclass
class Held:
    """What was read of a response before deciding whether to retry it; the relay sends it first."""

    chunks: list[bytes]
    rest: AsyncIterator[bytes]
    refusal: Refusal | None = None


def may_refuse(status: int, *, event_stream: bool) -> bool:
    """Whether an answer can hold a refusal at all: an error body, or a stream the client asked for. Any other
    answer is relayed without being held."""
    return status >= 400 or event_stream


async def hold_until_known(
    response: UpstreamResponse,
    wire: WireFormat,
    *,
    event_stream: bool,
    host: str,
    max_event_bytes: int = 1024 * 1024,
) -> Held:
    """Read an error body whole, or a stream up to its first event; `wire` says whether it is a refusal.
    A 2xx JSON body is never held, nor a stream past `max_event_bytes` without an event that tells."""
    rest = response.aiter_raw()
    chunks: list[bytes] = []
    encoding = response.content_encoding
    if response.status >= 400:
        size = 0
        with UpstreamErrors(host):
            async for chunk in rest:
                chunks.append(chunk)
                size += len(chunk)
                if size > MAX_ERROR_BODY:
                    return Held(chunks, rest)
        body = b"".join(chunks)
        return Held(chunks, rest, wire.refusal(response.status, body, content_encoding=encoding))
    if response.status != 200 or not event_stream or not response.event_stream or encoding:
        return Held(chunks, rest)
    events = EventBuffer()
    held = 0
    passed = False  # events that said nothing yet (the Responses API's `response.created`) went by
    with UpstreamErrors(host):
        async for chunk in rest:
            chunks.append(chunk)
            events.add(chunk)
            while (event := events.next_event()) is not None:
                if not wire.stream_pending(event):
                    return Held(chunks, rest, wire.stream_refusal(event))
                passed = True
            held += len(chunk)
            if held > max_event_bytes:
                return Held(chunks, rest)  # no event that tells within the bound: relayed as it is
    pending = events.pending
    if not pending.strip() and not passed:
        # llama-cpp-python answers an overlong streaming request with 200 and a stream with no event at all.
        return Held(chunks, rest, Refusal("llama-cpp-python-stream"))
    return Held(chunks, rest, wire.stream_refusal(pending))
