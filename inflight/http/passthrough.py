"""Any other `/v1` request: forwarded as it came, body streamed, response relayed. No body is parsed."""

from __future__ import annotations

from starlette.requests import Request

from inflight.config import Limits
from inflight.http.body import declared_length, stream_limited
from inflight.http.disconnect import cancelled_on_disconnect
from inflight.http.exchange import Exchange
from inflight.http.relay import Relay, relay
from inflight.http.target import checked_path
from inflight.upstream.client import UpstreamClient


class PassThrough:
    """`anthropic`: where a request of Anthropic's clients goes (it carries `anthropic-version`), when
    that is another upstream: `/v1/models` or `/v1/files` from Claude Code must not reach OpenAI's
    upstream with the client's Anthropic key."""

    def __init__(self, upstream: UpstreamClient, *, limits: Limits, anthropic: UpstreamClient | None = None) -> None:
        self.default = upstream
        self.anthropic = anthropic
        self.limits = limits

    def upstream_for(self, request: Request) -> UpstreamClient:
        if self.anthropic is not None and "anthropic-version" in request.headers:
            return self.anthropic
        return self.default

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
            async with cancelled_on_disconnect(request.scope, request.receive):
                response = await upstream.open(request.method, target, headers=headers, content=None)
        else:
            response = await upstream.open(request.method, target, headers=headers, content=content)
        exchange.upstream_answered()
        return relay(response, exchange)
