"""`POST /v1/responses/compact`: the upstream's, or ours when it has none.

OpenAI's Responses API compacts a conversation on request: the answer (`object:
"response.compaction"`) is the items to keep plus one `compaction` item whose `encrypted_content`
only OpenAI can read, and the client sends those in place of its history from then on (Codex
does, when its own auto-compaction is due). vLLM, llama.cpp, Ollama and most gateways answer the
route 404 (or 405, 501). Then inflight answers it itself: the conversation compacted as on any
turn, forced down to its target, in the same shape, with the summary sealed in a `compaction`
item of ours (`inflight.formats.compaction_items`) that the Responses format opens again when a
later request carries it. Any other answer of the upstream (a success, an error of its own) is
relayed as it came.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any

import orjson
from starlette.requests import Request

from inflight.config import Limits
from inflight.formats import Responses
from inflight.formats.compaction_items import ItemKey
from inflight.formats.seam import text_of_parts
from inflight.http.body import read_limited
from inflight.http.conversation_handler import discovery, options_of, post_upstream
from inflight.http.disconnect import cancelled_on_disconnect
from inflight.http.exchange import Exchange
from inflight.http.intake import read_request
from inflight.http.relay import Relay, relay
from inflight.pipeline.engine import Pipeline
from inflight.upstream.client import UpstreamClient
from inflight.upstream.exceptions import UpstreamErrors
from inflight.upstream.headers import response_headers
from inflight.upstream.response import Response

NOT_SERVED = frozenset({404, 405, 501})  # the upstream has no such route
MAX_ANSWER_BYTES = 64 * 1024  # an upstream's "no such route" is short


class CompactHandler:
    def __init__(
        self, wire: Responses, item_key: ItemKey, pipeline: Pipeline, upstream: UpstreamClient, *, limits: Limits
    ) -> None:
        self.wire = wire
        self.item_key = item_key
        self.pipeline = pipeline
        self.upstream = upstream
        self.limits = limits

    async def __call__(self, request: Request, exchange: Exchange) -> Relay:
        encoding = request.headers.get("content-encoding", "")
        chunks = await read_limited(request, self.limits)
        intake = await read_request(chunks, encoding, self.pipeline, self.wire, limit=self.limits.max_body_bytes)
        counted = intake.counted
        body, rewritten = intake.raw, False
        if counted is not None and counted.request.expanded:  # items of ours: the upstream cannot read them
            body, rewritten = self.wire.write(counted.payload, counted.request, counted.request.messages), True
        async with cancelled_on_disconnect(request.scope, request.receive):
            response = await post_upstream(self.upstream, request, exchange, body, rewritten=rewritten)
            if (
                response.status not in NOT_SERVED
                or counted is None
                or not isinstance(counted.payload.get("input"), list)
            ):
                return relay(response, exchange)
            theirs = await read_short(response, self.upstream.host)  # its "no such route", kept to relay if need be
            options = replace(options_of(request, self.wire), mode="force")  # compacted, fit or not
            accounting = await self.pipeline.account(counted, discovery(self.upstream, request), tenant=options.tenant)
            prepared = await self.pipeline.prepare(counted, accounting, options)
        output = (
            self.sealed(counted.payload["input"], orjson.loads(prepared.body)["input"]) if prepared.rewritten else None
        )
        if output is None:  # nothing summarized (not compactable, compaction off or failed): the upstream's answer
            exchange.note("compacted_by", "none")
            return json_answer(theirs, exchange, status=response.status)
        exchange.headers = dict(prepared.headers)
        exchange.note_all(accounting.log_fields() | prepared.fields | {"compacted_by": "inflight"})
        answer = {
            "id": f"resp_compact_{uuid.uuid4().hex}",
            "object": "response.compaction",
            "created_at": int(time.time()),
            "output": output,
            "usage": {
                "input_tokens": accounting.prompt_tokens,
                "output_tokens": 0,
                "total_tokens": accounting.prompt_tokens,
            },
        }
        return json_answer(orjson.dumps(answer), exchange)

    def sealed(self, original: list[Any], compacted: object) -> list[Any] | None:
        """The compacted items with the messages the compaction wrote (the summary, and an earlier one of
        ours it kept) sealed in one compaction item, where the first stood; None when it wrote none."""
        if not isinstance(compacted, list):
            return None
        theirs = {orjson.dumps(item) for item in original}
        written = [
            i
            for i, item in enumerate(compacted)
            if isinstance(item, dict)
            and item.get("type") == "message"
            and item.get("role") == "user"
            and orjson.dumps(item) not in theirs
        ]
        if not written:
            return None
        text = "\n\n".join(text_of_parts(compacted[i].get("content")) for i in written)
        item = {"type": "compaction", "id": f"cmp_{uuid.uuid4().hex}", "encrypted_content": self.item_key.seal(text)}
        return [
            item if i == written[0] else other
            for i, other in enumerate(compacted)
            if i == written[0] or i not in written
        ]


async def read_short(response: Response, host: str) -> bytes:
    """An answer read whole up to `MAX_ANSWER_BYTES` (an upstream's "no such route" is short; past that
    it is cut), and the response closed."""
    chunks: list[bytes] = []
    try:
        size = 0
        with UpstreamErrors(host):
            async for chunk in response.aiter_raw():
                chunks.append(chunk)
                size += len(chunk)
                if size > MAX_ANSWER_BYTES:
                    break
    finally:
        await response.aclose()
    return b"".join(chunks)[:MAX_ANSWER_BYTES]


def json_answer(body: bytes, exchange: Exchange, *, status: int = 200) -> Relay:
    """A JSON answer of ours (or the upstream's, read whole), relayed like any other: the exchange's
    `x-inflight-*` headers, its log line when it is out."""

    async def whole() -> AsyncIterator[bytes]:
        yield body

    async def nothing_to_close() -> None:
        return None

    own = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    return Relay(status, response_headers(own, exchange.headers), whole(), nothing_to_close, exchange, streaming=False)
