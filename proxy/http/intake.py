"""Reading a chat request: undo its Content-Encoding, parse it once, count it; big bodies off the loop.

A body that is not a JSON object gets a 400 in OpenAI's shape; anything else that parses is left
for the pipeline to judge (a body it cannot count is forwarded for the upstream to answer).
"""

from __future__ import annotations

import asyncio
import gzip
import zlib
from dataclasses import dataclass
from typing import Any

import orjson

from proxy.accounting import Counted
from proxy.errors import BadRequest
from proxy.pipeline import ChatPipeline
from proxy.tokens import THREAD_THRESHOLD_BYTES


@dataclass(frozen=True)
class Intake:
    payload: dict[str, Any]
    counted: Counted | None  # None: not a chat request we can count


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


def parse_and_count(raw: bytes, content_encoding: str, pipeline: ChatPipeline) -> Intake:
    payload = parse_object(decode_content(raw, content_encoding))
    return Intake(payload, pipeline.count(raw, payload))


async def read_chat(raw: bytes, content_encoding: str, pipeline: ChatPipeline) -> Intake:
    """Parse and count; a large body both in one worker thread, so the loop keeps serving others."""
    if len(raw) > THREAD_THRESHOLD_BYTES:
        return await asyncio.to_thread(parse_and_count, raw, content_encoding, pipeline)
    payload = parse_object(decode_content(raw, content_encoding))
    if not pipeline.encoding_ready(payload):  # the first request of an encoding builds it: a second or so
        return Intake(payload, await asyncio.to_thread(pipeline.count, raw, payload))
    return Intake(payload, pipeline.count(raw, payload))
