"""Chat Completions (`POST /v1/chat/completions`): the format whose shape the core uses.

Reading translates nothing: the body's `messages` are the core's messages and the body itself is the
view (no copy). Nothing in a chat completion is opaque. Writing replaces the client's messages with
the compacted ones and keeps every other field. Refusals are recognised in the wordings of the many
servers that offer this API (`inflight.policy.refusals`). Usage is `usage.prompt_tokens`, in the JSON
body or the stream's last event (`stream_options.include_usage`). Errors have OpenAI's shape,
`{"error": {"message", "type", "param", "code"}}`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson

from inflight.formats.seam import (
    OPENAI_ERRORS,
    UNROUTED,
    CoreRequest,
    FormatSpec,
    Message,
    OpenAIShape,
    Route,
    TakenOver,
    Target,
    UpstreamCall,
    usage_count,
)
from inflight.policy.refusals import Refusal, detect, detect_event


class ChatCompletions(OpenAIShape):
    spec = FormatSpec(
        name="chat_completions",
        routes=(Route("/v1/chat/completions"),),
        errors=OPENAI_ERRORS,
        forwarded=("/v1/{path:path}",),  # the rest of the OpenAI API (models, embeddings, files), unchanged
        in_place_summaries=True,
    )  # no session header of its own: the key comes from `x-inflight-session`, else the head

    def read(self, payload: dict[str, Any], target: Target = UNROUTED, *, tenant: str = "") -> CoreRequest | None:
        model = payload.get("model")
        messages = payload.get("messages")
        if not isinstance(model, str) or not is_message_list(messages):
            return None
        return CoreRequest(model=model, view=payload, output_limit=output_limit(payload))

    def write(self, payload: dict[str, Any], request: CoreRequest, messages: list[Message]) -> bytes:
        return orjson.dumps({**payload, "messages": messages})

    def refusal(self, status: int, body: bytes, *, content_encoding: bytes | None) -> Refusal | None:
        return detect(status, body, content_encoding=content_encoding)

    def stream_pending(self, event: bytes) -> bool:
        return False  # the first event is already the answer or the error

    def stream_refusal(self, event: bytes) -> Refusal | None:
        return detect_event(event)

    def prompt_tokens(self, document: object) -> int | None:
        return usage_count(document, "prompt_tokens")

    def output_tokens(self, document: object) -> int | None:
        return usage_count(document, "completion_tokens")

    def take_over(self, payload: dict[str, Any], *, prompt_tokens: int, count: Callable[[str], int]) -> TakenOver:
        return TakenOver(payload)  # Chat Completions has no server-side context management

    def rejects_server_compaction(self, status: int, body: bytes) -> bool:
        return False

    def summary_request(
        self, messages: list[Message], *, model: str, max_tokens: int, tools: object = None
    ) -> UpstreamCall:
        body: dict[str, Any] = {
            "model": model,
            "messages": messages,
            "max_tokens": max_tokens,
            "temperature": 0,
            "stream": False,
        }
        if tools:  # the prefix as the upstream cached it, tools included, but none may be called
            body |= {"tools": tools, "tool_choice": "none"}
        return UpstreamCall("/v1/chat/completions", body)

    def summary_reply(self, document: object) -> tuple[str, str | None]:
        choices = (document.get("choices") if isinstance(document, dict) else None) or []
        first = choices[0] if isinstance(choices, list) and isinstance(choices[0], dict) else {}
        message = first.get("message")
        content = message.get("content") if isinstance(message, dict) else None
        reason = first.get("finish_reason")
        return (content if isinstance(content, str) else ""), (reason if isinstance(reason, str) else None)


def is_message_list(messages: object) -> bool:
    return isinstance(messages, list) and all(isinstance(m, dict) for m in messages)


def output_limit(payload: dict[str, Any]) -> int | None:
    """The reply length the client asked for: `max_completion_tokens`, else the older `max_tokens`."""
    for key in ("max_completion_tokens", "max_tokens"):
        value = payload.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


CHAT_COMPLETIONS = ChatCompletions()
