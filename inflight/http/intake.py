"""Reading a conversation request: undo its Content-Encoding, parse it once, count it; big bodies off the loop.

A body that is not a JSON object gets a 400 in OpenAI's shape; anything else that parses is left
for the pipeline to judge (a body it cannot count is forwarded for the upstream to answer).
"""

from __future__ import annotations

import asyncio
import functools
import json
from dataclasses import dataclass
from typing import Any

import orjson

from inflight.codecs.inflate import is_identity
from inflight.errors import BadRequest
from inflight.formats import UNROUTED, Target, WireFormat
from inflight.http.body import decompress
from inflight.http.json_pieces import PIECES_FROM_BYTES, parse_in_pieces
from inflight.offload import HEAVY_BYTES, in_thread
from inflight.pipeline.accounting import Counted
from inflight.pipeline.engine import Pipeline
from inflight.tokens import THREAD_THRESHOLD_BYTES, is_loaded


@dataclass(frozen=True)
class Intake:
    raw: bytes  # the body as the client sent it
    payload: dict[str, Any]
    counted: Counted | None  # None: not a request its wire format can count


def parse_object(data: bytes) -> dict[str, Any]:
    if not data:
        raise BadRequest("request body is empty; expected a JSON object")
    if len(data) >= PIECES_FROM_BYTES:  # in pieces: the GIL, and so the event loop, is never held for long
        pieces = parse_in_pieces(data)
        if pieces is not None:
            return pieces
    try:
        payload = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise BadRequest(f"request body is not valid JSON: {exc}") from exc
    if not isinstance(payload, dict):
        raise BadRequest(f"request body must be a JSON object, got a JSON {type(payload).__name__}")
    return payload


def parse_request(data: bytes) -> tuple[dict[str, Any], bool]:
    """The body as an object, and whether we can count it.

    JSON that orjson refuses but Python's json reads (a lone surrogate escape, `"\\ud800"`) is legal
    JSON syntax the upstream may accept: it is forwarded untouched rather than refused by us.
    """
    try:
        return parse_object(data), True
    except BadRequest:
        try:
            payload = json.loads(data)
        except (ValueError, RecursionError):
            payload = None
        if not isinstance(payload, dict):
            raise
        return payload, False


def parse_and_count(
    chunks: list[bytes],
    content_encoding: str,
    pipeline: Pipeline,
    wire: WireFormat,
    limit: int,
    target: Target = UNROUTED,
    tenant: str = "",
) -> Intake:
    # Joined here, in the worker: CPython copies a join of a megabyte or more without the GIL, so the
    # loop runs on meanwhile; joined on the loop, 30 MB would stop it for a copy's time.
    raw = b"".join(chunks)
    chunks.clear()  # the body is held once, not twice, while it is parsed
    payload, countable = parse_request(decompress(raw, content_encoding, limit))
    counted = pipeline.count(raw, payload, wire, target=target, tenant=tenant) if countable else None
    return Intake(raw, payload, counted)


async def read_request(
    chunks: list[bytes],
    content_encoding: str,
    pipeline: Pipeline,
    wire: WireFormat,
    *,
    limit: int,
    target: Target = UNROUTED,
    tenant: str = "",
) -> Intake:
    """Join, decompress, parse and count (`target`: what the request's path says; `tenant`: the client's); a
    large or compressed body all in one worker thread, so the loop keeps serving others (a small gzip body can
    inflate to the whole limit)."""
    size = sum(map(len, chunks))
    if size > THREAD_THRESHOLD_BYTES or not is_identity(content_encoding):
        heavy = size >= HEAVY_BYTES
        return await in_thread(heavy, parse_and_count, chunks, content_encoding, pipeline, wire, limit, target, tenant)
    raw = b"".join(chunks)
    payload, countable = parse_request(raw)
    if not countable:
        return Intake(raw, payload, None)
    model = payload.get("model")
    if isinstance(model, str) and not is_loaded(pipeline.encoding_for(model).name):  # built on first use: ~1 s
        counting = functools.partial(pipeline.count, raw, payload, wire, target=target, tenant=tenant)
        return Intake(raw, payload, await asyncio.to_thread(counting))
    return Intake(raw, payload, pipeline.count(raw, payload, wire, target=target, tenant=tenant))
