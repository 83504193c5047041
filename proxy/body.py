"""Reading a chat request body: decompress if needed, parse once, reject what is not a JSON object."""

from __future__ import annotations

import gzip
import zlib
from typing import Any

import orjson

from proxy.errors import BadRequest


def decode_content(raw: bytes, content_encoding: str) -> bytes:
    encoding = content_encoding.strip().lower()
    try:
        if encoding in ("", "identity"):
            return raw
        if encoding in ("gzip", "x-gzip"):
            return gzip.decompress(raw)
        if encoding == "deflate":
            return zlib.decompress(raw)
    except (OSError, EOFError, zlib.error) as exc:
        raise BadRequest(f"request body is not valid {encoding} data: {exc}") from exc
    raise BadRequest(f"unsupported request Content-Encoding {content_encoding!r} (use gzip, deflate or none)")


def parse_object(data: bytes) -> dict[str, Any]:
    if not data:
        raise BadRequest("request body is empty; expected a JSON object")
    try:
        payload = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise BadRequest(f"request body is not valid JSON: {exc}") from exc
    if not isinstance(payload, dict):
        raise BadRequest(f"request body must be a JSON object, got a JSON {type(payload).__name__}")
    return payload
