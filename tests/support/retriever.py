"""A scripted model that reads back what compaction took out, in each wire format, streaming or not.

Offered `inflight_retrieve` and shown a handle (`inflight:<16 hex>`) in its request, it says a few words and
calls the tool with the first handle it sees (or `handle`, when a test sets one). Given the tool's result, it
answers with a digest of exactly what it received (`digest:<sha256, 16 hex> seen:<its first 60 characters>`),
so a test can tell which original came back. Without the tool or a handle it answers "nothing to read back".
"""

from __future__ import annotations

import hashlib
import re
from typing import Any

import orjson

TOOL = "inflight_retrieve"
HANDLE = re.compile(r"inflight:[0-9a-f]{16}")
LOOKING = "Let me read that back. "


def digest_of(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def said_for(received: str) -> str:
    """The final answer to a result: what a test compares with the original it expects."""
    return f"digest:{digest_of(received)} seen:{received[:60]}"


class RetrievingModel:
    """Decides each answer from the request; `handle` replaces the one it would read (a test's foreign handle)."""

    def __init__(self) -> None:
        self.handle: str | None = None
        self.received: list[str] = []  # each tool result it was given

    def decide(self, api: str, payload: dict[str, Any]) -> tuple[str, str | None]:
        """(text, handle to call the tool with, or None for a final answer)."""
        result = last_result(api, payload)
        if result is not None:
            self.received.append(result)
            return said_for(result), None
        if not offers_tool(api, payload):
            return "nothing to read back", None
        history = payload.get("messages") or payload.get("input") or payload.get("contents") or []
        found = HANDLE.search(orjson.dumps(history).decode())
        handle = self.handle or (found.group(0) if found else None)
        return (LOOKING, handle) if handle else ("nothing to read back", None)

    def answer(
        self, api: str, payload: dict[str, Any], *, stream: bool | None = None
    ) -> tuple[bytes, list[bytes] | None]:
        """The JSON body, or the SSE events when the request streams (`stream`: as its path says, else its body)."""
        text, handle = self.decide(api, payload)
        model = str(payload.get("model"))
        stream = payload.get("stream") is True if stream is None else stream
        if api == "gemini":
            return (b"", gemini_events(text, handle)) if stream else (orjson.dumps(gemini(text, handle)), None)
        if api == "chat":
            usage = (payload.get("stream_options") or {}).get("include_usage")
            return (
                (b"", chat_events(model, text, handle, usage=bool(usage)))
                if stream
                else (chat(model, text, handle), None)
            )
        if api == "responses":
            return (
                (b"", responses_events(model, text, handle))
                if stream
                else (orjson.dumps(response(model, text, handle)), None)
            )
        return (
            (b"", messages_events(model, text, handle))
            if stream
            else (orjson.dumps(message(model, text, handle)), None)
        )


def offers_tool(api: str, payload: dict[str, Any]) -> bool:
    if api == "gemini":
        declarations = [d for tool in payload.get("tools") or [] for d in tool.get("functionDeclarations") or []]
        return any(declaration.get("name") == TOOL for declaration in declarations)
    for tool in payload.get("tools") or []:
        name = (tool.get("function") or {}).get("name") if api == "chat" else tool.get("name")
        if name == TOOL:
            return True
    return False


def last_result(api: str, payload: dict[str, Any]) -> str | None:
    """The tool's result, if the request ends with one."""
    if api == "chat":
        last = (payload.get("messages") or [{}])[-1]
        ours = last.get("role") == "tool" and str(last.get("tool_call_id")).startswith("call_retr")
        return str(last.get("content")) if ours else None
    if api == "gemini":
        parts = ((payload.get("contents") or [{}])[-1]).get("parts") or [{}]
        response = parts[-1].get("functionResponse") or {}
        return str((response.get("response") or {}).get("output")) if response.get("name") == TOOL else None
    if api == "responses":
        items = payload.get("input")
        last = items[-1] if isinstance(items, list) and items else {}
        ours = last.get("type") == "function_call_output" and str(last.get("call_id")).startswith("call_retr")
        return str(last.get("output")) if ours else None
    last = (payload.get("messages") or [{}])[-1]
    content = last.get("content")
    block = content[-1] if isinstance(content, list) and content else {}
    ours = block.get("type") == "tool_result" and str(block.get("tool_use_id")).startswith("toolu_retr")
    return str(block.get("content")) if ours else None


def chat(model: str, text: str, handle: str | None) -> bytes:
    message: dict[str, Any] = {"role": "assistant", "content": text, "refusal": None}
    if handle:
        function = {"name": TOOL, "arguments": orjson.dumps({"handle": handle}).decode()}
        message["tool_calls"] = [{"id": "call_retr1", "type": "function", "function": function}]
    choice = {"index": 0, "message": message, "logprobs": None, "finish_reason": "tool_calls" if handle else "stop"}
    usage = {"prompt_tokens": 100, "completion_tokens": 10, "total_tokens": 110}
    body = {"id": "chatcmpl-r", "object": "chat.completion", "created": 1, "model": model, "choices": [choice]}
    return orjson.dumps({**body, "usage": usage})


def chat_events(model: str, text: str, handle: str | None, *, usage: bool) -> list[bytes]:
    base = {"id": "chatcmpl-r", "object": "chat.completion.chunk", "created": 1, "model": model}

    def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
        choice = {"index": 0, "delta": delta, "finish_reason": finish}
        return b"data: " + orjson.dumps({**base, "choices": [choice]}) + b"\n\n"

    events = [chunk({"role": "assistant", "content": ""})]
    events += [chunk({"content": piece}) for piece in (text[: len(text) // 2], text[len(text) // 2 :])]
    if handle:
        start = {"index": 0, "id": "call_retr1", "type": "function", "function": {"name": TOOL, "arguments": ""}}
        events.append(chunk({"tool_calls": [start]}))
        arguments = orjson.dumps({"handle": handle}).decode()
        for piece in (arguments[:10], arguments[10:]):
            events.append(chunk({"tool_calls": [{"index": 0, "function": {"arguments": piece}}]}))
    events.append(chunk({}, "tool_calls" if handle else "stop"))
    if usage:
        counts = {"prompt_tokens": 100, "completion_tokens": 10, "total_tokens": 110}
        events.append(b"data: " + orjson.dumps({**base, "choices": [], "usage": counts}) + b"\n\n")
    return [*events, b"data: [DONE]\n\n"]


def response_items(text: str, handle: str | None) -> list[dict[str, Any]]:
    content = [{"type": "output_text", "text": text, "annotations": []}]
    items: list[dict[str, Any]] = [
        {"id": "msg_r", "type": "message", "status": "completed", "role": "assistant", "content": content}
    ]
    if handle:
        arguments = orjson.dumps({"handle": handle}).decode()
        call = {"id": "fc_r", "type": "function_call", "status": "completed", "call_id": "call_retr1"}
        items.append({**call, "name": TOOL, "arguments": arguments})
    return items


def response(model: str, text: str, handle: str | None) -> dict[str, Any]:
    usage = {
        "input_tokens": 100,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": 10,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": 110,
    }
    return {
        "id": "resp_r",
        "object": "response",
        "created_at": 1,
        "status": "completed",
        "model": model,
        "output": response_items(text, handle),
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        "usage": usage,
    }


def named(document: dict[str, Any]) -> bytes:
    return b"event: " + str(document["type"]).encode() + b"\ndata: " + orjson.dumps(document) + b"\n\n"


def responses_events(model: str, text: str, handle: str | None) -> list[bytes]:
    whole = response(model, text, handle)
    opening = {**whole, "status": "in_progress", "output": [], "usage": None}
    documents: list[dict[str, Any]] = [
        {"type": "response.created", "response": opening},
        {"type": "response.in_progress", "response": opening},
    ]
    message, *calls = response_items(text, handle)
    started = {**message, "status": "in_progress", "content": []}
    part = {"type": "output_text", "text": "", "annotations": []}
    documents += [
        {"type": "response.output_item.added", "output_index": 0, "item": started},
        {
            "type": "response.content_part.added",
            "output_index": 0,
            "item_id": "msg_r",
            "content_index": 0,
            "part": part,
        },
    ]
    for piece in (text[: len(text) // 2], text[len(text) // 2 :]):
        delta = {"output_index": 0, "item_id": "msg_r", "content_index": 0, "delta": piece, "logprobs": []}
        documents.append({"type": "response.output_text.delta", **delta})
    documents += [
        {
            "type": "response.output_text.done",
            "output_index": 0,
            "item_id": "msg_r",
            "content_index": 0,
            "text": text,
            "logprobs": [],
        },
        {
            "type": "response.content_part.done",
            "output_index": 0,
            "item_id": "msg_r",
            "content_index": 0,
            "part": message["content"][0],
        },
        {"type": "response.output_item.done", "output_index": 0, "item": message},
    ]
    for call in calls:
        documents += [
            {
                "type": "response.output_item.added",
                "output_index": 1,
                "item": {**call, "arguments": "", "status": "in_progress"},
            },
            {
                "type": "response.function_call_arguments.delta",
                "output_index": 1,
                "item_id": "fc_r",
                "delta": call["arguments"],
            },
            {
                "type": "response.function_call_arguments.done",
                "output_index": 1,
                "item_id": "fc_r",
                "arguments": call["arguments"],
            },
            {"type": "response.output_item.done", "output_index": 1, "item": call},
        ]
    documents.append({"type": "response.completed", "response": whole})
    return [named({**document, "sequence_number": n}) for n, document in enumerate(documents)]


def message(model: str, text: str, handle: str | None) -> dict[str, Any]:
    content: list[dict[str, Any]] = [{"type": "text", "text": text}]
    if handle:
        content.append({"type": "tool_use", "id": "toolu_retr1", "name": TOOL, "input": {"handle": handle}})
    usage = {"input_tokens": 100, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0, "output_tokens": 10}
    return {
        "id": "msg_r",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": "tool_use" if handle else "end_turn",
        "stop_sequence": None,
        "usage": usage,
    }


def messages_events(model: str, text: str, handle: str | None) -> list[bytes]:
    whole = message(model, text, handle)
    opening = {**whole, "content": [], "stop_reason": None, "usage": {**whole["usage"], "output_tokens": 1}}
    documents: list[dict[str, Any]] = [
        {"type": "message_start", "message": opening},
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
    ]
    for piece in (text[: len(text) // 2], text[len(text) // 2 :]):
        documents.append({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": piece}})
    documents.append({"type": "content_block_stop", "index": 0})
    if handle:
        use = {"type": "tool_use", "id": "toolu_retr1", "name": TOOL, "input": {}}
        arguments = orjson.dumps({"handle": handle}).decode()
        documents += [
            {"type": "content_block_start", "index": 1, "content_block": use},
            {
                "type": "content_block_delta",
                "index": 1,
                "delta": {"type": "input_json_delta", "partial_json": arguments},
            },
            {"type": "content_block_stop", "index": 1},
        ]
    stop = {"stop_reason": whole["stop_reason"], "stop_sequence": None}
    documents += [
        {"type": "message_delta", "delta": stop, "usage": {"output_tokens": 10}},
        {"type": "message_stop"},
    ]
    return [named(document) for document in documents]


GEMINI_USAGE = {"promptTokenCount": 100, "candidatesTokenCount": 10, "totalTokenCount": 110}


def gemini_call(handle: str) -> dict[str, Any]:
    """A call as Gemini makes it: no `id`, its arguments an object."""
    return {"functionCall": {"name": TOOL, "args": {"handle": handle}}}


def gemini(text: str, handle: str | None) -> dict[str, Any]:
    parts: list[dict[str, Any]] = [{"text": text}, *([gemini_call(handle)] if handle else [])]
    candidate = {"content": {"role": "model", "parts": parts}, "finishReason": "STOP", "index": 0}
    return {"candidates": [candidate], "usageMetadata": GEMINI_USAGE, "responseId": "gemini-r"}


def gemini_events(text: str, handle: str | None) -> list[bytes]:
    """The text in two chunks, then the call if any; the last chunk has the finish; every one has the counts."""
    pieces: list[dict[str, Any]] = [{"text": text[: len(text) // 2]}, {"text": text[len(text) // 2 :]}]
    pieces += [gemini_call(handle)] if handle else []
    events = []
    for n, part in enumerate(pieces):
        candidate: dict[str, Any] = {"content": {"role": "model", "parts": [part]}, "index": 0}
        if n == len(pieces) - 1:
            candidate["finishReason"] = "STOP"
        chunk = {"candidates": [candidate], "usageMetadata": GEMINI_USAGE, "responseId": "gemini-r"}
        events.append(b"data: " + orjson.dumps(chunk) + b"\r\n\r\n")
    return events
