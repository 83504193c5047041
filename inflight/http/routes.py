"""The routing table as the guards see it, and the proxy's own 404 and 405, in OpenAI's error shape.

Starlette answers 404 and 405 in plain text; an OpenAI client would fail to parse it. Each wire
format's API is forwarded under the paths it declares (OPTIONS too, so a browser app gets the
upstream's CORS answer), so these only concern other paths and the proxy's own routes.
`RouteTable` tells what a path not yet routed would reach (a refused request's route label, and the
error shape its client reads), from the same routes the router has.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route, Router
from starlette.types import Receive, Scope, Send

from inflight.errors import MethodNotAllowed, NotFound
from inflight.formats import WireFormat
from inflight.http.endpoint import Endpoint
from inflight.http.error_response import DEFAULT_SHAPE, render


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
    if scope["path"] == "/":
        message = (
            "inflight: the OpenAI and Anthropic APIs are served under /v1 (/v1/chat/completions, /v1/responses, "
            "/v1/messages); the archive's viewer is at /inflight/ui (with archive.enabled)"
        )
    await render(NotFound(message))(scope, receive, send)


async def doubled_v1(request: Request) -> Response:
    """A request for `/v1/v1/...`: the client's base URL ends in `/v1` and its SDK adds another (Anthropic's
    SDK adds `/v1` itself, so `ANTHROPIC_BASE_URL` takes none). Answered here, not forwarded to a bare 404."""
    message = (
        f"no route for {request.url.path!r}: /v1 is in the path twice, so the client's base URL ends in /v1 and its "
        "SDK adds another. Anthropic's clients (Claude Code, the Anthropic SDK) take the proxy's address without /v1: "
        "ANTHROPIC_BASE_URL=http://HOST:PORT; OpenAI's take it with /v1 once: OPENAI_BASE_URL=http://HOST:PORT/v1"
    )
    return render(NotFound(message))


def route_label(pattern: str) -> str:
    """A route's name in the metrics: its pattern, a catch-all's `{path:path}` as `{path}`."""
    return pattern.replace(":path}", "}")


class RouteTable:
    """The app's routes, asked about a path before the router has seen it (the guards answer first)."""

    def __init__(self, routes: Sequence[BaseRoute]) -> None:
        self.routes = [route for route in routes if isinstance(route, Route)]

    def matched(self, path: str) -> Route | None:
        """The route the router would take `path` to, whatever the method (None: none)."""
        return next((route for route in self.routes if route.path_regex.match(path)), None)

    def label(self, path: str) -> str:
        """What the metrics call a request for `path`: its route's label, never the path ("other": no route)."""
        route = self.matched(path)
        if route is None:
            return "other"
        return route.endpoint.route if isinstance(route.endpoint, Endpoint) else route_label(route.path)

    def wire(self, path: str) -> WireFormat:
        """Whose error shape an answer on `path` takes: its route's wire format, else OpenAI's."""
        route = self.matched(path)
        return route.endpoint.wire if route is not None and isinstance(route.endpoint, Endpoint) else DEFAULT_SHAPE


class ExactRouter(Router):
    """starlette's router, which finds a route whose path has no parameters by a dictionary lookup.

    starlette tries every route's pattern in order on every request, and the conversation endpoints come
    after nine others. A path goes to the dictionary only when no route
    before it could match that path, so every request reaches the route the ordered search would choose."""

    def __init__(self, routes: Sequence[BaseRoute], **options: Any) -> None:
        super().__init__(routes=list(routes), **options)
        self.exact: dict[str, Route] = {}
        earlier: list[Route] = []
        for route in self.routes:
            if not isinstance(route, Route):
                break  # a mount could match anything below it: leave the rest to the ordered search
            plain = not route.param_convertors
            if plain and route.path not in self.exact and not any(r.path_regex.match(route.path) for r in earlier):
                self.exact[route.path] = route
            earlier.append(route)

    async def app(self, scope: Scope, receive: Receive, send: Send) -> None:
        route = self.exact.get(scope["path"]) if scope["type"] == "http" and not scope.get("root_path") else None
        if route is None or (route.methods and scope["method"] not in route.methods):
            await super().app(scope, receive, send)  # the ordered search, the lifespan, a 405, the 404
            return
        scope.setdefault("router", self)
        scope["route"] = route
        scope["endpoint"] = route.endpoint
        scope["path_params"] = scope.get("path_params", {})
        # Its method is allowed, so this is what `handle` calls (JsonRoute's own `handle` only answers other methods).
        await route.app(scope, receive, send)
