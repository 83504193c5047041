"""The proxy's own 404 and 405, in OpenAI's error shape like every other answer of ours.

Starlette answers these in plain text; an OpenAI client would fail to parse it. Everything under
`/v1` is forwarded (OPTIONS too, so a browser app gets the upstream's CORS answer), so these only
concern paths outside it and the proxy's own routes.
"""

from __future__ import annotations

from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from inflight.errors import MethodNotAllowed, NotFound
from inflight.http.error_response import render


class JsonRoute(Route):
    """A route whose wrong-method answer is a JSON 405 with `Allow`."""

    async def handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self.methods and scope["method"] not in self.methods:
            error = MethodNotAllowed(f"{scope['method']} is not allowed on {scope['path']}")
            await render(error, headers={"allow": ", ".join(sorted(self.methods))})(scope, receive, send)
            return
        await super().handle(scope, receive, send)


async def not_found(scope: Scope, receive: Receive, send: Send) -> None:
    if scope["type"] == "websocket":  # under another server than ours (`inflight.http.server` refuses them first)
        await send({"type": "websocket.close", "code": 1008})
        return
    if scope["type"] != "http":
        return
    message = f"no route for {scope['path']!r}: the OpenAI API is served under /v1"
    await render(NotFound(message))(scope, receive, send)
