"""Adapts a `(request, exchange) -> ASGI response` handler to a route: errors rendered, one log line.

The handler returns a `Relay` (which writes the log line when the body is done) or raises a
`ProxyError`, rendered here in OpenAI's shape.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from starlette.requests import Request
from starlette.types import Receive, Scope, Send

from proxy.errors import ProxyError
from proxy.exchange import Exchange
from proxy.http.errors import render
from proxy.upstream.relay import Relay

Handler = Callable[[Request, Exchange], Awaitable[Relay]]


class Endpoint:
    def __init__(self, handler: Handler) -> None:
        self.handler = handler

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        request = Request(scope, receive)
        exchange = Exchange(scope["method"], scope["path"])
        try:
            response = await self.handler(request, exchange)
        except ProxyError as exc:
            exchange.status = exc.status_code
            exchange.note("error", exc.code or exc.error_type)
            await render(exc)(scope, receive, send)
            exchange.finish()
            return
        except Exception:
            exchange.status = 500
            exchange.finish()
            raise
        await response(scope, receive, send)
