"""Reading a request body within `limits.max_body_bytes`: as it arrives, and again as it is decompressed.

Memory never holds more than the limit of one body: a declared Content-Length over it is refused
before a byte is read, a body that grows past it while streaming is cut off, and decompression
stops as soon as the output passes it (a 1 MB gzip bomb costs at most the limit, not gigabytes).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from starlette.requests import ClientDisconnect, Request
from starlette.types import Receive

from inflight.codecs.inflate import InflatedTooLarge, InflateError, encoding_name, inflate, is_identity, is_inflatable
from inflight.config import Limits
from inflight.errors import BadRequest, ClientTimeout, RequestTooLarge
from inflight.http.disconnect import DISCONNECT, Disconnect
from inflight.upstream.headers import header_value


def too_large(limit: int) -> RequestTooLarge:
    return RequestTooLarge(f"request body is larger than this proxy accepts ({limit:,} bytes; limits.max_body_bytes)")


def declared_length(request: Request, limit: int) -> int | None:
    raw = header_value(request.scope["headers"], b"content-length")  # the raw headers: no header map made for one
    if raw is None:
        return None
    value = raw.decode("latin-1")
    if not value.strip().isdigit():
        raise BadRequest(f"invalid Content-Length {value!r}")
    if int(value) > limit:
        raise too_large(limit)
    return int(value)


async def read_limited(request: Request, limits: Limits) -> list[bytes]:
    """The whole body, as the chunks it came in (joined by the caller: in a thread, when it is big);
    refused with 413 once it passes the size limit, 408 once it takes too long."""
    declared_length(request, limits.max_body_bytes)
    connection = request.scope.get(DISCONNECT)
    if isinstance(connection, Disconnect) and connection.body_in:  # read by our connection already: nothing to wait
        return await received(request.receive, limits.max_body_bytes)
    try:
        async with asyncio.timeout(limits.client_body_timeout_s):  # one clock for the whole read
            return await received(request.receive, limits.max_body_bytes)
    except TimeoutError:
        raise body_timeout(limits) from None


async def received(receive: Receive, limit: int) -> list[bytes]:
    """The body's chunks as the server hands them over, read from `receive` itself: no iterator in between, as
    every conversation request is read this way."""
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientDisconnect()
        if message["type"] != "http.request":  # nothing ASGI defines: passed over, as starlette's reader does
            continue
        chunk = message.get("body", b"")
        if chunk:
            size += len(chunk)
            if size > limit:
                raise too_large(limit)
            chunks.append(chunk)
        if not message.get("more_body", False):
            return chunks


async def stream_limited(request: Request, limits: Limits) -> AsyncIterator[bytes]:
    """The body chunk by chunk, for a request forwarded as it arrives; 413 past the size, 408 past the time.

    The time is one deadline for the whole body (`limits.client_body_timeout_s`), not a wait per chunk:
    a client sending a byte at a time cannot keep the request open by staying just under a per-read limit.
    """
    deadline = asyncio.get_running_loop().time() + limits.client_body_timeout_s
    chunks = sized(request.stream(), limits.max_body_bytes)
    while True:
        try:
            async with asyncio.timeout_at(deadline):
                chunk = await anext(chunks)
        except StopAsyncIteration:
            return
        except TimeoutError:
            raise body_timeout(limits) from None
        yield chunk


async def sized(chunks: AsyncIterator[bytes], limit: int) -> AsyncIterator[bytes]:
    size = 0
    async for chunk in chunks:
        size += len(chunk)
        if size > limit:
            raise too_large(limit)
        yield chunk


def body_timeout(limits: Limits) -> ClientTimeout:
    return ClientTimeout(
        f"request body not received within {limits.client_body_timeout_s:g} s (limits.client_body_timeout_s)"
    )


def decompress(raw: bytes, content_encoding: str, limit: int) -> bytes:
    """Undo the request's Content-Encoding (gzip, deflate or none), never producing more than `limit`."""
    if is_identity(content_encoding):
        return raw
    if not is_inflatable(content_encoding):
        raise BadRequest(f"unsupported request Content-Encoding {content_encoding!r} (use gzip, deflate or none)")
    try:
        return inflate(raw, content_encoding, limit=limit)
    except InflatedTooLarge:
        raise too_large(limit) from None
    except InflateError as exc:
        raise BadRequest(f"request body is not valid {encoding_name(content_encoding)} data: {exc}") from exc
