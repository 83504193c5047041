"""Reading HTTP/1.1 responses off a connection with httptools (llhttp, the C parser uvicorn uses).

One `ResponseReader` per request: it feeds the status, headers and body to the `Response` and
says whether the connection may carry another request afterwards.

The response's head may take `max_header_bytes` (`limits.max_upstream_header_bytes`), counted as the
bytes arrive and before the parser sees them: an upstream that sends a 200 MB header fails the request
(a 502) once that much came, and nothing of it is relayed.
"""

from __future__ import annotations

import httptools

from proxy.upstream.exceptions import NetworkError, ReadError, RemoteProtocolError
from proxy.upstream.headers import RawHeaders
from proxy.upstream.response import Response

DEFAULT_MAX_HEADER_BYTES = 64 * 1024


class ResponseHeadersTooLarge(NetworkError):
    """The upstream's response head went past the bound. Not a `RemoteProtocolError`: the pool must not
    take it for a stale connection and send the request again."""


class ResponseReader:
    def __init__(self, response: Response, *, head: bool, max_header_bytes: int = DEFAULT_MAX_HEADER_BYTES) -> None:
        self.response = response
        self.head = head  # a response to HEAD has headers only, whatever its Content-Length says
        self.keep_alive = False
        self.max_header_bytes = max_header_bytes
        self._parser = httptools.HttpResponseParser(self)
        self._headers: RawHeaders = []
        self._reading_head = True  # until the final (not 1xx) response's headers are complete
        self._head_bytes = 0  # bytes fed while reading heads (1xx ones included)

    def feed(self, data: bytes) -> bool:
        """Parse what arrived; False when it is not HTTP/1.1 or its head is too large (the response then
        carries the error)."""
        budget = self.max_header_bytes - self._head_bytes if self._reading_head else len(data)
        if len(data) <= budget:
            if self._reading_head:
                self._head_bytes += len(data)
            return self._parse(data)
        # Only what the bound allows goes to the parser; the rest only once the head ended within it.
        if not self._parse(data[:budget]):
            return False
        if self._reading_head:
            limit = self.max_header_bytes
            self.response.finished(ResponseHeadersTooLarge(f"the upstream's response headers exceed {limit} bytes"))
            return False
        return self._parse(data[budget:])

    def _parse(self, data: bytes) -> bool:
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self.response.finished(RemoteProtocolError(f"the upstream sent an invalid response: {exc}"))
            return False
        return True

    def connection_lost(self, exc: Exception | None) -> None:
        """The connection is gone; `exc` is None for a clean close, an error for a reset."""
        response = self.response
        if response.complete:
            return
        if response.status and exc is None and not self.keep_alive and self._delimited_by_close():
            response.finished()  # a body without length or chunks ends when the connection does
        elif response.status:
            response.finished(ReadError("the upstream closed the connection mid-body"))
        else:
            response.finished(RemoteProtocolError("the upstream closed the connection without a response"))

    def _delimited_by_close(self) -> bool:
        names = {name.lower() for name, _ in self.response.headers}
        return b"content-length" not in names and b"transfer-encoding" not in names

    # --- httptools callbacks ----------------------------------------------------------------

    def on_header(self, name: bytes, value: bytes) -> None:
        self._headers.append((name, value))

    def on_headers_complete(self) -> None:
        status = self._parser.get_status_code()
        headers, self._headers = self._headers, []
        if 100 <= status < 200:
            return  # an informational response (100 Continue, 103 Early Hints): the real one follows
        self._reading_head = False
        self.keep_alive = self._parser.should_keep_alive() and not self.head
        self.response.headers_received(status, headers)
        if self.head:
            self.response.finished()

    def on_body(self, body: bytes) -> None:
        self.response.body_received(body)

    def on_message_complete(self) -> None:
        if self.response.status and not self.response.complete:
            self.response.finished()
