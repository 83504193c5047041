"""Adapts a `(request, exchange) -> ASGI response` handler to a route: errors rendered, one log line.

The handler returns a `Relay` (which writes the log line when the body is done) or raises a
`ProxyError`, rendered here in OpenAI's shape; any other exception is a bug of ours, answered
with a 500 in the same shape.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from starlette.requests import ClientDisconnect, Request
from starlette.types import ASGIApp, Receive, Scope, Send

from inflight.errors import ProxyError
from inflight.formats import WireFormat
from inflight.http.disconnect import ClientGone
from inflight.http.error_response import DEFAULT_SHAPE, render
from inflight.http.exchange import Exchange
from inflight.offload import LANE_WAIT

log = logging.getLogger("inflight")

# What a handler returns: the answer as an ASGI callable that writes the exchange's log line when done
# (a `Relay`, a `KeepAlive`, or an answer of the proxy's own).
Handler = Callable[[Request, Exchange], Awaitable[ASGIApp]]


class Endpoint:
    def __init__(
        self,
        handler: Handler,
        *,
        route: str = "",
        on_finish: Callable[[Exchange], None] | None = None,
        wire: WireFormat = DEFAULT_SHAPE,
    ) -> None:
        self.handler = handler
        self.route = route  # the route's template, for the metrics
        self.wire = wire  # whose error shape our own errors take
        self.on_finish = on_finish  # called with each request's exchange once it is done (the metrics)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        request = Request(scope, receive)
        exchange = Exchange(scope["method"], scope["path"], self.route, self.on_finish)
        LANE_WAIT.set(exchange.lane)  # this request's task, and those it starts, tell it their heavy-lane waits
        try:
            response = await self.handler(request, exchange)
        except (ClientGone, ClientDisconnect):  # no one to answer; the upstream request is closed already
            exchange.status = 499  # nginx's "client closed request", for the log line
            exchange.note("client_disconnected", 1)
            exchange.finish()
            return
        except ProxyError as exc:
            exchange.status = exc.status_code
            exchange.note("error", exc.code or exc.error_type)
            await render(exc, wire=self.wire)(scope, receive, send)
            exchange.finish()
            return
        except Exception as exc:  # a bug of ours: still an answer in OpenAI's shape, and the traceback logged
            log.exception("internal error on %s %s", scope["method"], scope["path"])
            exchange.status = 500
            exchange.note("error", type(exc).__name__)
            error = ProxyError(f"inflight internal error: {type(exc).__name__}")
            await render(error, wire=self.wire)(scope, receive, send)
            exchange.finish()
            return
        await response(scope, receive, send)
