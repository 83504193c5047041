"""Reading HTTP/1.1 responses off a connection with httptools (llhttp, the C parser uvicorn uses).

One `ResponseReader` per request: it feeds the status, headers and body to the `Response` and
says whether the connection may carry another request afterwards.

The response's head may take `max_header_bytes` (`limits.max_upstream_header_bytes`): the parser is fed
in slices of that size, and bytes that bring no progress (no end of a head, no body, no end of the
message) are counted; past the bound the request fails (a 502) and nothing of it is relayed. That bounds
a 200 MB header, and chunked trailers or chunk extensions that never end, alike (trailer fields are
dropped: a response's headers are those of its head).
"""

from __future__ import annotations

import httptools

from inflight.upstream.exceptions import NetworkError, ReadError, RemoteProtocolError
from inflight.upstream.headers import RawHeaders
from inflight.upstream.response import Response

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
        # The parser holds this reader's methods: `release` breaks that cycle, so that the response and all it
        # holds are freed as soon as they are done with rather than by the garbage collector.
        self._parser: httptools.HttpResponseParser | None = httptools.HttpResponseParser(self)
        self._headers: RawHeaders = []
        self._reading_head = True  # until the final (not 1xx) response's headers are complete
        self._quiet = 0  # bytes fed since the parser last made progress (a head's end, body, the end)

    def feed(self, data: bytes) -> bool:
        """Parse what arrived; False when it is not HTTP/1.1 or its head (or trailer) is too large (the
        response then carries the error)."""
        start = 0
        while start < len(data):  # never more than the bound's room past the last progress at once
            piece = data[start : start + max(self.max_header_bytes - self._quiet, 1)]
            start += len(piece)
            self._quiet += len(piece)  # a callback of progress sets it back to 0
            if not self._parse(piece):
                return False
            if self._quiet >= self.max_header_bytes:
                limit = self.max_header_bytes
                self.response.finished(ResponseHeadersTooLarge(f"the upstream's response headers exceed {limit} bytes"))
                return False
        return True

    def release(self) -> None:
        """The response is done with: nothing more is read with this reader."""
        self._parser = None

    def _parse(self, data: bytes) -> bool:
        if self._parser is None:  # released: its connection no longer feeds it, and refuses bytes that come now
            return False
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
        if self._reading_head:  # else a trailer field: dropped
            self._headers.append((name, value))

    def on_headers_complete(self) -> None:
        self._quiet = 0
        parser = self._parser
        assert parser is not None, "called by the parser"
        status = parser.get_status_code()
        headers, self._headers = self._headers, []
        if 100 <= status < 200:
            return  # an informational response (100 Continue, 103 Early Hints): the real one follows
        self._reading_head = False
        self.keep_alive = parser.should_keep_alive() and not self.head
        self.response.headers_received(status, headers)
        if self.head:
            self.response.finished()

    def on_body(self, body: bytes) -> None:
        self._quiet = 0
        self.response.body_received(body)

    def on_message_complete(self) -> None:
        self._quiet = 0
        if self.response.status and not self.response.complete:
            self.response.finished()
