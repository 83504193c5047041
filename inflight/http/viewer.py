"""`/inflight/ui`: the archive viewer, three static files shipped in the package (`inflight/viewer/`).

Read once when the app is built and served from memory, with a content security policy that lets
the page load nothing but its own files and call nothing but this proxy. The page holds no data:
it fetches the archive's JSON endpoints with the admin key it asks for, so it is served without one.
"""

from __future__ import annotations

from importlib.resources import files

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute

from inflight.errors import NotFound
from inflight.http.error_response import answer
from inflight.http.routes import JsonRoute

FILES = {"index.html": "text/html; charset=utf-8", "viewer.css": "text/css", "viewer.js": "text/javascript"}
SECURITY = {
    "content-security-policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:; "
        "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    ),
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
    "cache-control": "no-cache",
}
PREFIX = "/inflight/ui"


class Viewer:
    def __init__(self) -> None:
        package = files("inflight.viewer")
        self.files = {name: package.joinpath(name).read_bytes() for name in FILES}

    def routes(self) -> list[BaseRoute]:
        return [
            JsonRoute(PREFIX, self.page, methods=["GET"]),
            JsonRoute(PREFIX + "/{name}", self.asset, methods=["GET"]),
        ]

    async def page(self, request: Request) -> Response:
        return self.serve("index.html")

    async def asset(self, request: Request) -> Response:
        name = request.path_params["name"]
        if name not in self.files:
            return answer(NotFound(f"no file {name[:80]!r} in the viewer"))
        return self.serve(name)

    def serve(self, name: str) -> Response:
        return Response(self.files[name], media_type=FILES[name], headers=SECURITY)
