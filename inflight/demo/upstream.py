"""The demo's upstream: a scripted OpenAI-compatible server that plays the model of a recorded conversation.

`POST /v1/chat/completions` answers with the recording's next assistant message (found after the
request's last message, which compaction always keeps as it came), else with a short scripted line
(a client of your own in `inflight demo --serve`). Its `usage.prompt_tokens` is its own count of
what arrived, and a prompt over its window is refused as OpenAI refuses it, so the proxy sees what
it would see from a real upstream. The proxy's summary requests get an extractive note
(`inflight.demo.summary`). `GET /v1/models` tells the window. Nothing here needs a key or the network.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from inflight.compaction.conversation import Message
from inflight.demo.summary import PROMPT_OPENING, handoff_note, is_summary_request
from inflight.formats.seam import openai_error
from inflight.pipeline.evaluation import plural
from inflight.tokens import TokenCounter

ENCODING = "o200k_base"
SCRIPTED_REPLY = (
    "This is inflight's demo upstream: no model here. It received {messages} ({tokens:,} prompt "
    "tokens as it counts them); inflight's headers on this answer say what the proxy did to them."
)


@dataclass
class Seen:
    """What the upstream was sent: the conversation's requests and the proxy's summary requests."""

    requests: int = 0
    prompt_tokens: int = 0
    summaries: int = 0
    summary_prompt_tokens: int = 0
    summary_completion_tokens: int = 0
    refused: int = 0
    usage: list[int] = field(default_factory=list)  # each conversation request's prompt tokens, in order


def error(message: str, *, status: int, code: str | None = None, param: str | None = None) -> Response:
    body = openai_error(message, error_type="invalid_request_error", param=param, code=code)
    return Response(body, status_code=status, media_type="application/json")


def completion(model: str, message: Message, *, prompt_tokens: int, completion_tokens: int) -> dict[str, Any]:
    finish = "tool_calls" if message.get("tool_calls") else "stop"
    return {
        "id": f"chatcmpl-demo-{time.monotonic_ns()}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": finish}],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
    }


class ScriptedUpstream:
    """The ASGI app, and what it saw (`seen`)."""

    def __init__(
        self, messages: Sequence[Message], *, model: str, window: int, prompt_opening: str = PROMPT_OPENING
    ) -> None:
        self.model = model
        self.prompt_opening = prompt_opening  # how the proxy's summary prompt begins (`summarize.prompt_file`)
        self.window = window
        self.counter = TokenCounter()
        self.seen = Seen()
        # Each recorded message (as JSON) -> the assistant message that follows it in the recording.
        self.replies: dict[bytes, Message] = {}
        for message, following in itertools.pairwise(messages):
            if following.get("role") == "assistant":
                self.replies.setdefault(orjson.dumps(message, option=orjson.OPT_SORT_KEYS), following)
        routes = [
            Route("/v1/models", self.models, methods=["GET"]),
            Route("/v1/chat/completions", self.chat, methods=["POST"]),
            Route("/{path:path}", self.elsewhere, methods=["GET", "POST", "PUT", "PATCH", "DELETE"]),
        ]
        self.app = Starlette(routes=routes)

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        await self.app(scope, receive, send)

    async def models(self, request: Request) -> Response:
        entry = {"id": self.model, "object": "model", "owned_by": "inflight-demo", "context_length": self.window}
        return Response(orjson.dumps({"object": "list", "data": [entry]}), media_type="application/json")

    async def elsewhere(self, request: Request) -> Response:
        message = f"the demo upstream serves only POST /v1/chat/completions and GET /v1/models, not {request.url.path}"
        return error(message, status=404, code="not_found")

    async def chat(self, request: Request) -> Response:
        try:
            payload = orjson.loads(await request.body())
        except orjson.JSONDecodeError:
            return error("the body is not JSON", status=400)
        messages = payload.get("messages") if isinstance(payload, dict) else None
        if not isinstance(messages, list) or not messages or not all(isinstance(m, dict) for m in messages):
            return error("messages must be a non-empty list of objects", status=400, param="messages")
        model = str(payload.get("model") or self.model)
        # Counting a few thousand tokens is quick, but the proxy shares this event loop: off it all the same.
        tokens = await asyncio.to_thread(lambda: self.counter.count_request(payload, ENCODING).total)
        if is_summary_request(messages, self.prompt_opening):
            note = await asyncio.to_thread(handoff_note, messages, self.prompt_opening)
            written = len(self.counter.encoding(ENCODING).encode(note))
            self.seen.summaries += 1
            self.seen.summary_prompt_tokens += tokens
            self.seen.summary_completion_tokens += written
            reply = {"role": "assistant", "content": note}
            return self.answer(payload, completion(model, reply, prompt_tokens=tokens, completion_tokens=written))
        if tokens > self.window:
            self.seen.refused += 1
            message = (
                f"This model's maximum context length is {self.window} tokens. However, your messages resulted in "
                f"{tokens} tokens. Please reduce the length of the messages."
            )
            return error(message, status=400, code="context_length_exceeded", param="messages")
        self.seen.requests += 1
        self.seen.prompt_tokens += tokens
        self.seen.usage.append(tokens)
        reply = self.reply_to(messages, tokens)
        written = len(self.counter.encoding(ENCODING).encode(orjson.dumps(reply).decode()))
        return self.answer(payload, completion(model, reply, prompt_tokens=tokens, completion_tokens=written))

    def reply_to(self, messages: list[Message], tokens: int) -> Message:
        """The recording's next assistant message after the request's last one, else the scripted line."""
        recorded = self.replies.get(orjson.dumps(messages[-1], option=orjson.OPT_SORT_KEYS))
        if recorded is not None:
            return {"role": "assistant", "content": recorded.get("content"), "refusal": None} | (
                {"tool_calls": recorded["tool_calls"]} if recorded.get("tool_calls") else {}
            )
        reply = SCRIPTED_REPLY.format(messages=plural(len(messages), "message"), tokens=tokens)
        return {"role": "assistant", "content": reply}

    def answer(self, payload: dict[str, Any], body: dict[str, Any]) -> Response:
        """The completion as JSON, or as the events of a stream when the request asked for one."""
        if not payload.get("stream"):
            return Response(orjson.dumps(body), media_type="application/json")
        usage = bool((payload.get("stream_options") or {}).get("include_usage"))
        return StreamingResponse(stream_of(body, include_usage=usage), media_type="text/event-stream")


async def stream_of(body: dict[str, Any], *, include_usage: bool) -> AsyncIterator[bytes]:
    """A whole completion as Chat Completions stream events: the message in one delta, then how it ended."""
    base = {key: body[key] for key in ("id", "created", "model")} | {"object": "chat.completion.chunk"}
    choice = body["choices"][0]
    message = choice["message"]
    delta: dict[str, Any] = {"role": "assistant", "content": message.get("content")}
    if message.get("tool_calls"):
        delta["tool_calls"] = [{"index": i, **call} for i, call in enumerate(message["tool_calls"])]
    events: list[dict[str, Any]] = [
        base | {"choices": [{"index": 0, "delta": delta, "finish_reason": None}]},
        base | {"choices": [{"index": 0, "delta": {}, "finish_reason": choice["finish_reason"]}]},
    ]
    if include_usage:
        events.append(base | {"choices": [], "usage": body["usage"]})
    for event in events:
        yield b"data: " + orjson.dumps(event) + b"\n\n"
    yield b"data: [DONE]\n\n"
