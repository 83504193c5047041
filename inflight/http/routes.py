"""The routing table as the guards see it, and the proxy's own 404 and 405, in OpenAI's error shape.

Starlette answers 404 and 405 in plain text; an OpenAI client would fail to parse it. Each wire
format's API is forwarded under the paths it declares (OPTIONS too, so a browser app gets the
upstream's CORS answer), so these only concern other paths and the proxy's own routes. Each is
logged as it goes out, in the line every request gets (`inflight.http.error_response.answer`).
`RouteTable` tells what a path not yet routed would reach (a refused request's route label, and the
error shape its client reads), from the same routes the router has.

A wrong base URL (`/v1` twice, none, `/v1` before a path that carries its own version) gets a 404 that
says what to set (`WrongAddresses`), and the same words in a warning, once per client and path: some
clients show their user none of it (Claude Code says "There's an issue with the selected model").
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from typing import Any

from cachetools import TTLCache
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route, Router
from starlette.types import Receive, Scope, Send

from inflight.errors import MethodNotAllowed, NotFound
from inflight.formats import WireFormat
from inflight.http.endpoint import Endpoint
from inflight.http.error_response import DEFAULT_SHAPE, answer
from inflight.http.exchange import MAX_FIELD_CHARS

log = logging.getLogger("inflight")

# The first segment under /v1 of the APIs clients ask for: a path that starts with one lacks its /v1.
API_ROOTS = frozenset(
    {"chat", "completions", "responses", "messages", "models", "embeddings", "moderations", "audio", "images"}
    | {"files", "batches", "uploads", "rerank"}
)
VERSION = re.compile(r"v\d+\w*")  # a path's own API version (`v1beta`)
WARNED_KEPT = 1024  # the (client, path) pairs warned about that are remembered, at most
WARNED_FOR_S = 3600.0  # how long one is: a client still wrong an hour later is warned again


class JsonRoute(Route):
    """A route whose wrong-method answer is a JSON 405 with `Allow`."""

    async def handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self.methods and scope["method"] not in self.methods:
            error = MethodNotAllowed(f"{scope['method']} is not allowed on {scope['path']}")
            await answer(error, headers={"allow": ", ".join(sorted(self.methods))})(scope, receive, send)
            return
        await super().handle(scope, receive, send)


class WrongAddresses:
    """The 404s for a client whose base URL is wrong, each saying what to set, and their warnings.

    `/v1/v1/...`: the base URL ends in /v1 and the SDK adds another. A path with no /v1 that an API has
    under it (`/chat/completions`, `/messages`): the base URL lacks it. `/v1/v1beta/...`: /v1 before a path
    that carries its own version (Gemini's), which would go to the default upstream as `/v1beta/...`.
    The hint is logged at WARNING once per client address and path (`WARNED_KEPT` of them, for
    `WARNED_FOR_S`), and every one of these answers gets its request line like any other."""

    def __init__(self, served: Sequence[WireFormat] = ()) -> None:
        # The versions formats put in their own paths (`v1beta`), never under /v1.
        self.versions = sorted(
            {
                first
                for wire in served
                for route in wire.spec.routes
                if (first := first_segment(route.path)) != "v1" and VERSION.fullmatch(first)
            }
        )
        self.warned: TTLCache[tuple[str, str], bool] = TTLCache(maxsize=WARNED_KEPT, ttl=WARNED_FOR_S)

    def routes(self, methods: Sequence[str]) -> list[BaseRoute]:
        """Before the forwarded routes: these paths would otherwise go upstream, to a bare 404."""
        return [
            JsonRoute("/v1/v1/{path:path}", self.doubled_v1, methods=list(methods)),
            *(
                # Only the shape of the format's own paths (`/v1beta/models/...`): another path under it, such as
                # Google's OpenAI-compatible `/v1/v1beta/openai/...`, goes on to the default upstream as before.
                JsonRoute(f"/v1/{version}/models/{{path:path}}", self.versioned_under_v1, methods=list(methods))
                for version in self.versions
            ),
        ]

    async def doubled_v1(self, request: Request) -> Response:
        """A request for `/v1/v1/...`: the client's base URL ends in `/v1` and its SDK adds another (Anthropic's
        SDK adds `/v1` itself, so `ANTHROPIC_BASE_URL` takes none). Answered here, not forwarded to a bare 404."""
        return self.refused(request.scope, doubled_v1_message(request.scope["path"]))

    async def versioned_under_v1(self, request: Request) -> Response:
        path = request.scope["path"]
        version = first_segment(path.removeprefix("/v1"))
        message = (
            f"no route for {shown(path)}: /v1 comes before /{version}, which carries its API's version itself, "
            "so the client's base URL ends in /v1. Google's clients (Gemini CLI, the google-genai SDK) take the "
            "proxy's address without it: GOOGLE_GEMINI_BASE_URL=http://HOST:PORT"
        )
        return self.refused(request.scope, message)

    async def not_found(self, scope: Scope, receive: Receive, send: Send) -> None:
        """The router's default: a path no route matches (a missing /v1 is warned of)."""
        if not await unrouted_other(scope, send):
            message, wrong_base = unrouted_message(scope["path"])
            response = self.refused(scope, message) if wrong_base else answer(NotFound(message))
            await response(scope, receive, send)

    def refused(self, scope: Scope, message: str) -> Response:
        """The 404 saying `message`, and the same words in a warning unless this client was told about this path."""
        client = scope.get("client")
        address = str(client[0]) if client else "-"
        key = (address, scope["path"][:MAX_FIELD_CHARS])
        if key not in self.warned:
            self.warned[key] = True
            log.warning("[address] %s from %s: %s (said once per client and path)", scope["method"], address, message)
        return answer(NotFound(message))


def doubled_v1_message(path: str) -> str:
    return (
        f"no route for {shown(path)}: /v1 is in the path twice, so the client's base URL ends in /v1 and its "
        "SDK adds another. Anthropic's clients (Claude Code, the Anthropic SDK) take the proxy's address without /v1: "
        "ANTHROPIC_BASE_URL=http://HOST:PORT; OpenAI's take it with /v1 once: OPENAI_BASE_URL=http://HOST:PORT/v1"
    )


def missing_v1_message(path: str) -> str:
    return (
        f"no route for {shown(path)}: the APIs are served under /v1 and this path has none, so the client's base URL "
        "lacks it. OpenAI's clients take the proxy's address with /v1: OPENAI_BASE_URL=http://HOST:PORT/v1; "
        "Anthropic's (Claude Code, the Anthropic SDK) without it, as they add /v1 themselves: "
        "ANTHROPIC_BASE_URL=http://HOST:PORT"
    )


def unrouted_message(path: str) -> tuple[str, bool]:
    """What the 404 for a path no route matches says, and whether it is a wrong base URL (a missing /v1)."""
    if first_segment(path) in API_ROOTS:
        return missing_v1_message(path), True
    if path == "/":
        message = (
            "inflight: the OpenAI and Anthropic APIs are served under /v1 (/v1/chat/completions, /v1/responses, "
            "/v1/messages); the archive's viewer is at /inflight/ui (with archive.enabled)"
        )
        return message, False
    return f"no route for {shown(path)}: the OpenAI API is served under /v1", False


def first_segment(path: str) -> str:
    return path.lstrip("/").partition("/")[0]


def shown(path: str) -> str:
    """A path as a message quotes it: control characters escaped, and clipped (the log repeats it)."""
    return repr(path[:MAX_FIELD_CHARS]) + ("..." if len(path) > MAX_FIELD_CHARS else "")


async def unrouted_other(scope: Scope, send: Send) -> bool:
    """A scope the 404 is not for, closed or ignored here (True), else False: an HTTP request."""
    if scope["type"] == "websocket":  # under another server than ours (`inflight.http.server` refuses them first)
        await send({"type": "websocket.close", "code": 1008})
        return True
    return bool(scope["type"] != "http")


async def not_found(scope: Scope, receive: Receive, send: Send) -> None:
    """A router's default 404, warning of nothing (an app's own is `WrongAddresses.not_found`)."""
    if not await unrouted_other(scope, send):
        await answer(NotFound(unrouted_message(scope["path"])[0]))(scope, receive, send)


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
    after ten others. A path goes to the dictionary only when no route
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
