"""Pass-through of any /v1 request: header hygiene, the shared upstream client, the byte relay.

Nothing here parses a body. The relay is a plain ASGI callable rather than starlette's
StreamingResponse because it must watch for the client's disconnect while it waits on the
upstream, and close the upstream response the moment the client goes away.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from urllib.parse import urlsplit

import httpx
from cachetools import LRUCache
from starlette.types import Receive, Scope, Send

from proxy.config import Upstream as UpstreamSettings
from proxy.errors import upstream_errors

log = logging.getLogger("inflight")

RawHeaders = list[tuple[bytes, bytes]]

# RFC 9110 §7.6.1 plus the legacy ones that proxies must not forward.
HOP_BY_HOP = frozenset(
    {
        b"connection",
        b"keep-alive",
        b"proxy-connection",
        b"proxy-authenticate",
        b"proxy-authorization",
        b"te",
        b"trailer",
        b"transfer-encoding",
        b"upgrade",
    }
)


def filter_headers(raw: Iterable[tuple[bytes, bytes]], drop: frozenset[bytes] = frozenset()) -> RawHeaders:
    """Drop hop-by-hop headers, those named by `Connection`, and `drop` (all lower-case names)."""
    pairs = [(name.lower(), value) for name, value in raw]
    named = {
        token.strip().lower()
        for name, value in pairs
        if name == b"connection"
        for token in value.split(b",")
        if token.strip()
    }
    return [(name, value) for name, value in pairs if name not in HOP_BY_HOP and name not in named and name not in drop]


def header_value(raw: Iterable[tuple[bytes, bytes]], name: bytes) -> bytes | None:
    for key, value in raw:
        if key.lower() == name:
            return value
    return None


@dataclass
class Timing:
    """What the per-request log line reports; filled in as the request goes."""

    method: str
    path: str
    started: float = field(default_factory=time.perf_counter)
    model: str = "-"
    status: int = 0
    upstream_ms: float | None = None
    notes: list[str] = field(default_factory=list)

    def upstream_answered(self) -> None:
        self.upstream_ms = (time.perf_counter() - self.started) * 1000

    def emit(self) -> None:
        total_ms = (time.perf_counter() - self.started) * 1000
        upstream = f"{self.upstream_ms:.1f}" if self.upstream_ms is not None else "-"
        extra = (" " + " ".join(self.notes)) if self.notes else ""
        log.info(
            "%s %s %d model=%s upstream_ms=%s total_ms=%.1f%s",
            self.method,
            self.path,
            self.status,
            self.model,
            upstream,
            total_ms,
            extra,
        )


class UpstreamClient:
    """The one shared upstream connection pool of a process, and how requests are addressed to it.

    Requests go straight to an `httpx.AsyncHTTPTransport`: a proxy needs none of the client
    layer (cookies, redirects, auth flows, default headers), and skipping it halves our overhead.
    """

    def __init__(self, settings: UpstreamSettings, *, transport: httpx.AsyncBaseTransport | None = None) -> None:
        self.base_url = settings.base_url
        self.host = urlsplit(settings.base_url).netloc
        self.api_key = settings.api_key
        limits = httpx.Limits(
            max_connections=settings.max_connections, max_keepalive_connections=settings.max_connections
        )
        # No proxy from the environment: an HTTP(S)_PROXY meant for the agent's tools must not reroute us.
        self.transport = transport or httpx.AsyncHTTPTransport(limits=limits, trust_env=False)
        self.timeout = httpx.Timeout(
            connect=settings.connect_timeout_s,
            read=settings.read_timeout_s,
            write=settings.read_timeout_s,
            pool=settings.connect_timeout_s,
        ).as_dict()
        self._urls: LRUCache[tuple[str, bytes], httpx.URL] = LRUCache(maxsize=256)

    def url_for(self, v1_path: str, query: bytes = b"") -> httpx.URL:
        """`/v1/x/y?q` -> `<base_url>/x/y?q`, query string kept byte for byte; parsed once per distinct URL."""
        url = self._urls.get((v1_path, query))
        if url is None:
            suffix = v1_path[len("/v1") :] if v1_path.startswith("/v1") else v1_path
            text = self.base_url + suffix
            url = httpx.URL(f"{text}?{query.decode('latin-1')}" if query else text)
            self._urls[(v1_path, query)] = url
        return url

    def outgoing_headers(self, raw: Iterable[tuple[bytes, bytes]], *, rewrite_body: bool = False) -> RawHeaders:
        drop = {b"host"}
        if rewrite_body:
            # The body sent is not the client's: its length is recomputed, and it is not compressed.
            drop |= {b"content-length", b"content-encoding"}
        headers = filter_headers(raw, frozenset(drop))
        if self.api_key:
            headers = [(n, v) for n, v in headers if n != b"authorization"]
            headers.append((b"authorization", b"Bearer " + self.api_key.encode("latin-1")))
        return headers

    async def open(
        self,
        method: str,
        url: httpx.URL,
        *,
        headers: RawHeaders,
        content: bytes | AsyncIterator[bytes] | None,
    ) -> httpx.Response:
        """Send and return the response with its body still unread (the caller must close it)."""
        request = httpx.Request(method, url, headers=headers, content=content, extensions={"timeout": self.timeout})
        async with upstream_errors(self.host):
            response = await self.transport.handle_async_request(request)
        response.request = request
        return response

    async def aclose(self) -> None:
        await self.transport.aclose()


def response_headers(response: httpx.Response, extra: dict[str, str] | None = None) -> RawHeaders:
    headers = filter_headers(response.headers.raw)
    content_type = header_value(headers, b"content-type") or b""
    if content_type.startswith(b"text/event-stream"):
        # Stop nginx-style buffering between us and the client from batching SSE events.
        headers.append((b"x-accel-buffering", b"no"))
    for name, value in (extra or {}).items():
        headers.append((name.lower().encode("latin-1"), value.encode("latin-1")))
    return headers


@dataclass
class Relay:
    """An ASGI response that relays an upstream body chunk by chunk, exactly as it arrives.

    `held` are chunks already read from `chunks` (a retry decision may have needed them); they go
    out first. `observe` sees every chunk after it is sent, for the features that read usage.
    """

    status: int
    headers: RawHeaders
    chunks: AsyncIterator[bytes]
    close: Callable[[], Awaitable[None]]
    timing: Timing
    held: list[bytes] = field(default_factory=list)
    observe: Callable[[bytes], None] | None = None
    on_complete: Callable[[], None] | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        self.timing.status = self.status
        task = asyncio.current_task()
        assert task is not None
        state = _RelayState()
        watcher = asyncio.ensure_future(self._watch_disconnect(receive, task, state))
        try:
            await send({"type": "http.response.start", "status": self.status, "headers": self.headers})
            for chunk in self.held:
                await self._send_chunk(send, chunk)
            async for chunk in self.chunks:
                await self._send_chunk(send, chunk)
            state.finished = True
            await send({"type": "http.response.body", "body": b"", "more_body": False})
            state.completed = True
        except asyncio.CancelledError:
            if not state.client_gone:
                raise
            task.uncancel()  # our own cancellation: the client went away, nothing is left to do
        except (httpx.TransportError, httpx.StreamError) as exc:
            # Headers are out; the only honest signal left is an incomplete response.
            self.timing.notes.append(f"upstream_stream_error={type(exc).__name__}")
        except OSError:
            self.timing.notes.append("client_disconnected")
        finally:
            state.finished = True
            watcher.cancel()
            await self.close()
            if state.completed and self.on_complete is not None:
                self.on_complete()
            self.timing.emit()

    async def _send_chunk(self, send: Send, chunk: bytes) -> None:
        await send({"type": "http.response.body", "body": chunk, "more_body": True})
        if self.observe is not None:
            self.observe(chunk)

    async def _watch_disconnect(self, receive: Receive, task: asyncio.Task[None], state: _RelayState) -> None:
        """Cancel the relay the moment the client disconnects, even while it waits on a silent upstream."""
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                if not state.finished:
                    state.client_gone = True
                    self.timing.notes.append("client_disconnected")
                    task.cancel()
                return


@dataclass
class _RelayState:
    finished: bool = False
    completed: bool = False
    client_gone: bool = False


def relay_response(
    response: httpx.Response,
    timing: Timing,
    *,
    extra_headers: dict[str, str] | None = None,
    held: list[bytes] | None = None,
    chunks: AsyncIterator[bytes] | None = None,
    observe: Callable[[bytes], None] | None = None,
    on_complete: Callable[[], None] | None = None,
) -> Relay:
    return Relay(
        status=response.status_code,
        headers=response_headers(response, extra_headers),
        chunks=chunks if chunks is not None else response.aiter_raw(),
        close=response.aclose,
        timing=timing,
        held=held or [],
        observe=observe,
        on_complete=on_complete,
    )
