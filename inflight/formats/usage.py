"""Read the upstream's prompt and reply counts from a response as it is relayed, for calibration and the reserve.

The body goes to the client byte for byte; a copy of what passes (inflated when gzip or deflate)
is scanned: a JSON body once it is complete (up to `MAX_JSON_BODY`), a stream event by event, and
only events that carry the format's `usage_marker` are parsed. Where usage sits is the format's
to say (`WireFormat.prompt_tokens`).

Reading is bounded, since the upstream decides what comes: a stream event past `max_event_bytes`, or
more than `max_inflate_bytes` inflated (a 200 KB gzip body can inflate to gigabytes), and the reader
stops reading this response (its usage is then unknown). Inflating goes a piece at a time
(`inflight.codecs.inflate`), so no more is ever held than an event and a piece.
"""

from __future__ import annotations

import orjson

from inflight.codecs.inflate import InflateError, Inflater, is_identity, is_inflatable
from inflight.codecs.sse import EventBuffer, event_data
from inflight.formats.seam import WireFormat

MAX_JSON_BODY = 8 * 1024 * 1024


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
        self.prompt_tokens: int | None = None
        self.output_tokens: int | None = None  # the reply's count, where the upstream says it
        self._inflater = Inflater(limit=max_inflate_bytes) if is_inflatable(content_encoding) else None
        self._unreadable = self._inflater is None and not is_identity(content_encoding)
        self._events = EventBuffer()
        self._body = bytearray()

    def feed(self, chunk: bytes) -> None:
        if self._unreadable:
            return
        if self._inflater is None:
            self._read(chunk)
            return
        inflater = self._inflater
        try:
            for piece in inflater.feed(chunk):
                if not self._read(piece):
                    return
        except InflateError:
            self._stop()
            return
        if inflater.exceeded:
            self._stop()

    def _read(self, data: bytes) -> bool:
        """Take `data` in; False once this response is past reading."""
        if self.event_stream:
            self._events.add(data)
            self._scan_events()
        else:
            self._body += data
            if len(self._body) > MAX_JSON_BODY:
                self._stop()
        return not self._unreadable

    def _stop(self) -> None:
        """Read no more of this response, and discard what is buffered."""
        self._unreadable = True
        self._events = EventBuffer()
        self._body = bytearray()
        self._inflater = None

    def finish(self) -> int | None:
        if self._unreadable:
            return None
        if self.event_stream:
            self._take_event(self._events.pending)  # the last event, which no blank line ended
        else:
            self._take(bytes(self._body))
        return self.prompt_tokens

    def _scan_events(self) -> None:
        while (event := self._events.next_event()) is not None:
            self._take_event(event)
        if len(self._events) > self.max_event_bytes:
            self._stop()  # an event past the bound: whatever it is, it is not usage worth the memory

    def _take_event(self, event: bytes) -> None:
        if self.wire.spec.usage_marker in event:
            self._take(event_data(event))

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
