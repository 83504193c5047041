"""Every error the proxy answers with goes out here, in the shape the client's wire format parses.

An endpoint of a wire format answers in that format's shape (its `spec.errors`); everything else
(the proxy's own routes, paths no format claims) in OpenAI's, `{"error": {"message", "type", "param",
"code"}}`. Anything else (a starlette HTML page, a traceback) breaks the clients' retry logic.
"""

from __future__ import annotations

from starlette.responses import Response

from inflight.errors import ProxyError
from inflight.formats import CHAT_COMPLETIONS, WireFormat

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
