"""Every error the proxy answers with goes out here, in OpenAI's error shape.

Agents parse `{"error": {"message", "type", "param", "code"}}`; anything else (a starlette HTML
page, a traceback) breaks their retry logic.
"""

from __future__ import annotations

import orjson
from starlette.responses import Response

from proxy.errors import ProxyError


def error_body(message: str, *, error_type: str, param: str | None = None, code: str | None = None) -> bytes:
    return orjson.dumps({"error": {"message": message, "type": error_type, "param": param, "code": code}})


def body_of(error: ProxyError) -> bytes:
    return error_body(error.message, error_type=error.error_type, param=error.param, code=error.code)


def render(error: ProxyError, headers: dict[str, str] | None = None) -> Response:
    body = body_of(error)
    if error.ends_connection:
        headers = {**(headers or {}), "connection": "close"}
    return Response(body, status_code=error.status_code, media_type="application/json", headers=headers)
