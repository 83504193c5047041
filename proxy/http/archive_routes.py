"""`GET /inflight/conversations`, `/inflight/conversations/{id}`, `/inflight/compactions/{id}`: the archive as JSON.

Behind the admin keys (`proxy.http.access`). With `archive.enabled: false` they answer 404 saying
so. What they return is what the clients sent: the viewer (`/inflight/ui`) shows it as text only.
"""

from __future__ import annotations

import orjson
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute

from proxy.archive.store import ArchiveStore
from proxy.archive.views import conversation_summary, conversation_view
from proxy.errors import BadRequest, NotFound
from proxy.http.errors import render
from proxy.http.routes import JsonRoute

DEFAULT_LIMIT, MAX_LIMIT = 100, 1000


def json_response(data: object) -> Response:
    return Response(orjson.dumps(data), media_type="application/json", headers={"cache-control": "no-store"})


class ArchiveRoutes:
    def __init__(self, store: ArchiveStore | None) -> None:
        self.store = store

    def routes(self) -> list[BaseRoute]:
        return [
            JsonRoute("/inflight/conversations", self.conversations, methods=["GET"]),
            JsonRoute("/inflight/conversations/{id}", self.conversation, methods=["GET"]),
            JsonRoute("/inflight/compactions/{id}", self.compaction, methods=["GET"]),
        ]

    async def conversations(self, request: Request) -> Response:
        if self.store is None:
            return off()
        raw = request.query_params.get("limit", str(DEFAULT_LIMIT))
        if not raw.isdigit() or not 1 <= int(raw) <= MAX_LIMIT:
            message = f"limit must be a whole number from 1 to {MAX_LIMIT}, got {raw[:40]!r}"
            return render(BadRequest(message, param="limit", code="invalid_value"))
        found = await self.store.conversations(int(raw))
        return json_response({"conversations": [conversation_summary(meta) for meta in found]})

    async def conversation(self, request: Request) -> Response:
        if self.store is None:
            return off()
        meta, turns = await self.store.conversation(request.path_params["id"])
        if meta is None:
            return render(NotFound(f"no archived conversation {request.path_params['id'][:80]!r}"))
        return json_response(conversation_view(meta, turns))

    async def compaction(self, request: Request) -> Response:
        if self.store is None:
            return off()
        entry = await self.store.compaction(request.path_params["id"])
        if entry is None:
            return render(NotFound(f"no archived compaction {request.path_params['id'][:80]!r}"))
        return json_response(entry)


def off() -> Response:
    return render(NotFound("the archive is off: set archive.enabled: true in the config to keep compactions"))
