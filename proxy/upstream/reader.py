"""Reading HTTP/1.1 responses off a connection with httptools (llhttp, the C parser uvicorn uses).

One `ResponseReader` per request: it feeds the status, headers and body to the `Response` and
says whether the connection may carry another request afterwards.
"""

from __future__ import annotations

import httptools

from proxy.upstream.exceptions import ReadError, RemoteProtocolError
from proxy.upstream.headers import RawHeaders
from proxy.upstream.response import Response


class ResponseReader:
    def __init__(self, response: Response, *, head: bool) -> None:
        self.response = response
        self.head = head  # a response to HEAD has headers only, whatever its Content-Length says
        self.keep_alive = False
        self._parser = httptools.HttpResponseParser(self)
        self._headers: RawHeaders = []

    def feed(self, data: bytes) -> bool:
        """Parse what arrived; False when it is not HTTP/1.1 (the response then carries the error)."""
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
        self.keep_alive = self._parser.should_keep_alive() and not self.head
        self.response.headers_received(status, headers)
        if self.head:
            self.response.finished()

    def on_body(self, body: bytes) -> None:
        self.response.body_received(body)

    def on_message_complete(self) -> None:
        if self.response.status and not self.response.complete:
            self.response.finished()
