"""Read the upstream's prompt and reply counts from a response as it is relayed, for calibration and the reserve.

The body goes to the client byte for byte, while a copy (decompressed if gzip or deflate) is scanned: a
JSON body once complete (up to `MAX_JSON_BODY`), a stream line by line, parsing only lines that contain
the format's `usage_marker`. The format says where usage sits (`WireFormat.prompt_tokens`).

Reading is limited, since the upstream controls what arrives. On a stream line longer than
`max_event_bytes`, or more than `max_inflate_bytes` decompressed (a 200 KB gzip body can inflate to
gigabytes), the reader stops reading this response and its usage stays unknown. Decompression runs
`INFLATE_PIECE` at a time (zlib's `max_length`), so at most a line and a piece are held in memory.
"""

from __future__ import annotations

import zlib

import orjson

from inflight.formats.seam import WireFormat

MAX_JSON_BODY = 8 * 1024 * 1024
INFLATE_PIECE = 64 * 1024


class UsageReader:
    """Finds the upstream's prompt and reply counts in a response body as it streams past, without changing it."""

    def __init__(
        self,
        wire: WireFormat,
        *,
        event_stream: bool,
        content_encoding: bytes | None,
        max_event_bytes: int = 1024 * 1024,
        max_inflate_bytes: int = 16 * 1024 * 1024,
    ) -> None:
        self.wire = wire
        self.event_stream = event_stream
        self.max_event_bytes = max_event_bytes
        self.max_inflate_bytes = max_inflate_bytes
        self.prompt_tokens: int | None = None
        self.output_tokens: int | None = None  # the reply's count, if the upstream reports it
        self._inflate = zlib.decompressobj(wbits=47) if content_encoding in (b"gzip", b"deflate") else None
        self._inflated = 0  # bytes decompressed so far
        self._unreadable = content_encoding not in (None, b"", b"identity", b"gzip", b"deflate")
        self._buffer = bytearray()

    def feed(self, chunk: bytes) -> None:
        if self._unreadable:
            return
        if self._inflate is None:
            self._read(chunk)
            return
        inflate = self._inflate
        while chunk and not self._unreadable:
            budget = self.max_inflate_bytes - self._inflated
            if budget <= 0:
                self._stop()
                return
            try:
                piece = inflate.decompress(chunk, min(INFLATE_PIECE, budget))
            except zlib.error:
                self._stop()
                return
            self._inflated += len(piece)
            chunk = inflate.unconsumed_tail  # what did not fit in this piece
            self._read(piece)

    def _read(self, data: bytes) -> None:
        start = len(self._buffer)
        self._buffer += data
        if self.event_stream:
            self._scan_events(start)
        elif len(self._buffer) > MAX_JSON_BODY:
            self._stop()

    def _stop(self) -> None:
        """Read no more of this response, and discard what is buffered."""
        self._unreadable = True
        self._buffer = bytearray()
        self._inflate = None

    def finish(self) -> int | None:
        if self._unreadable:
            return None
        if self.event_stream:
            start = len(self._buffer)
            self._buffer += b"\n"
            self._scan_events(start)
        else:
            self._take(bytes(self._buffer))
        return self.prompt_tokens

    def _scan_events(self, start: int) -> None:
        """Parse the complete lines; only bytes from `start` (the new data) are searched for a line end."""
        end = self._buffer.rfind(b"\n", start)
        if end >= 0:
            lines = bytes(self._buffer[:end]).split(b"\n")
            del self._buffer[: end + 1]
            for line in lines:
                if line.startswith(b"data:") and self.wire.spec.usage_marker in line:
                    self._take(line[5:])
        if len(self._buffer) > self.max_event_bytes:
            self._stop()  # a line over the limit: whatever it is, it is not usage worth the memory

    def _take(self, document: bytes) -> None:
        try:
            parsed = orjson.loads(document)
        except orjson.JSONDecodeError:
            return
        tokens = self.wire.prompt_tokens(parsed)
        if tokens is not None:
            self.prompt_tokens = tokens
        output = self.wire.output_tokens(parsed)
        if output is not None:
            self.output_tokens = output
