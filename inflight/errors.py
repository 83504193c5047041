"""The errors the proxy itself responds with, as plain exceptions that `inflight.http.error_response` renders.

Each carries the fields of OpenAI's error shape (`{"error": {"message", "type", "param", "code"}}`)
and its HTTP status, so the one renderer at the edge needs nothing else.
"""

from __future__ import annotations


class ProxyError(Exception):
    status_code = 500
    error_type = "server_error"
    code: str | None = None
    # Raised when the request body may be only half read, so the connection cannot carry another request.
    ends_connection = False

    def __init__(self, message: str, *, param: str | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.param = param
        if code is not None:
            self.code = code


class BadRequest(ProxyError):
    status_code = 400
    error_type = "invalid_request_error"


class RequestTooLarge(ProxyError):
    status_code = 413
    error_type = "invalid_request_error"
    code = "request_too_large"
    ends_connection = True


class ClientTimeout(ProxyError):
    status_code = 408
    error_type = "invalid_request_error"
    code = "request_timeout"
    ends_connection = True


class Forbidden(ProxyError):
    status_code = 403
    error_type = "permission_error"
    code = "forbidden"


class NotFound(ProxyError):
    status_code = 404
    error_type = "invalid_request_error"
    code = "not_found"


class MethodNotAllowed(ProxyError):
    status_code = 405
    error_type = "invalid_request_error"
    code = "method_not_allowed"


class UpstreamNotConfigured(ProxyError):
    """The config gives a wire format no upstream that could serve it; the message says what to set."""

    status_code = 502
    error_type = "upstream_error"
    code = "upstream_not_configured"


class UpstreamUnreachable(ProxyError):
    status_code = 502
    error_type = "upstream_error"
    code = "upstream_unreachable"


class UpstreamTimeout(ProxyError):
    status_code = 504
    error_type = "upstream_error"
    code = "upstream_timeout"
