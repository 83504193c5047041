"""An upstream response as it arrives: status and headers, then body chunks handed to the relay.

The body is buffered only as far as the relay lags behind; past HIGH_WATER the connection stops
reading the socket, so a slow client slows the upstream instead of filling the proxy's memory.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterator
from typing import Protocol

from inflight.upstream.exceptions import ReadTimeout
from inflight.upstream.headers import RawHeaders

HIGH_WATER = 1024 * 1024  # buffered body bytes at which the upstream socket stops being read
LOW_WATER = 256 * 1024


class Owner(Protocol):
    """The connection a response arrives on."""

    loop: asyncio.AbstractEventLoop

    def pause_reading(self) -> None: ...

    def resume_reading(self) -> None: ...

    def response_closed(self, response: Response) -> None: ...


class Response:
    """An upstream response whose body arrives chunk by chunk; `aclose()` must be called."""

    def __init__(self, connection: Owner, read_timeout: float | None) -> None:
        self.connection = connection
        self.read_timeout = read_timeout
        self.status = 0
        self.headers: RawHeaders = []
        # Read once from the headers, as the hold, the relay and the usage reader each ask.
        self.event_stream = False  # `Content-Type: text/event-stream`
        self.content_encoding: bytes | None = None  # the `Content-Encoding` header's value, if any
        self.complete = False  # the whole body was received
        self.error: Exception | None = None
        self._chunks: deque[bytes] = deque()
        self._buffered = 0
        self._headers_ready = connection.loop.create_future()
        self._wakeup: asyncio.Future[None] | None = None

    async def wait_for_headers(self) -> None:
        await waited(self._headers_ready, self.read_timeout, "the upstream sent no response headers in time")

    async def aiter_raw(self) -> AsyncIterator[bytes]:
        """The body as it came off the wire (still content-encoded, no transfer encoding)."""
        while True:
            if self._chunks:
                chunk = self._chunks.popleft()
                self._buffered -= len(chunk)
                if self._buffered < LOW_WATER:
                    self.connection.resume_reading()
                yield chunk
                continue
            if self.error is not None:
                raise self.error
            if self.complete:
                return
            self._wakeup = self.connection.loop.create_future()
            await waited(self._wakeup, self.read_timeout, "the upstream went silent mid-body")

    def whole_body(self) -> bytes | None:
        """The whole body at once if all of it is in (most JSON answers), taken from the response; else None."""
        if not self.complete or self.error is not None:
            return None
        body = b"".join(self._chunks)
        self._chunks.clear()
        if self._buffered >= LOW_WATER:
            self.connection.resume_reading()
        self._buffered = 0
        return body

    async def aread(self) -> bytes:
        return b"".join([chunk async for chunk in self.aiter_raw()])

    async def aclose(self) -> None:
        self.connection.response_closed(self)

    # --- fed by the connection --------------------------------------------------------------

    def headers_received(self, status: int, headers: RawHeaders) -> None:
        self.status, self.headers = status, headers
        content_type = encoding = None  # the first of each, as `header_value` reads them
        for name, value in headers:
            lowered = name.lower()
            if lowered == b"content-type" and content_type is None:
                content_type = value
            elif lowered == b"content-encoding" and encoding is None:
                encoding = value
        self.event_stream = content_type is not None and content_type.startswith(b"text/event-stream")
        self.content_encoding = encoding
        if not self._headers_ready.done():
            self._headers_ready.set_result(None)

    def body_received(self, chunk: bytes) -> None:
        self._chunks.append(chunk)
        self._buffered += len(chunk)
        if self._buffered > HIGH_WATER:
            self.connection.pause_reading()
        self._wake()

    def finished(self, error: Exception | None = None) -> None:
        if error is None:
            self.complete = True
        elif not self.complete and self.error is None:
            self.error = error
            if not self._headers_ready.done():
                self._headers_ready.set_exception(error)
                self._headers_ready.exception()  # retrieved here, so an abandoned wait logs nothing
        self._wake()

    def _wake(self) -> None:
        if self._wakeup is not None and not self._wakeup.done():
            self._wakeup.set_result(None)


async def waited(future: asyncio.Future[None], timeout: float | None, silence: str) -> None:
    """`future`'s result, or `ReadTimeout(silence)` once `timeout` has passed without it.

    A timer of the loop's rather than `asyncio.timeout` (a context, and a cancellation of the task to undo):
    a stream waits once for each of its chunks."""
    if timeout is None or future.done():
        await future
        return
    timer = future.get_loop().call_later(timeout, _time_out, future, silence)
    try:
        await future
    finally:
        timer.cancel()


def _time_out(future: asyncio.Future[None], silence: str) -> None:
    if not future.done():
        future.set_exception(ReadTimeout(silence))
