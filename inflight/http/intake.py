"""Reading a conversation request: undo its Content-Encoding, parse it once, count it; big bodies off the loop.

A body that is not a JSON object gets a 400 in OpenAI's shape, unless nothing needs it read (shadow mode,
`off`, compaction disabled): then it is forwarded as sent. Anything else that parses is left for the
pipeline to judge (a body it cannot count, such as JSON nested deeper than it can write, is forwarded for
the upstream to answer).
"""

from __future__ import annotations

import asyncio
import functools
import json
from typing import Any

import orjson

from inflight.codecs.inflate import is_identity
from inflight.errors import BadRequest, RequestTooLarge
from inflight.formats import UNROUTED, Target, WireFormat
from inflight.frozen import frozen
from inflight.http.body import decompress
from inflight.http.json_pieces import PIECES_FROM_BYTES, parse_in_pieces
from inflight.offload import HEAVY_BYTES, in_thread
from inflight.pipeline.accounting import Counted
from inflight.pipeline.engine import Options, Pipeline
from inflight.tokens import THREAD_THRESHOLD_BYTES, is_loaded

NO_OPTIONS = Options()


# orjson reads JSON nested up to 1,024 deep but writes only 254 levels: a body nested deeper cannot be counted
# or rewritten, so it is forwarded as sent.
MAX_WRITTEN_DEPTH = 254


@frozen
class Intake:
    raw: bytes  # the body as the client sent it
    payload: dict[str, Any]  # empty when the body was not read
    counted: Counted | None  # None: not a request its wire format can count
    unread: str | None = None  # why a body that nothing needed read was forwarded unread


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


def writable(data: bytes, payload: dict[str, Any]) -> bool:
    """Whether orjson can write `payload` back: it is nested at most `MAX_WRITTEN_DEPTH` deep (every value orjson
    read it writes). A small body with fewer brackets than that is not even tried, another is written once; a
    big one is walked (`within_written_depth`): one write of 25 MB, or a count of its brackets, holds the GIL for
    tens of ms."""
    if len(data) >= PIECES_FROM_BYTES:
        return within_written_depth(payload)
    if data.count(b"[") + data.count(b"{") <= MAX_WRITTEN_DEPTH:
        return True
    try:
        orjson.dumps(payload)
    except orjson.JSONEncodeError:
        return False
    return True


def within_written_depth(payload: dict[str, Any]) -> bool:
    """Whether no container of `payload` is more than `MAX_WRITTEN_DEPTH` deep, found in Python's small steps."""
    stack: list[tuple[dict[str, Any] | list[Any], int]] = [(payload, 1)]
    while stack:
        container, depth = stack.pop()
        for item in container.values() if isinstance(container, dict) else container:
            if isinstance(item, dict | list):
                if depth >= MAX_WRITTEN_DEPTH:
                    return False
                stack.append((item, depth + 1))
    return True


def parse_request(data: bytes) -> tuple[dict[str, Any], bool]:
    """The body as an object, and whether we can count it.

    JSON that orjson refuses but Python's json reads (a lone surrogate escape, `"\\ud800"`), or that is
    nested deeper than orjson writes, is legal JSON the upstream may accept: it is forwarded untouched
    rather than refused by us.
    """
    try:
        payload = parse_object(data)
        return payload, writable(data, payload)
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
    options: Options = NO_OPTIONS,
) -> Intake:
    # Joined here, in the worker: CPython copies a join of a megabyte or more without the GIL, so the
    # loop runs on meanwhile; joined on the loop, 30 MB would stop it for a copy's time.
    raw = b"".join(chunks)
    chunks.clear()  # the body is held once, not twice, while it is parsed
    payload: dict[str, Any] | None = None
    try:
        payload, countable = parse_request(decompress(raw, content_encoding, limit))
        counted = pipeline.count(raw, payload, wire, target=target, tenant=options.tenant) if countable else None
    except (BadRequest, RequestTooLarge) as refused:
        return unread(raw, payload, refused, pipeline=pipeline, options=options)
    return Intake(raw, payload, counted)


def unread(
    raw: bytes,
    payload: dict[str, Any] | None,
    refused: BadRequest | RequestTooLarge,
    *,
    pipeline: Pipeline,
    options: Options,
) -> Intake:
    """A body inflight cannot read, forwarded as sent when nothing needs it read; else `refused` stands."""
    model = payload.get("model") if payload is not None else None
    if pipeline.reads_body(model if isinstance(model, str) else None, options):
        raise refused
    return Intake(raw, {} if payload is None else payload, None, unread=refused.message)


async def read_request(
    chunks: list[bytes],
    content_encoding: str,
    pipeline: Pipeline,
    wire: WireFormat,
    *,
    limit: int,
    target: Target = UNROUTED,
    options: Options = NO_OPTIONS,
) -> Intake:
    """Join, decompress, parse and count (`target`: what the request's path says; `options`: the client's); a
    large or compressed body all in one worker thread, so the loop keeps serving others (a small gzip body can
    inflate to the whole limit)."""
    size = sum(map(len, chunks))
    if size > THREAD_THRESHOLD_BYTES or not is_identity(content_encoding):
        heavy = size >= HEAVY_BYTES
        return await in_thread(heavy, parse_and_count, chunks, content_encoding, pipeline, wire, limit, target, options)
    raw = b"".join(chunks)
    payload: dict[str, Any] | None = None
    try:
        payload, countable = parse_request(raw)
        if not countable:
            return Intake(raw, payload, None)
        model = payload.get("model")
        counting = functools.partial(pipeline.count, raw, payload, wire, target=target, tenant=options.tenant)
        if isinstance(model, str) and not is_loaded(pipeline.encoding_for(model).name):  # built on first use: ~1 s
            return Intake(raw, payload, await asyncio.to_thread(counting))
        return Intake(raw, payload, counting())
    except BadRequest as refused:
        return unread(raw, payload, refused, pipeline=pipeline, options=options)
