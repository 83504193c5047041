"""An upstream origin: where a `/v1` path goes, with which headers, over its connection pool.

The one HTTP stack: forwarded requests, model discovery and summarizer calls all go through an
`UpstreamClient` (a summarizer at another `summarize.base_url` has a client of its own).
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator, Iterable
from urllib.parse import urlsplit

from inflight.config import Upstream as UpstreamSettings
from inflight.errors import UpstreamTimeout, UpstreamUnreachable
from inflight.upstream.connection import Outgoing
from inflight.upstream.exceptions import UpstreamErrors
from inflight.upstream.headers import IDENTITY_HEADERS, RawHeaders, filter_headers, key_headers, request_headers
from inflight.upstream.pool import ConnectionPool, Timeouts
from inflight.upstream.reader import ResponseHeadersTooLarge
from inflight.upstream.response import Response

VERSION_SEGMENT = re.compile(r"v\d+(?:alpha|beta)?\d*")  # `/v1`, `/v1beta`: a base URL that names an API version


class UpstreamClient:
    """`key_header`: how this upstream takes the proxy's key (`upstream.auth`, else the format's way).
    `client_keys`: the headers that carry a client's key (the wire formats'), which the proxy's own replaces.
    `max_header_bytes`: how large a response's head may be (`limits.max_upstream_header_bytes`): past it
    the request fails with a 502 and nothing of the answer is relayed."""

    def __init__(
        self,
        settings: UpstreamSettings,
        *,
        key_header: bytes = b"authorization",
        client_keys: frozenset[bytes] = frozenset(),
        max_header_bytes: int = 64 * 1024,
    ) -> None:
        parts = urlsplit(settings.base_url)
        self.base_url = settings.base_url
        self.host = parts.netloc
        self.api_key = settings.api_key
        self.basic_auth = settings.basic_auth
        self.key_header = {"bearer": b"authorization", "x-api-key": b"x-api-key"}.get(settings.auth or "", key_header)
        self.client_keys = client_keys | {b"authorization", self.key_header}
        self._host_header = self.host.encode("idna")
        self._base_path = parts.path.rstrip("/").encode("utf-8")
        self.pool = ConnectionPool(
            scheme=parts.scheme,
            host=parts.hostname or "",
            port=parts.port or (443 if parts.scheme == "https" else 80),
            max_connections=settings.max_connections,
            max_header_bytes=max_header_bytes,
        )
        self.timeouts = Timeouts(
            connect=settings.connect_timeout_s,
            read=settings.read_timeout_s,
            write=settings.read_timeout_s,
            pool=settings.connect_timeout_s,
        )

    def target_for(self, path: bytes, query: bytes = b"") -> bytes:
        """`/v1/x/y?q` -> `<base_url path>/x/y?q` (`upstream.base_url` ends in `/v1` by convention), path and
        query string kept byte for byte. Only a whole `/v1` segment goes: `/v1beta/...` is kept as it is."""
        whole = path == b"/v1" or path.startswith(b"/v1/")
        suffix = path[len(b"/v1") :] if whole else path
        target = self._base_path + suffix
        return target + b"?" + query if query else target

    def headers_for(self, raw: Iterable[tuple[bytes, bytes]], *, rewrite_body: bool = False) -> RawHeaders:
        return request_headers(
            raw,
            host=self._host_header,
            api_key=self.api_key,
            basic_auth=self.basic_auth,
            key_header=self.key_header,
            client_keys=self.client_keys,
            rewrite_body=rewrite_body,
        )

    def own_credentials(self) -> RawHeaders:
        """The proxy's key for this upstream, as it takes it ([]: the proxy holds none)."""
        return key_headers(self.api_key, self.basic_auth, self.key_header)

    def credential_headers(self, raw: Iterable[tuple[bytes, bytes]]) -> RawHeaders:
        """Only who the client is (for requests the proxy makes on its own, like model discovery)."""
        who = IDENTITY_HEADERS | self.client_keys
        return self.headers_for([(name, value) for name, value in filter_headers(raw) if name in who])

    async def fetch(self, v1_path: str, *, headers: RawHeaders) -> tuple[int, bytes]:
        """GET a small resource from the upstream and read it whole."""
        response = await self.open("GET", self.target_for(v1_path.encode()), headers=headers, content=None)
        return await self.read_whole(response)

    async def send_whole(
        self,
        method: str,
        v1_path: str,
        *,
        headers: RawHeaders,
        content: bytes | None,
        timeout_s: float,
        max_bytes: int | None = None,
    ) -> tuple[int, bytes]:
        """A request the proxy makes on its own (a summary): exactly `headers` plus `Host`, the answer read
        whole. `timeout_s` bounds each phase (connecting, waiting for a connection, writing, each read)
        and the whole exchange (`UpstreamTimeout` past it); `max_bytes`, the answer (`UpstreamUnreachable`
        past it: what it says is not read)."""
        own = [(b"host", self._host_header), (b"accept-encoding", b"identity"), *headers]
        timeouts = Timeouts(connect=timeout_s, read=timeout_s, write=timeout_s, pool=timeout_s)
        target = self.target_for(v1_path.encode())
        try:
            async with asyncio.timeout(timeout_s):
                response = await self.open(method, target, headers=own, content=content, timeouts=timeouts)
                return await self.read_whole(response, max_bytes=max_bytes)
        except TimeoutError as exc:
            raise UpstreamTimeout(f"upstream {self.host} gave no whole answer within {timeout_s:g} s") from exc

    async def read_whole(self, response: Response, *, max_bytes: int | None = None) -> tuple[int, bytes]:
        """The response's status and whole body (at most `max_bytes` of it, else `UpstreamUnreachable`); the
        response closed."""
        try:
            with UpstreamErrors(self.host):
                if max_bytes is None:
                    return response.status, await response.aread()
                chunks, size = [], 0
                async for chunk in response.aiter_raw():
                    size += len(chunk)
                    if size > max_bytes:
                        raise UpstreamUnreachable(f"upstream {self.host} answered more than {max_bytes:,} bytes")
                    chunks.append(chunk)
                return response.status, b"".join(chunks)
        finally:
            await response.aclose()

    async def open(
        self,
        method: str,
        target: bytes,
        *,
        headers: RawHeaders,
        content: bytes | AsyncIterator[bytes] | None,
        timeouts: Timeouts | None = None,
    ) -> Response:
        """Send and return the response with its body still unread (the caller must `aclose()` it).
        `timeouts`: this request's own (default: `upstream.*_timeout_s`)."""
        if isinstance(content, bytes) and not any(name == b"content-length" for name, _ in headers):
            headers = [*headers, (b"content-length", str(len(content)).encode())]
        outgoing = Outgoing(method.encode(), target, headers, content)
        with UpstreamErrors(self.host):
            try:
                return await self.pool.request(outgoing, timeouts or self.timeouts)
            except ResponseHeadersTooLarge as exc:
                # Reachable, but not answering as an HTTP server we can relay: its own code says which.
                raise UpstreamUnreachable(f"upstream {self.host}: {exc}", code="upstream_bad_response") from exc

    async def aclose(self) -> None:
        await self.pool.aclose()


def missing_v1(base_url: str) -> str:
    """A hint for an upstream's 404 when its base URL has no version segment (`http://host:8080`, where
    llama.cpp, vLLM and OpenAI serve `/v1/...`), else ""."""
    segments = urlsplit(base_url).path.split("/")
    if any(VERSION_SEGMENT.fullmatch(segment) for segment in segments):
        return ""
    return f" ({base_url} has no /v1; most servers want the upstream's base URL to end in /v1)"
