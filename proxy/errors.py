"""Errors the proxy itself answers with, rendered in OpenAI's error shape.

Agents parse `{"error": {"message", "type", "param", "code"}}`; anything else (a starlette HTML
page, a traceback) breaks their retry logic. Every proxy error goes through `render`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpcore
import orjson
from starlette.responses import Response


class ProxyError(Exception):
    status_code = 500
    error_type = "server_error"
    code: str | None = None

    def __init__(self, message: str, *, param: str | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.param = param
        if code is not None:
            self.code = code


class BadRequest(ProxyError):
    status_code = 400
    error_type = "invalid_request_error"


class ContextTooLong(BadRequest):
    code = "context_length_exceeded"

    def __init__(self, message: str) -> None:
        super().__init__(message, param="messages")


class UpstreamUnreachable(ProxyError):
    status_code = 502
    error_type = "upstream_error"
    code = "upstream_unreachable"


class UpstreamTimeout(ProxyError):
    status_code = 504
    error_type = "upstream_error"
    code = "upstream_timeout"


def error_body(message: str, *, error_type: str, param: str | None = None, code: str | None = None) -> bytes:
    return orjson.dumps({"error": {"message": message, "type": error_type, "param": param, "code": code}})


def render(error: ProxyError, headers: dict[str, str] | None = None) -> Response:
    body = error_body(error.message, error_type=error.error_type, param=error.param, code=error.code)
    return Response(body, status_code=error.status_code, media_type="application/json", headers=headers)


@asynccontextmanager
async def upstream_errors(host: str) -> AsyncIterator[None]:
    """The one place where the upstream connection's exceptions become proxy errors."""
    try:
        yield
    except httpcore.TimeoutException as exc:
        raise UpstreamTimeout(f"upstream {host} timed out ({type(exc).__name__})") from exc
    except (httpcore.NetworkError, httpcore.ProtocolError, httpcore.UnsupportedProtocol) as exc:
        raise UpstreamUnreachable(f"upstream {host} is unreachable ({type(exc).__name__}: {exc})") from exc
