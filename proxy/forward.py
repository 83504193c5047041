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

import httpcore
from starlette.types import Receive, Scope, Send

from proxy.config import Upstream as UpstreamSettings
from proxy.errors import upstream_errors
from proxy.pool import ConnectionPool, UpstreamResponse

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
    """The process's one upstream connection pool, and how requests are addressed to the upstream."""

    def __init__(self, settings: UpstreamSettings) -> None:
        self.base_url = settings.base_url
        parts = urlsplit(settings.base_url)
        self.host = parts.netloc
        self.api_key = settings.api_key
        self._scheme = parts.scheme.encode()
        self._hostname = (parts.hostname or "").encode("idna")
        self._port = parts.port or (443 if parts.scheme == "https" else 80)
        self._base_path = parts.path.rstrip("/")
        self.pool = ConnectionPool(max_connections=settings.max_connections)
        self.timeout = {
            "connect": settings.connect_timeout_s,
            "read": settings.read_timeout_s,
            "write": settings.read_timeout_s,
            "pool": settings.connect_timeout_s,
        }

    def url_for(self, v1_path: str, query: bytes = b"") -> httpcore.URL:
        """`/v1/x/y?q` -> `<base_url>/x/y?q`, path and query string kept byte for byte."""
        suffix = v1_path[len("/v1") :] if v1_path.startswith("/v1") else v1_path
        target = (self._base_path + suffix).encode("latin-1")
        if query:
            target += b"?" + query
        return httpcore.URL(scheme=self._scheme, host=self._hostname, port=self._port, target=target)

    def outgoing_headers(self, raw: Iterable[tuple[bytes, bytes]], *, rewrite_body: bool = False) -> RawHeaders:
        drop = {b"host"}
        if rewrite_body:
            # The body sent is not the client's: its length is recomputed, and it is not compressed.
            drop |= {b"content-length", b"content-encoding"}
        headers = filter_headers(raw, frozenset(drop))
        headers.insert(0, (b"host", self.host.encode("idna")))
        if self.api_key:
            headers = [(n, v) for n, v in headers if n != b"authorization"]
            headers.append((b"authorization", b"Bearer " + self.api_key.encode("latin-1")))
        return headers

    def credential_headers(self, raw: Iterable[tuple[bytes, bytes]]) -> RawHeaders:
        """Only who the client is (for requests the proxy makes on its own, like model discovery)."""
        keep = {b"authorization", b"openai-organization", b"openai-project", b"api-key"}
        client = [(name, value) for name, value in filter_headers(raw) if name in keep]
        return self.outgoing_headers(client)

    async def fetch(self, v1_path: str, *, headers: RawHeaders) -> tuple[int, bytes]:
        """GET a small resource from the upstream and read it whole."""
        response = await self.open("GET", self.url_for(v1_path), headers=headers, content=None)
        try:
            async with upstream_errors(self.host):
                return response.status, await response.aread()
        finally:
            await response.aclose()

    async def open(
        self,
        method: str,
        url: httpcore.URL,
        *,
        headers: RawHeaders,
        content: bytes | AsyncIterator[bytes] | None,
    ) -> UpstreamResponse:
        """Send and return the response with its body still unread (the caller must `aclose()` it)."""
        if isinstance(content, bytes) and not any(name == b"content-length" for name, _ in headers):
            headers = [*headers, (b"content-length", str(len(content)).encode())]
        async with upstream_errors(self.host):
            return await self.pool.request(method.encode(), url, headers=headers, content=content, timeout=self.timeout)

    async def aclose(self) -> None:
        await self.pool.aclose()


def response_headers(response: UpstreamResponse, extra: dict[str, str] | None = None) -> RawHeaders:
    headers = filter_headers(response.headers)
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
        except (httpcore.NetworkError, httpcore.ProtocolError, httpcore.TimeoutException) as exc:
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
    response: UpstreamResponse,
    timing: Timing,
    *,
    extra_headers: dict[str, str] | None = None,
    held: list[bytes] | None = None,
    chunks: AsyncIterator[bytes] | None = None,
    observe: Callable[[bytes], None] | None = None,
    on_complete: Callable[[], None] | None = None,
) -> Relay:
    return Relay(
        status=response.status,
        headers=response_headers(response, extra_headers),
        chunks=chunks if chunks is not None else response.aiter_raw(),
        close=response.aclose,
        timing=timing,
        held=held or [],
        observe=observe,
        on_complete=on_complete,
    )
