"""The chat-completions path: read once, count, compact if needed, send, relay."""

from __future__ import annotations

from starlette.requests import Request

from proxy.body import decode_content, parse_object
from proxy.forward import Relay, Timing, UpstreamClient, relay_response


class ChatCompletions:
    def __init__(self, upstream: UpstreamClient) -> None:
        self.upstream = upstream

    async def handle(self, request: Request, timing: Timing) -> Relay:
        raw = await request.body()
        payload = parse_object(decode_content(raw, request.headers.get("content-encoding", "")))
        model = payload.get("model")
        timing.model = model if isinstance(model, str) else "-"
        headers = self.upstream.outgoing_headers(request.scope["headers"])
        url = self.upstream.url_for(request.url.path, request.scope["query_string"])
        response = await self.upstream.open("POST", url, headers=headers, content=raw)
        timing.upstream_answered()
        return relay_response(response, timing)
