"""Relaying an upstream body to the client chunk by chunk, exactly as it arrives.

The relay is a plain ASGI callable rather than starlette's StreamingResponse because it must watch
for the client's disconnect while it waits on the upstream, and close the upstream response the
moment the client goes away. It knows nothing of chat: features that read the body (usage) wrap
the chunk iterator with `tap`; chunks already read (a retry decision) go first, through `tap`'s `first` or,
where nothing taps the body, `prepend`.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass

from starlette.types import Receive, Scope, Send

from inflight.http.disconnect import CancelledOnDisconnect, ClientGone, note_send_timeout
from inflight.http.exchange import Exchange
from inflight.upstream.exceptions import STREAM_ERRORS
from inflight.upstream.headers import RawHeaders, response_headers
from inflight.upstream.response import Response as UpstreamResponse

# Bytes relayed without a wait before the relay lets the loop run others: an upstream whose answer is all in, to a
# client whose buffers have room, would otherwise be sent up to the upstream reader's high-water mark in one go.
SLICE_BYTES = 256 * 1024


@dataclass(slots=True)
class Relay:
    status: int
    headers: RawHeaders
    chunks: AsyncIterator[bytes]
    close: Callable[[], Awaitable[None]]
    exchange: Exchange
    # False when the whole body is already here (most JSON answers): then it goes out in one message,
    # and no task need watch for a disconnect while the upstream is waited on.
    streaming: bool = True
    started: bool = False  # the status and headers went out already (`inflight.http.keepalive`)
    body: bytes | None = None  # the whole body, already taken from the upstream's answer (then `chunks` is unused)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        self.exchange.status = self.status
        if not self.streaming:
            await self.send_whole(scope, send)
            return
        try:
            async with CancelledOnDisconnect(scope, receive):  # even while a silent upstream is waited on
                await self.start(send)
                unyielded = 0
                async for chunk in self.chunks:
                    await send({"type": "http.response.body", "body": chunk, "more_body": True})
                    unyielded += len(chunk)
                    if unyielded >= SLICE_BYTES:  # chunks that were all in, sent to a client with room: let others run
                        await asyncio.sleep(0)
                        unyielded = 0
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        except ClientGone:  # nothing is left to do: the upstream response is closed below
            self.exchange.note("client_disconnected", 1)
        except STREAM_ERRORS as exc:
            # Headers are out; the only honest signal left is an incomplete response.
            self.exchange.note("upstream_stream_error", type(exc).__name__)
        except OSError:
            self.exchange.note("client_disconnected", 1)
        finally:
            await self._done(scope)

    async def send_whole(self, scope: Scope, send: Send) -> None:
        try:
            body = self.body if self.body is not None else b"".join([chunk async for chunk in self.chunks])
            await self.start(send)
            await send({"type": "http.response.body", "body": body, "more_body": False})
        except OSError:
            self.exchange.note("client_disconnected", 1)
        finally:
            await self._done(scope)

    async def _done(self, scope: Scope) -> None:
        """The upstream's answer closed and the request's log line written, however the relay ended. The chunks'
        iterator is closed first: one that reads more upstream (a read-back's continuation) closes its own then."""
        try:
            await closed(self.chunks)
        finally:
            try:
                await self.close()
            finally:
                note_send_timeout(scope, self.exchange)
                self.exchange.finish()

    async def start(self, send: Send) -> None:
        if not self.started:
            await send({"type": "http.response.start", "status": self.status, "headers": self.headers})


def relay(
    response: UpstreamResponse,
    exchange: Exchange,
    *,
    chunks: AsyncIterator[bytes] | None = None,
    body: bytes | None = None,
) -> Relay:
    """The response as the client gets it: its status, its headers plus the exchange's, its body (`body`: all of it,
    already read)."""
    return Relay(
        status=response.status,
        headers=response_headers(response.headers, exchange.headers, event_stream=response.event_stream),
        chunks=chunks if chunks is not None else response.aiter_raw(),
        close=response.aclose,
        exchange=exchange,
        streaming=body is None and not response.complete,
        body=body,
    )


async def closed(chunks: AsyncIterator[bytes]) -> None:
    """Close an iterator of chunks that is a generator now, not when the garbage collector finds it: an `async for`
    left early does not close what it read, so each one that wraps another closes it with this."""
    closing = getattr(chunks, "aclose", None)
    if closing is not None:
        with contextlib.suppress(RuntimeError, *STREAM_ERRORS):  # RuntimeError: it is running (it raised)
            await closing()


def prepend(first: Sequence[bytes], rest: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    """`first`, then `rest` (itself when nothing was read first: no iterator in between)."""
    return _chained(first, rest) if first else rest


async def _chained(first: Sequence[bytes], rest: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    for chunk in first:
        yield chunk
    async for chunk in rest:
        yield chunk


async def tap(
    chunks: AsyncIterator[bytes],
    on_chunk: Callable[[bytes], None],
    on_end: Callable[[], None],
    *,
    first: Sequence[bytes] = (),
) -> AsyncIterator[bytes]:
    """`first` (chunks read already), then `chunks`, each shown to `on_chunk` as it passes; `on_end` once the body is
    complete."""
    for chunk in first:
        yield chunk
        on_chunk(chunk)
    async for chunk in chunks:
        yield chunk
        on_chunk(chunk)
    on_end()
