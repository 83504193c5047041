"""Inbound keys: who may spend the upstream key the proxy holds.

With `access.keys` set, every request to a wire format's API must carry one of them as
`Authorization: Bearer …` or in another header a registered format's clients send their key in
(`x-api-key` for Anthropic's; the upstream gets `upstream.api_key` instead), and `/inflight/*` and
`/metrics` one of `access.admin_keys`. `/healthz` and `/readyz` stay open for load balancers. A key a format's clients
send in the query string (Gemini's `?key=`) is taken as that format's key header first (`QueryKey`).
Keys are compared in constant time, each against all.
"""

from __future__ import annotations

import hmac
import ipaddress
from collections.abc import Callable
from urllib.parse import unquote_to_bytes

from starlette.types import ASGIApp, Receive, Scope, Send

from inflight.config import Access, Settings
from inflight.errors import Forbidden, ProxyError
from inflight.http.error_response import DEFAULT_SHAPE, answer
from inflight.http.routes import RouteTable

OPEN_PATHS = frozenset({"/healthz", "/readyz"})
VIEWER = "/inflight/ui"  # static files that hold no data: the page asks for an admin key before any JSON


def is_open(path: str) -> bool:
    return path in OPEN_PATHS or path == VIEWER or path.startswith(VIEWER + "/")


class InvalidApiKey(ProxyError):
    status_code = 401
    error_type = "invalid_request_error"
    code = "invalid_api_key"


def presented_key(scope: Scope, client_keys: frozenset[bytes]) -> bytes | None:
    """The key as OpenAI's clients send it (`Authorization: Bearer`), else in the first other header of
    `client_keys` (the wire formats' credential headers: Anthropic's `x-api-key`)."""
    api_key = None
    for name, value in scope["headers"]:
        if name == b"authorization":
            scheme, _, key = value.partition(b" ")
            return key.strip() if scheme.lower() == b"bearer" else None
        if name in client_keys and api_key is None:
            api_key = value.strip()
    return api_key


def accepted(key: bytes | None, keys: tuple[str, ...]) -> bool:
    """Whether `key` is one of `keys`, in time that does not depend on which one, or how much matched."""
    found = False
    for candidate in keys:
        found |= hmac.compare_digest(key or b"", candidate.encode("utf-8"))
    return found and bool(key)


class AccessGuard:
    """An ASGI wrapper: requests without an accepted key are answered 401 before anything else runs.
    `client_keys`: the headers a client's key may come in; `routes`: what the path would reach (its error
    shape, its label for `on_refused`)."""

    def __init__(
        self,
        app: ASGIApp,
        access: Access,
        *,
        client_keys: frozenset[bytes],
        routes: RouteTable,
        on_refused: Callable[[str], None] | None = None,
    ) -> None:
        self.app = app
        self.access = access
        self.client_keys = client_keys
        self.routes = routes
        self.on_refused = on_refused  # told the route of each request refused (the metrics)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and not is_open(scope["path"]):
            admin = scope["path"].startswith("/inflight/") or scope["path"] == "/metrics"
            keys = self.access.admin if admin else self.access.keys
            if admin and not keys and self.access.keys:  # client keys are tenants' keys: none opens these paths
                message = "this proxy has no admin keys: set access.admin_keys to reach its archive, stats and metrics"
                await answer(Forbidden(message), wire=DEFAULT_SHAPE)(scope, receive, send)
                if self.on_refused is not None:
                    self.on_refused(self.routes.label(scope["path"]))
                return
            if keys and not accepted(presented_key(scope, self.client_keys), keys):
                kind = "an admin key" if admin else "one of the proxy's keys"
                others = "".join(
                    f" or '{name.decode()}: <key>'" for name in sorted(self.client_keys - {b"authorization"})
                )
                message = (
                    f"Incorrect or missing API key: this proxy needs {kind} as 'Authorization: Bearer <key>'{others}."
                )
                await answer(InvalidApiKey(message), wire=self.routes.wire(scope["path"]))(scope, receive, send)
                if self.on_refused is not None:
                    self.on_refused(self.routes.label(scope["path"]))
                return
        await self.app(scope, receive, send)


class QueryKey:
    """An ASGI wrapper: a key sent in the query string where a format's clients may send it (Gemini's `?key=`) is
    moved into that format's key header before anything else runs, so it is checked, replaced by a held key and
    kept out of the logs and the archive exactly as the header is. The rest of the query goes on as it came."""

    def __init__(self, app: ASGIApp, *, routes: RouteTable, names: frozenset[bytes]) -> None:
        self.app = app
        self.routes = routes
        self.marks = tuple(name + b"=" for name in names)  # a query without any of these has no key to move

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        query = scope.get("query_string", b"") if scope["type"] == "http" else b""
        if query and any(mark in query for mark in self.marks):
            spec = self.routes.wire(scope["path"]).spec
            if spec.query_key is not None:
                scope = moved_key(scope, spec.query_key, header=spec.credentials[0])
        await self.app(scope, receive, send)


def moved_key(scope: Scope, name: bytes, *, header: bytes) -> Scope:
    """`scope` without the query parameter `name`, its (first) value in `header` unless a key is there already."""
    kept, found = [], None
    for pair in scope["query_string"].split(b"&"):
        key, _, value = pair.partition(b"=")
        if unquote_to_bytes(key.replace(b"+", b" ")) == name:
            found = unquote_to_bytes(value.replace(b"+", b" ")) if found is None else found
        else:
            kept.append(pair)
    if found is None:
        return scope
    headers = list(scope["headers"])
    if not any(existing == header for existing, _ in headers):
        headers.append((header, found.strip()))
    return {**scope, "query_string": b"&".join(kept), "headers": headers}


class OriginGuard:
    """An ASGI wrapper for a proxy that holds an upstream key and asks clients for none: only requests
    addressed to it by a loopback name or its listen address (`Host`), and not sent by another origin's
    page (`Origin`), reach it. A page that rebinds its own DNS name to 127.0.0.1 would otherwise spend
    the key and read the answers; a cross-origin "simple" request (`text/plain`) needs no preflight.
    `access.cors_origins` lets named browser origins in. Answered 403 before anything else runs."""

    def __init__(self, app: ASGIApp, settings: Settings, *, routes: RouteTable | None = None) -> None:
        self.app = app
        self.routes = routes  # whose error shape a path's refusal takes (None: OpenAI's)
        self.listen_host = settings.listen.host.strip("[]").lower()
        self.cors_origins = frozenset(origin.rstrip("/").lower() for origin in settings.access.cors_origins)
        # Listening on every address (allowed only with `access.allow_anonymous`): any Host is ours.
        self.any_host = self.listen_host in ("0.0.0.0", "::", "")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            problem = self.problem(scope)
            if problem is not None:
                wire = self.routes.wire(scope["path"]) if self.routes is not None else DEFAULT_SHAPE
                await answer(Forbidden(problem), wire=wire)(scope, receive, send)
                return
        await self.app(scope, receive, send)

    def problem(self, scope: Scope) -> str | None:
        headers = {name: value for name, value in scope["headers"] if name in (b"host", b"origin")}
        host = headers.get(b"host", b"").decode("latin-1").strip().lower()
        if not self.any_host and not self.ours(host_name(host)):
            return (
                f"this proxy holds an upstream key and answers only to its own address, not to Host {host[:100]!r} "
                "(set access.keys to serve other names)"
            )
        origin = headers.get(b"origin")
        if origin is None:
            return None
        text = origin.decode("latin-1").strip().rstrip("/").lower()
        if text in self.cors_origins:
            return None
        same = text in (f"http://{host}", f"https://{host}")
        if same and (not self.any_host or self.ours(host_name(text.partition("://")[2]))):
            return None  # listening everywhere, a page's own origin must still be one of our names
        return (
            f"requests from the browser origin {text[:100]!r} are refused: this proxy holds an upstream key "
            "(list the origin in access.cors_origins to allow it)"
        )

    def ours(self, name: str) -> bool:
        return name == "localhost" or name == self.listen_host or is_loopback(name)


def host_name(host: str) -> str:
    """The name in a `Host` value, without its port (`[::1]:8787` -> `::1`)."""
    if host.startswith("["):
        return host[1:].partition("]")[0]
    return host.rpartition(":")[0] if host.count(":") == 1 else host


def startup_problem(settings: Settings) -> str | None:
    """Why the proxy must not start as configured, or None: an open relay for its own upstream key, or an
    archive of everyone's conversations open to anyone who can reach it."""
    access, host = settings.access, settings.listen.host
    if access.allow_anonymous or is_loopback(host):
        return None
    held = settings.held_keys
    if held and not access.keys:
        named = " and ".join(held)
        return (
            f"{named} {'is' if len(held) == 1 else 'are'} set and the proxy would listen on {host}, so anyone who "
            "can reach it would spend that key. Set access.keys (the keys clients must send), or listen on "
            "127.0.0.1, or set access.allow_anonymous: true if that is really what you want."
        )
    if settings.archive.enabled and not access.admin:
        return (
            f"archive.enabled keeps what clients send, and with no access.admin_keys anyone who can reach {host} "
            "could read it at /inflight/conversations (or, with access.keys, no one could). Set access.admin_keys, "
            "or listen on 127.0.0.1, or set access.allow_anonymous: true if that is really what you want."
        )
    return None


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
