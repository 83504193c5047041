"""One HTTP/1.1 connection to the upstream: an asyncio protocol, responses parsed by httptools (llhttp).

Why not httpcore: a proxied request that needs no compaction spent more than half of the proxy's
time in httpcore, h11 and anyio (cancel scopes, locks, a pure-Python parser): about 0.3 ms of
the 0.6-0.8 ms it added on loopback. A proxy talks HTTP/1.1 to one origin and relays bytes, so a
protocol object that writes the request, parses the response with the C parser uvicorn already
uses, and hands body chunks to the relay as they come is all it needs.

The protocol knows at once when the upstream closes an idle connection (`connection_lost`), so a
dead keep-alive connection is never handed out.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
from collections.abc import AsyncIterator, Callable
from typing import cast

from inflight.frozen import frozen
from inflight.upstream.exceptions import ConnectError, ConnectTimeout, WriteError, WriteTimeout
from inflight.upstream.headers import RawHeaders
from inflight.upstream.reader import DEFAULT_MAX_HEADER_BYTES, ResponseReader
from inflight.upstream.response import Response

IDEMPOTENT = frozenset({b"GET", b"HEAD", b"OPTIONS", b"TRACE", b"PUT", b"DELETE"})  # RFC 9110 §9.2.2

INLINE_BODY_BYTES = 64 * 1024  # a body up to this goes out in one write with its head
# A bigger one goes out in slices this size, each in a turn of the loop of its own, once the last has drained:
# written whole, what the socket did not take at once was copied into the transport's buffer (Python 3.11: a
# bytearray), and a 15 MB body held the loop for 20 ms; slices written in one turn, the kernel's copies of
# megabytes still held it for milliseconds.
BODY_SLICE_BYTES = 256 * 1024


@frozen
class Outgoing:
    """A request as it goes upstream: the target is the path and query string, the headers are final."""

    method: bytes
    target: bytes
    headers: RawHeaders
    content: bytes | AsyncIterator[bytes] | None

    def replayable(self, *, wrote: bool) -> bool:
        """Whether this request may go out again on another connection after a stale one failed.

        Only when the body can be sent again (a stream is consumed as it goes), and, for a method that
        is not idempotent (POST, PATCH), only when no byte of it was written: an upstream that read a
        chat request may be generating (and billing) it.
        """
        if not (self.content is None or isinstance(self.content, bytes)):
            return False
        return not wrote or self.method in IDEMPOTENT


async def open_connection(
    host: str,
    port: int,
    *,
    tls: ssl.SSLContext | None,
    timeout: float,
    keepalive_expiry_s: float,
    max_header_bytes: int = DEFAULT_MAX_HEADER_BYTES,
) -> Connection:
    loop = asyncio.get_running_loop()
    try:
        async with asyncio.timeout(timeout):
            _, connection = await loop.create_connection(
                lambda: Connection(loop, keepalive_expiry_s, max_header_bytes=max_header_bytes),
                host,
                port,
                ssl=tls,
                server_hostname=host if tls else None,
            )
    except TimeoutError as exc:
        raise ConnectTimeout(f"connecting to {host}:{port} timed out") from exc
    except (OSError, ssl.SSLError) as exc:
        raise ConnectError(f"cannot connect to {host}:{port}: {exc}") from exc
    return connection


def request_head(outgoing: Outgoing) -> list[bytes]:
    """The request line and headers, as pieces to join."""
    head = [outgoing.method, b" ", outgoing.target, b" HTTP/1.1\r\n"]
    for name, value in outgoing.headers:
        head += [name, b": ", value, b"\r\n"]
    head.append(b"\r\n")
    return head


class Connection(asyncio.Protocol):
    """A keep-alive connection: one request at a time; reusable once a response was read whole."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        keepalive_expiry_s: float,
        *,
        max_header_bytes: int = DEFAULT_MAX_HEADER_BYTES,
    ) -> None:
        # Kept rather than asked each time: asking the running loop costs a system call (a check for a fork).
        self.loop = loop
        self.keepalive_expiry_s = keepalive_expiry_s
        self.max_header_bytes = max_header_bytes  # a response's head, past which the request fails
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.requests = 0  # requests sent on this connection, so the pool knows a reused one
        self.wrote = False  # whether any byte of the current request reached the transport
        self.idle_since = 0.0
        self._response: Response | None = None
        self._reader: ResponseReader | None = None
        self._write_paused = False
        self._drained: asyncio.Future[None] | None = None
        self._lost: asyncio.Future[None]  # done when the transport is gone; made with the connection
        self._reading_paused = False
        self.on_release: Callable[[Connection], None] | None = None  # told when a response is closed

    def usable(self) -> bool:
        """Idle, open and not past its keep-alive expiry."""
        if self.closed or self._response is not None or self.transport is None:
            return False
        return self.loop.time() - self.idle_since < self.keepalive_expiry_s

    async def request(self, outgoing: Outgoing, *, read_timeout: float | None, write_timeout: float | None) -> Response:
        """Send the request and wait for the response headers; the body is read from the response."""
        self.wrote = False  # no byte of this request handed to the socket yet: safe to send elsewhere
        if self.closed or self.transport is None:
            raise WriteError("the connection is closed")
        response = self._response = Response(self, read_timeout)
        self.requests += 1
        self._reader = ResponseReader(response, head=outgoing.method == b"HEAD", max_header_bytes=self.max_header_bytes)
        content = outgoing.content
        head = request_head(outgoing)
        chunked = any(name == b"transfer-encoding" and b"chunked" in value.lower() for name, value in outgoing.headers)
        if isinstance(content, bytes) and len(content) <= INLINE_BODY_BYTES:
            head.append(content)
        self.transport.write(b"".join(head))
        self.wrote = True
        try:
            if isinstance(content, bytes) and len(content) > INLINE_BODY_BYTES:
                await self._write_sliced(content, timeout=write_timeout)  # not joined to the head: no copy of it
            elif content is not None and not isinstance(content, bytes):
                await self._write_stream(content, chunked=chunked, timeout=write_timeout)
            await self._drain(write_timeout)
        except WriteError:
            if not response.status:
                raise
            # The upstream answered before it took the whole body (a 413, a 401) and closed: its answer stands.
        await response.wait_for_headers()
        return response

    async def _write_sliced(self, content: bytes, *, timeout: float | None) -> None:
        view = memoryview(content)
        for start in range(0, len(view), BODY_SLICE_BYTES):
            if start:
                await asyncio.sleep(0)  # the loop's other work between two slices
            if self.closed or self.transport is None:
                raise WriteError("the upstream closed the connection while the request body was sent")
            self.transport.write(view[start : start + BODY_SLICE_BYTES])
            await self._drain(timeout)

    async def _write_stream(self, content: AsyncIterator[bytes], *, chunked: bool, timeout: float | None) -> None:
        async for chunk in content:
            if self.closed or self.transport is None:
                raise WriteError("the upstream closed the connection while the request body was sent")
            if chunk:
                self.transport.write(b"%x\r\n%b\r\n" % (len(chunk), chunk) if chunked else chunk)
                await self._drain(timeout)
        if chunked and self.transport is not None:
            self.transport.write(b"0\r\n\r\n")

    async def _drain(self, timeout: float | None) -> None:
        if self.closed:
            raise WriteError("the upstream closed the connection")
        if not self._write_paused:
            return
        self._drained = self.loop.create_future()
        try:
            async with asyncio.timeout(timeout):
                await self._drained
        except TimeoutError as exc:
            raise WriteTimeout("the upstream stopped reading the request") from exc

    def response_closed(self, response: Response) -> None:
        """The caller is done with `response`: keep the connection if it was read whole, else drop it."""
        if self._response is not response:
            return
        self._response = None
        reader, self._reader = self._reader, None
        reusable = reader is not None and reader.keep_alive and not self._reading_paused
        if reader is not None:
            reader.release()
        if response.complete and reusable and not self.closed:
            self.idle_since = self.loop.time()
        else:
            self.close()
        if self.on_release is not None:
            self.on_release(self)

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()

    async def aclose(self, timeout: float = 1.0) -> None:
        """Close and wait until the transport is gone (a TLS close sends close_notify first)."""
        self.close()
        if self.transport is None or self._lost.done():
            return
        try:
            async with asyncio.timeout(timeout):
                await asyncio.shield(self._lost)
        except TimeoutError:
            self.transport.abort()

    def pause_reading(self) -> None:
        if self.transport is not None and not self._reading_paused:
            self._reading_paused = True
            self.transport.pause_reading()

    def resume_reading(self) -> None:
        if self.transport is not None and self._reading_paused and not self.closed:
            self._reading_paused = False
            self.transport.resume_reading()

    # --- asyncio.Protocol -------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._lost = self.loop.create_future()
        self.transport = cast(asyncio.Transport, transport)  # uvloop's transports do not subclass asyncio's
        self.idle_since = self.loop.time()
        sock = transport.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def data_received(self, data: bytes) -> None:
        reader = self._reader
        if self._response is None or reader is None:
            self.close()  # bytes while idle: the upstream is not speaking HTTP/1.1 keep-alive as we know it
            return
        if not reader.feed(data) or (reader.response.complete and not reader.keep_alive):
            self.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if not self._lost.done():
            self._lost.set_result(None)
        if self._drained is not None and not self._drained.done():
            self._drained.set_result(None)
        if self._response is not None and self._reader is not None:
            self._reader.connection_lost(exc)

    def pause_writing(self) -> None:
        self._write_paused = True

    def resume_writing(self) -> None:
        self._write_paused = False
        if self._drained is not None and not self._drained.done():
            self._drained.set_result(None)
