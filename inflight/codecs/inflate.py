"""Undoing a body's Content-Encoding (gzip or deflate) within a bound, as its bytes come or whole.

Whoever sends a body decides what it inflates to (200 KB of gzip can become gigabytes), so no more than
a bound ever comes out, a piece at a time (zlib's `max_length`). Either header is read whatever the body
is labelled (zlib tells gzip from zlib by its first bytes); a gzip body may be several members one after
another; and a whole "deflate" body may be raw deflate, as some clients send it.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator

GZIP_OR_ZLIB = 47  # zlib's window bits: a gzip or a zlib header, told apart by its first bytes
RAW_DEFLATE = -15  # no header at all
PIECE = 64 * 1024  # what one step of inflating may produce
INFLATABLE = frozenset({"gzip", "x-gzip", "deflate"})


class InflateError(ValueError):
    """The body is not what its Content-Encoding says, or it ends early."""


class InflatedTooLarge(Exception):
    """The body inflates to more than the bound."""


def encoding_name(content_encoding: str | bytes | None) -> str:
    """A Content-Encoding header's value as a name: `gzip`, `deflate`, `identity` (none given), ..."""
    if content_encoding is None:
        return "identity"
    if isinstance(content_encoding, bytes):
        content_encoding = content_encoding.decode("latin-1")
    return content_encoding.strip().lower() or "identity"


def is_identity(content_encoding: str | bytes | None) -> bool:
    return encoding_name(content_encoding) == "identity"


def is_inflatable(content_encoding: str | bytes | None) -> bool:
    return encoding_name(content_encoding) in INFLATABLE


class Inflater:
    """A body's bytes inflated as they come: at most `limit` in all (`exceeded` says when more was there),
    `piece` at a time."""

    def __init__(self, *, limit: int, piece: int = PIECE, wbits: int = GZIP_OR_ZLIB) -> None:
        self.limit = limit
        self.piece = piece
        self.wbits = wbits
        self.inflated = 0
        self.exceeded = False
        self._zlib = zlib.decompressobj(wbits)

    @property
    def complete(self) -> bool:
        """The body so far ends where its encoding does: nothing of it is missing."""
        return self._zlib.eof

    def feed(self, data: bytes) -> Iterator[bytes]:
        """What `data` inflates to, a piece at a time, until `limit` is reached; raises `InflateError` on
        bytes that are not the encoding."""
        try:
            while not self.exceeded:
                if self._zlib.eof:  # a gzip member ended: whatever follows is the next one
                    data = self._zlib.unused_data + data
                    if not data:
                        return
                    self._zlib = zlib.decompressobj(self.wbits)
                room = self.limit - self.inflated
                step = min(self.piece, room + 1)  # one byte past the room tells that more was there
                out = self._zlib.decompress(data, step)
                if len(out) > room:
                    out, self.exceeded = out[:room], True
                self.inflated += len(out)
                if out:
                    yield out
                if self._zlib.eof:
                    data = b""  # what follows the member is in `unused_data` (`unconsumed_tail` may repeat it)
                    continue
                data = self._zlib.unconsumed_tail
                if len(out) < step and not data:
                    return  # every byte taken: the rest of the body is still to come
        except zlib.error as exc:
            raise InflateError(str(exc)) from exc


def inflate(data: bytes, content_encoding: str | bytes, *, limit: int) -> bytes:
    """A whole body inflated; raises `InflatedTooLarge` past `limit`, `InflateError` when it is not the
    encoding (or ends early)."""
    if not data:
        return data
    try:
        return _inflate_whole(data, GZIP_OR_ZLIB, limit)
    except InflateError:
        if encoding_name(content_encoding) != "deflate":
            raise
        return _inflate_whole(data, RAW_DEFLATE, limit)


def _inflate_whole(data: bytes, wbits: int, limit: int) -> bytes:
    inflater = Inflater(limit=limit, piece=limit + 1, wbits=wbits)
    out = b"".join(inflater.feed(data))
    if inflater.exceeded:
        raise InflatedTooLarge(f"inflates to more than {limit:,} bytes")
    if not inflater.complete:
        raise InflateError("it ends early")
    return out
