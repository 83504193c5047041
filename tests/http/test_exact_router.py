"""The router's dictionary of plain paths sends every request where starlette's ordered search would."""

from collections.abc import Awaitable, Callable

import httpx
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from inflight.http.routes import ExactRouter, JsonRoute, not_found
from tests.support.servers import serve


def answering(name: str) -> Callable[[Request], Awaitable[PlainTextResponse]]:
    async def endpoint(request: Request) -> PlainTextResponse:
        return PlainTextResponse(f"{name} {request.method}")

    return endpoint


ROUTES = [
    Route("/v1/{path:path}", answering("catch-all"), methods=["GET"]),  # before the plain path: it wins a GET
    JsonRoute("/v1/models", answering("plain-after-catch-all"), methods=["GET", "POST"]),
    JsonRoute("/v2/chat", answering("plain"), methods=["POST"]),
    JsonRoute("/v2/chat", answering("second-plain"), methods=["GET"]),
]


def test_a_plain_path_goes_where_the_ordered_search_sends_it() -> None:
    router = ExactRouter(ROUTES, default=not_found)
    assert set(router.exact) == {"/v2/chat"}  # /v1/models is shadowed by the catch-all before it
    with serve(router) as url:
        answers = {
            ("POST", "/v2/chat"): httpx.post(f"{url}/v2/chat"),
            ("GET", "/v2/chat"): httpx.get(f"{url}/v2/chat"),  # the first route's method is not GET: the next one
            ("GET", "/v1/models"): httpx.get(f"{url}/v1/models"),
            ("POST", "/v1/models"): httpx.post(f"{url}/v1/models"),
            ("GET", "/v3"): httpx.get(f"{url}/v3"),
        }
    assert {key: (answer.status_code, answer.text) for key, answer in answers.items() if key[1] != "/v3"} == {
        ("POST", "/v2/chat"): (200, "plain POST"),
        ("GET", "/v2/chat"): (200, "second-plain GET"),
        ("GET", "/v1/models"): (200, "catch-all GET"),
        ("POST", "/v1/models"): (200, "plain-after-catch-all POST"),
    }
    assert answers[("GET", "/v3")].status_code == 404
    assert answers[("GET", "/v3")].json()["error"]["type"] == "invalid_request_error"
