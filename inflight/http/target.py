"""Where a request goes upstream: the path as the client sent it, percent-encoding kept.

The decoded path (what routing sees) would turn `%2F` inside a model id into a separator, `%20`
into a space in the request line and `%0D` into a line break; so the raw bytes are forwarded.
A dot segment (`.` or `..`) could walk out of `upstream.base_url`'s path on a server or gateway
that decodes before it resolves, so a path that has one however it is read is refused.
"""

from __future__ import annotations

import re
from urllib.parse import unquote_to_bytes

from starlette.types import Scope

from inflight.errors import BadRequest

MAX_DECODINGS = 4  # a path encoded more times than this (`%25252e`) is refused whatever it says
# What a server may take for a separator once it has decoded: `/`, Windows' `\`, and `;` which starts
# a segment's parameters on Java servers (`..;/` is `..`).
SEPARATORS = re.compile(rb"[/\\;]")


def raw_path(scope: Scope) -> bytes:
    """The path exactly as it was on the request line (servers without `raw_path`: re-encoded)."""
    raw = scope.get("raw_path")
    if isinstance(raw, bytes) and raw:
        return raw
    return str(scope["path"]).encode("utf-8")


def checked_path(scope: Scope) -> bytes:
    """The raw path, if no reading of it has a dot segment: as sent, or decoded once or more (an encoded `%2F`
    or `\\` taken for a separator, `;` starting a segment's parameters)."""
    path = raw_path(scope)
    if has_dot_segment(path):
        raise BadRequest(f"the path {path[:200].decode('latin-1')!r} has a dot segment; it is not forwarded")
    return path


def has_dot_segment(path: bytes) -> bool:
    if b"." not in path and b"%" not in path:  # no dot, written or encoded: most paths, told at once
        return False
    text = path
    for _ in range(MAX_DECODINGS):
        if any(segment in (b".", b"..") for segment in SEPARATORS.split(text)):
            return True
        decoded = unquote_to_bytes(text)
        if decoded == text:
            return False
        text = decoded
    return True
