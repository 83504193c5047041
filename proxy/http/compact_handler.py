"""`POST /v1/responses/compact`: the upstream's, or ours when it has none.

OpenAI's Responses API compacts a conversation on request: the answer (`object:
"response.compaction"`) is the items to keep plus one `compaction` item whose `encrypted_content`
only OpenAI can read, and the client sends those in place of its history from then on (Codex
does, when its own auto-compaction is due). vLLM, llama.cpp, Ollama and most gateways answer the
route 404 (or 405, 501). Then inflight answers it itself: the conversation compacted as on any
turn, forced down to its target, in the same shape, with the summary sealed in a `compaction`
item of ours (`proxy.formats.compaction_items`) that the Responses format opens again when a
later request carries it. Any other answer of the upstream (a success, an error of its own) is
relayed as it came.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import replace
from typing import Any

import orjson
from starlette.requests import Request

from proxy.config import Limits
from proxy.formats import Responses
from proxy.formats.compaction_items import ItemKey
from proxy.http.body import read_limited
from proxy.http.conversation_handler import discovery, options_of
from proxy.http.disconnect import cancelled_on_disconnect
from proxy.http.exchange import Exchange
from proxy.http.intake import read_request
from proxy.http.relay import Relay, relay
from proxy.http.target import checked_path
from proxy.pipeline.engine import Pipeline
from proxy.upstream.client import UpstreamClient
from proxy.upstream.exceptions import upstream_errors
from proxy.upstream.response import Response

NOT_SERVED = frozenset({404, 405, 501})  # the upstream has no such route
MAX_ANSWER_BYTES = 64 * 1024  # an upstream's "no such route" is short; a longer answer is relayed


class CompactHandler:
    def __init__(
        self, wire: Responses, item_key: ItemKey, pipeline: Pipeline, upstream: UpstreamClient, *, limits: Limits
    ) -> None:
        self.wire = wire
        self.item_key = item_key
        self.pipeline = pipeline
        self.upstream = upstream
        self.limits = limits

    async def __call__(self, request: Request, exchange: Exchange) -> Relay | JsonAnswer:
        encoding = request.headers.get("content-encoding", "")
        chunks = await read_limited(request, self.limits)
        intake = await read_request(chunks, encoding, self.pipeline, self.wire, limit=self.limits.max_body_bytes)
        async with cancelled_on_disconnect(request.receive):
            target = self.upstream.target_for(checked_path(request.scope), request.scope["query_string"])
            headers = self.upstream.headers_for(request.scope["headers"])
            exchange.upstream_sending()
            response = await self.upstream.open("POST", target, headers=headers, content=intake.raw)
            exchange.upstream_answered()
            if response.status not in NOT_SERVED or intake.counted is None:
                return relay(response, exchange)
            await read_short(response, self.upstream.host)  # the upstream's 404: read, and answered by us
            exchange.note("compacted_by", "inflight")
            counted = intake.counted
            accounting = await self.pipeline.account(counted, discovery(self.upstream, request))
            options = replace(options_of(request, self.wire), mode="force")  # compacted, fit or not
            prepared = await self.pipeline.prepare(counted, accounting, options)
        exchange.headers = dict(prepared.headers)
        exchange.note_all(accounting.log_fields() | prepared.fields)
        sent = orjson.loads(prepared.body) if prepared.rewritten else counted.payload
        output = self.sealed(counted.payload.get("input"), sent.get("input"))
        before, after = accounting.prompt_tokens, accounting.calibrated(prepared.sent_tokens)
        body = {
            "id": f"resp_compact_{uuid.uuid4().hex}",
            "object": "response.compaction",
            "created_at": int(time.time()),
            "output": output,
            "usage": {"input_tokens": before, "output_tokens": max(after - before, 0), "total_tokens": before},
        }
        return JsonAnswer(orjson.dumps(body), exchange)

    def sealed(self, original: object, compacted: object) -> list[Any]:
        """The compacted items, each message the compaction wrote (the summary) sealed in a compaction item."""
        if not isinstance(compacted, list):
            return [{"type": "message", "role": "user", "content": compacted}]
        theirs = [orjson.dumps(item) for item in original] if isinstance(original, list) else []
        output: list[Any] = []
        for item in compacted:
            new = isinstance(item, dict) and item.get("type") == "message" and orjson.dumps(item) not in theirs
            if new and item.get("role") == "user":
                text = "".join(part.get("text", "") for part in item.get("content") or [] if isinstance(part, dict))
                compaction = {"type": "compaction", "id": f"cmp_{uuid.uuid4().hex}"}
                output.append(compaction | {"encrypted_content": self.item_key.seal(text)})
            else:
                output.append(item)
        return output


async def read_short(response: Response, host: str) -> None:
    """Read (at most a little of) an answer that is not relayed, so its connection can be reused or closed."""
    try:
        size = 0
        async with upstream_errors(host):
            async for chunk in response.aiter_raw():
                size += len(chunk)
                if size > MAX_ANSWER_BYTES:
                    break
    finally:
        await response.aclose()


class JsonAnswer:
    """Our own JSON answer, with the exchange's `x-inflight-*` headers and its log line."""

    def __init__(self, body: bytes, exchange: Exchange) -> None:
        self.body = body
        self.exchange = exchange

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        self.exchange.status = 200
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(self.body)).encode())]
        headers += [(k.encode("latin-1"), v.encode("latin-1")) for k, v in self.exchange.headers.items()]
        try:
            await send({"type": "http.response.start", "status": 200, "headers": headers})
            await send({"type": "http.response.body", "body": self.body, "more_body": False})
        finally:
            self.exchange.finish()
