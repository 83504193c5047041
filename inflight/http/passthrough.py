"""Any other request of a wire format's API: forwarded as it came, body streamed, response relayed. No body
is parsed."""

from __future__ import annotations

from collections.abc import Sequence

from starlette.requests import Request

from inflight.config import Limits
from inflight.http.body import declared_length, stream_limited
from inflight.http.disconnect import CancelledOnDisconnect
from inflight.http.exchange import Exchange
from inflight.http.relay import Relay, relay
from inflight.http.target import checked_path
from inflight.upstream.client import UpstreamClient


class PassThrough:
    """`by_client_header`: where a request carrying a header only one format's clients send goes, when that
    format has another upstream: `/v1/models` or `/v1/files` from Claude Code (`anthropic-version`) must
    not reach OpenAI's upstream with the client's Anthropic key."""

    def __init__(
        self,
        upstream: UpstreamClient,
        *,
        limits: Limits,
        by_client_header: Sequence[tuple[str, UpstreamClient]] = (),
    ) -> None:
        self.default = upstream
        self.by_client_header = by_client_header
        self.limits = limits

    def upstream_for(self, request: Request) -> UpstreamClient:
        found = (upstream for header, upstream in self.by_client_header if header in request.headers)
        return next(found, self.default)

    async def __call__(self, request: Request, exchange: Exchange) -> Relay:
        upstream = self.upstream_for(request)
        headers = upstream.headers_for(request.scope["headers"])
        content = None
        length = declared_length(request, self.limits.max_body_bytes)
        if "transfer-encoding" in request.headers and length is None:
            # Transfer-Encoding is hop-by-hop: our own hop frames the streamed body in chunks again.
            headers.append((b"transfer-encoding", b"chunked"))
            content = stream_limited(request, self.limits)
        elif length:
            content = stream_limited(request, self.limits)
        target = upstream.target_for(checked_path(request.scope), request.scope["query_string"])
        exchange.upstream_sending()
        if content is None:  # nothing left to read from the client: watch for it leaving instead
            async with CancelledOnDisconnect(request.scope, request.receive):
                response = await upstream.open(request.method, target, headers=headers, content=None)
        else:
            response = await upstream.open(request.method, target, headers=headers, content=content)
        exchange.upstream_answered()
        return relay(response, exchange)
