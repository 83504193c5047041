"""Every error the proxy answers with goes out here, in the shape the client's wire format parses.

An endpoint of a wire format answers in that format's shape (its `spec.errors`); everything else
(the proxy's own routes, paths no format claims) in OpenAI's, `{"error": {"message", "type", "param",
"code"}}`. Anything else (a starlette HTML page, a traceback) breaks the clients' retry logic.

`render` is the answer alone, for an `Endpoint`, which writes the request's log line itself;
`answer` is the same answer for everything that answers outside an endpoint (the guards, the 404
and 405, the archive's routes), which writes that line as it goes out (`OwnAnswer`).
"""

from __future__ import annotations

from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from inflight.errors import ProxyError
from inflight.formats import CHAT_COMPLETIONS, WireFormat
from inflight.http.exchange import Exchange

# The proxy's own routes and plain `/v1` forwarding answer as every OpenAI-compatible server does.
DEFAULT_SHAPE: WireFormat = CHAT_COMPLETIONS


def error_body(
    message: str,
    *,
    error_type: str,
    param: str | None = None,
    code: str | None = None,
    wire: WireFormat = DEFAULT_SHAPE,
) -> bytes:
    return wire.spec.errors.body(message, error_type=error_type, param=param, code=code)


def body_of(error: ProxyError, wire: WireFormat = DEFAULT_SHAPE) -> bytes:
    return error_body(error.message, error_type=error.error_type, param=error.param, code=error.code, wire=wire)


def render(error: ProxyError, headers: dict[str, str] | None = None, *, wire: WireFormat = DEFAULT_SHAPE) -> Response:
    body = body_of(error, wire)
    if error.ends_connection:
        headers = {**(headers or {}), "connection": "close"}
    return Response(body, status_code=error.status_code, media_type="application/json", headers=headers)


class OwnAnswer(Response):
    """An error answered outside any endpoint, which writes its request's log line once it is sent, in the
    line every request gets (`Exchange`): `GET /x 404 error=not_found proxy_ms=- upstream_ms=- total_ms=0.1`."""

    def __init__(self, error: ProxyError, headers: dict[str, str] | None = None, *, wire: WireFormat) -> None:
        if error.ends_connection:
            headers = {**(headers or {}), "connection": "close"}
        super().__init__(
            body_of(error, wire), status_code=error.status_code, media_type="application/json", headers=headers
        )
        self.error_code = error.code or error.error_type

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        exchange = Exchange(scope.get("method", "-"), scope.get("path", "-"))
        exchange.status = self.status_code
        exchange.note("error", self.error_code)
        try:
            await super().__call__(scope, receive, send)
        finally:  # the client may be gone already: the line is written all the same
            exchange.finish()


def answer(error: ProxyError, headers: dict[str, str] | None = None, *, wire: WireFormat = DEFAULT_SHAPE) -> Response:
    """`render`'s answer, logged as it goes out: for an answer no `Endpoint` gives (whose own line it would repeat)."""
    return OwnAnswer(error, headers, wire=wire)
