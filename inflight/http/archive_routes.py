"""`GET /inflight/conversations`, `/inflight/conversations/{id}`, `/inflight/compactions/{id}`: the archive as JSON.

Behind the admin keys (`inflight.http.access`). With `archive.enabled: false` they answer 404 saying
so. What they return is what the clients sent: the viewer (`/inflight/ui`) shows it as text only.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

import orjson
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute

from inflight.archive.store import ArchiveStore
from inflight.archive.views import conversation_summary, conversation_view
from inflight.errors import BadRequest, NotFound, ProxyError
from inflight.http.access import is_loopback
from inflight.http.error_response import answer as own_answer
from inflight.http.routes import JsonRoute

DEFAULT_LIMIT, MAX_LIMIT = 100, 1000

log = logging.getLogger("inflight")

Handler = Callable[[Request], Awaitable[Response]]


class ArchiveUnavailable(ProxyError):
    status_code = 503
    code = "archive_unavailable"


class NotForThisHost(ProxyError):
    status_code = 403
    error_type = "invalid_request_error"
    code = "loopback_only"


def addressed_to_loopback(request: Request) -> bool:
    """Whether the request names this machine in its Host header (a browser page that rebinds its own
    hostname to 127.0.0.1 still sends that hostname)."""
    host = request.headers.get("host", "")
    name = host[1:].partition("]")[0] if host.startswith("[") else host.rpartition(":")[0] or host
    return is_loopback(name)


def json_response(data: object) -> Response:
    body = data if isinstance(data, bytes) else orjson.dumps(data)
    return Response(body, media_type="application/json", headers={"cache-control": "no-store"})


def answered(handler: Handler, *, loopback_only: bool) -> Handler:
    """Our errors in OpenAI's shape; a store that fails (Redis down, a damaged file) is a 503 saying so.

    `loopback_only` (no admin keys): only requests addressed to localhost are answered, so that a web
    page whose hostname is rebound to 127.0.0.1 cannot read the archive from a developer's browser."""

    async def answer(request: Request) -> Response:
        try:
            if loopback_only and not addressed_to_loopback(request):
                raise NotForThisHost(
                    "this proxy has no admin keys, so its archive answers only requests addressed to localhost "
                    "(set access.admin_keys to reach it under another name)"
                )
            return await handler(request)
        except ProxyError as exc:
            return own_answer(exc)
        except Exception as exc:
            log.warning("[archive] %s failed: %s: %s", request.url.path, type(exc).__name__, exc)
            return own_answer(ArchiveUnavailable(f"the archive's store failed ({type(exc).__name__}); try again later"))

    return answer


class ArchiveRoutes:
    def __init__(self, store: ArchiveStore | None, *, loopback_only: bool) -> None:
        self._store = store
        self.loopback_only = loopback_only

    def routes(self) -> list[BaseRoute]:
        local = self.loopback_only
        return [
            JsonRoute("/inflight/conversations", answered(self.conversations, loopback_only=local), methods=["GET"]),
            JsonRoute(
                "/inflight/conversations/{id}", answered(self.conversation, loopback_only=local), methods=["GET"]
            ),
            JsonRoute("/inflight/compactions/{id}", answered(self.compaction, loopback_only=local), methods=["GET"]),
        ]

    @property
    def store(self) -> ArchiveStore:
        if self._store is None:
            raise NotFound("the archive is off: set archive.enabled: true in the config to keep compactions")
        return self._store

    async def conversations(self, request: Request) -> Response:
        raw = request.query_params.get("limit", str(DEFAULT_LIMIT))
        if not raw.isdigit() or not 1 <= int(raw) <= MAX_LIMIT:
            message = f"limit must be a whole number from 1 to {MAX_LIMIT}, got {raw[:40]!r}"
            raise BadRequest(message, param="limit", code="invalid_value")
        found = await self.store.conversations(int(raw))
        return json_response({"conversations": [conversation_summary(meta) for meta in found]})

    async def conversation(self, request: Request) -> Response:
        meta, turns = await self.store.conversation(request.path_params["id"])
        if meta is None:
            raise NotFound(f"no archived conversation {request.path_params['id'][:80]!r}")
        return json_response(conversation_view(meta, turns))

    async def compaction(self, request: Request) -> Response:
        entry = await self.store.compaction(request.path_params["id"])
        if entry is None:
            raise NotFound(f"no archived compaction {request.path_params['id'][:80]!r}")
        return json_response(entry)
