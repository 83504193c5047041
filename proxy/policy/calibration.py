"""Learning how far our estimate is from the upstream's own count, from the `usage` it reports.

Models that do not use a tiktoken encoding (Llama, Qwen, Mistral, ...) are counted with
o200k_base as an estimate. Their upstream reports the true `usage.prompt_tokens`; the ratio of
the two, averaged over the last few responses, corrects later estimates for that model.
"""

from __future__ import annotations

import logging
import zlib
from collections import deque
from dataclasses import dataclass, field

import orjson

log = logging.getLogger("inflight")

MAX_JSON_BODY = 8 * 1024 * 1024
RATIO_BOUNDS = (0.25, 4.0)  # outside these, a usage figure is about something else (cached, images, ...)


@dataclass
class Calibration:
    """A bounded moving average of `usage.prompt_tokens / estimate` per model."""

    window: int = 16
    _samples: dict[str, deque[float]] = field(default_factory=dict)

    def record(self, model: str, *, estimate: int, actual: int) -> None:
        if estimate <= 0 or actual <= 0:
            return
        ratio = actual / estimate
        if not RATIO_BOUNDS[0] <= ratio <= RATIO_BOUNDS[1]:
            return
        samples = self._samples.setdefault(model, deque(maxlen=self.window))
        samples.append(ratio)
        if log.isEnabledFor(logging.DEBUG):
            log.debug("[context] calibration %s: %.3f over %d responses", model, self.ratio(model), len(samples))

    def ratio(self, model: str) -> float:
        samples = self._samples.get(model)
        return sum(samples) / len(samples) if samples else 1.0

    def report(self) -> dict[str, dict[str, float]]:
        return {model: {"ratio": round(self.ratio(model), 4), "samples": len(s)} for model, s in self._samples.items()}


class UsageReader:
    """Finds `usage.prompt_tokens` in a response body as it streams past, without touching the bytes."""

    def __init__(self, *, event_stream: bool, content_encoding: bytes | None) -> None:
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
            if line.startswith(b"data:") and b'"usage"' in line:
                self._take(line[5:])

    def _take(self, document: bytes) -> None:
        try:
            parsed = orjson.loads(document)
        except orjson.JSONDecodeError:
            return
        usage = parsed.get("usage") if isinstance(parsed, dict) else None
        tokens = usage.get("prompt_tokens") if isinstance(usage, dict) else None
        if isinstance(tokens, int) and not isinstance(tokens, bool):
            self.prompt_tokens = tokens
