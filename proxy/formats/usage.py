"""Reading the upstream's prompt count off a response as it is relayed, for calibration.

The body goes to the client byte for byte; a copy of what passes (inflated when gzip or deflate)
is scanned: a JSON body once it is complete (up to `MAX_JSON_BODY`), a stream line by line, and
only lines that carry the format's `usage_marker` are parsed. Where usage sits is the format's
to say (`WireFormat.prompt_tokens`).
"""

from __future__ import annotations

import zlib

import orjson

from proxy.formats.seam import WireFormat

MAX_JSON_BODY = 8 * 1024 * 1024


class UsageReader:
    """Finds the upstream's prompt count in a response body as it streams past, without touching the bytes."""

    def __init__(self, wire: WireFormat, *, event_stream: bool, content_encoding: bytes | None) -> None:
        self.wire = wire
        self.event_stream = event_stream
        self.prompt_tokens: int | None = None
        self._inflate = zlib.decompressobj(wbits=47) if content_encoding in (b"gzip", b"deflate") else None
        self._unreadable = content_encoding not in (None, b"", b"identity", b"gzip", b"deflate")
        self._buffer = bytearray()

    def feed(self, chunk: bytes) -> None:
        if self._unreadable:
            return
        try:
            data = self._inflate.decompress(chunk) if self._inflate is not None else chunk
        except zlib.error:
            self._unreadable = True
            return
        self._buffer += data
        if self.event_stream:
            self._scan_events()
        elif len(self._buffer) > MAX_JSON_BODY:
            self._unreadable = True

    def finish(self) -> int | None:
        if self._unreadable:
            return None
        if self.event_stream:
            self._buffer += b"\n"
            self._scan_events()
        else:
            self._take(bytes(self._buffer))
        return self.prompt_tokens

    def _scan_events(self) -> None:
        end = self._buffer.rfind(b"\n")
        if end < 0:
            return
        lines = bytes(self._buffer[:end]).split(b"\n")
        del self._buffer[: end + 1]
        for line in lines:
            if line.startswith(b"data:") and self.wire.usage_marker in line:
                self._take(line[5:])

    def _take(self, document: bytes) -> None:
        try:
            parsed = orjson.loads(document)
        except orjson.JSONDecodeError:
            return
        tokens = self.wire.prompt_tokens(parsed)
        if tokens is not None:
            self.prompt_tokens = tokens
