"""Any other `/v1` request: forwarded as it came, body streamed, response relayed. No body is parsed."""

from __future__ import annotations

from starlette.requests import Request

from proxy.config import Limits
from proxy.http.body import declared_length, stream_limited
from proxy.http.disconnect import cancelled_on_disconnect
from proxy.http.exchange import Exchange
from proxy.http.relay import Relay, relay
from proxy.http.target import checked_path
from proxy.upstream.client import UpstreamClient


class PassThrough:
    def __init__(self, upstream: UpstreamClient, *, limits: Limits) -> None:
        self.upstream = upstream
        self.limits = limits

    async def __call__(self, request: Request, exchange: Exchange) -> Relay:
        headers = self.upstream.headers_for(request.scope["headers"])
        content = None
        length = declared_length(request, self.limits.max_body_bytes)
        if "transfer-encoding" in request.headers and length is None:
            # Transfer-Encoding is hop-by-hop: our own hop frames the streamed body in chunks again.
            headers.append((b"transfer-encoding", b"chunked"))
            content = stream_limited(request, self.limits)
        elif length:
            content = stream_limited(request, self.limits)
        target = self.upstream.target_for(checked_path(request.scope), request.scope["query_string"])
        exchange.upstream_sending()
        if content is None:  # nothing left to read from the client: watch for it leaving instead
            async with cancelled_on_disconnect(request.receive):
                response = await self.upstream.open(request.method, target, headers=headers, content=None)
        else:
            response = await self.upstream.open(request.method, target, headers=headers, content=content)
        exchange.upstream_answered()
        return relay(response, exchange)
