"""Where a request goes upstream: the path as the client sent it, percent-encoding kept.

The decoded path (what routing sees) would turn `%2F` inside a model id into a separator, `%20`
into a space in the request line and `%0D` into a line break; so the raw bytes are forwarded.
A dot segment (`.` or `..`, percent-encoded or not) could walk out of `upstream.base_url`'s
path, so it is refused.
"""

from __future__ import annotations

from urllib.parse import unquote_to_bytes

from starlette.types import Scope

from inflight.errors import BadRequest


def raw_path(scope: Scope) -> bytes:
    """The path exactly as it was on the request line (servers without `raw_path`: re-encoded)."""
    raw = scope.get("raw_path")
    if isinstance(raw, bytes) and raw:
        return raw
    return str(scope["path"]).encode("utf-8")


def checked_path(scope: Scope) -> bytes:
    path = raw_path(scope)
    for segment in path.split(b"/"):
        if unquote_to_bytes(segment) in (b".", b".."):
            raise BadRequest(f"the path {path.decode('latin-1')!r} has a dot segment; it is not forwarded")
    return path
