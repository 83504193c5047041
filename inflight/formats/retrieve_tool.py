"""The `inflight_retrieve` tool in each wire format's own shape, for a whole JSON answer.

Each shape adds the tool's definition to a body (last among the tools, always the same bytes, so the tools'
part of the prompt cache is written once), finds the model's calls to it in an answer, writes the body that
continues the conversation with those calls answered, and takes the calls out of the answer the client gets.
A format without a shape here (`shape_of` returns None) never offers the tool. Streams are stitched by
`inflight.formats.retrieve_stream`.
"""

from __future__ import annotations

from typing import Any, Protocol

import orjson

from inflight.compaction.retrieval import DESCRIPTION, PARAMETERS, TOOL_NAME
from inflight.formats.seam import WireFormat
from inflight.frozen import frozen

Document = dict[str, Any]


@frozen
class Call:
    """One call of the model's to `inflight_retrieve`: its id and its arguments (JSON text)."""

    id: str
    arguments: str


class ToolShape(Protocol):
    """How one wire format carries the tool, its calls and their results."""

    def with_tool(self, payload: Document) -> Document:
        """The body with the tool added after the client's own."""
        ...

    def whole_of(self, answer: object) -> Document | None:
        """A whole answer as one JSON object (None: not an answer of this format)."""
        ...

    def calls(self, answer: Document) -> tuple[list[Call], bool]:
        """The answer's calls to the tool, and whether it also calls the client's own tools."""
        ...

    def continued(self, payload: Document, answer: Document, results: list[tuple[Call, str]]) -> Document:
        """The body that continues `payload` with the answer's output and each call's result."""
        ...

    def without_calls(self, answer: Document, earlier: list[Document]) -> Document:
        """The answer the client gets: the earlier rounds' output and this one's, without the tool's calls."""
        ...


def as_document(answer: object) -> Document | None:
    """An answer that is one JSON object, as it is."""
    return answer if isinstance(answer, dict) else None


def offered(tools: object) -> bool:
    """Whether a request offers tools at all (the tool is added only then)."""
    return isinstance(tools, list) and bool(tools)


def summed_usage(answer: Document, earlier: list[Document], keys: tuple[str, ...], *, field: str = "usage") -> None:
    """Add the earlier rounds' counts (`keys` of their `field`) to the answer's (in place)."""
    usage = answer.get(field)
    if not isinstance(usage, dict):
        return
    for document in earlier:
        other = document.get(field)
        if not isinstance(other, dict):
            continue
        for key in keys:
            if isinstance(usage.get(key), int) and isinstance(other.get(key), int):
                usage[key] += other[key]


class ChatShape:
    """Chat Completions: a function in `tools`, calls in `choices[0].message.tool_calls`, results as `tool`
    messages."""

    usage_keys = ("prompt_tokens", "completion_tokens", "total_tokens")
    definition: Document = {  # noqa: RUF012 (never mutated: serialized as it is)
        "type": "function",
        "function": {"name": TOOL_NAME, "description": DESCRIPTION, "parameters": PARAMETERS},
    }

    def with_tool(self, payload: Document) -> Document:
        return {**payload, "tools": [*payload.get("tools", []), self.definition]}

    def whole_of(self, answer: object) -> Document | None:
        return as_document(answer)

    def calls(self, answer: Document) -> tuple[list[Call], bool]:
        message = _first_message(answer)
        ours, others = [], False
        for call in message.get("tool_calls") or []:
            function = call.get("function") if isinstance(call, dict) else None
            if isinstance(function, dict) and function.get("name") == TOOL_NAME:
                ours.append(Call(str(call.get("id")), str(function.get("arguments") or "")))
            else:
                others = True
        return ours, others

    def continued(self, payload: Document, answer: Document, results: list[tuple[Call, str]]) -> Document:
        message = _first_message(answer)
        said: Document = {"role": "assistant", "content": message.get("content")}
        said["tool_calls"] = message.get("tool_calls")
        replies = [{"role": "tool", "tool_call_id": call.id, "content": text} for call, text in results]
        return {**payload, "messages": [*payload["messages"], said, *replies]}

    def without_calls(self, answer: Document, earlier: list[Document]) -> Document:
        out: Document = orjson.loads(orjson.dumps(answer))
        choices = out.get("choices")
        if not isinstance(choices, list) or not choices or not isinstance(choices[0].get("message"), dict):
            return out
        message = choices[0]["message"]
        texts = [_first_message(document).get("content") for document in earlier]
        texts.append(message.get("content"))
        joined = "".join(text for text in texts if isinstance(text, str))
        message["content"] = joined or message.get("content")
        kept = [c for c in message.get("tool_calls") or [] if (c.get("function") or {}).get("name") != TOOL_NAME]
        if kept:
            message["tool_calls"] = kept
        else:
            message.pop("tool_calls", None)
            if choices[0].get("finish_reason") == "tool_calls":
                choices[0]["finish_reason"] = "stop"
        summed_usage(out, earlier, self.usage_keys)
        return out


def _first_message(answer: Document) -> Document:
    choices = answer.get("choices")
    first = choices[0] if isinstance(choices, list) and choices and isinstance(choices[0], dict) else {}
    message = first.get("message")
    return message if isinstance(message, dict) else {}


class ResponsesShape:
    """The Responses API: a function tool, calls as `function_call` output items, results as
    `function_call_output` items."""

    usage_keys = ("input_tokens", "output_tokens", "total_tokens")
    definition: Document = {  # noqa: RUF012 (never mutated: serialized as it is)
        "type": "function",
        "name": TOOL_NAME,
        "description": DESCRIPTION,
        "parameters": PARAMETERS,
        "strict": False,
    }

    def with_tool(self, payload: Document) -> Document:
        return {**payload, "tools": [*payload.get("tools", []), self.definition]}

    def whole_of(self, answer: object) -> Document | None:
        return as_document(answer)

    def calls(self, answer: Document) -> tuple[list[Call], bool]:
        ours, others = [], False
        for item in _output(answer):
            if item.get("type") == "function_call" and item.get("name") == TOOL_NAME:
                ours.append(Call(str(item.get("call_id")), str(item.get("arguments") or "")))
            elif item.get("type") in ("function_call", "custom_tool_call", "local_shell_call"):
                others = True
        return ours, others

    def continued(self, payload: Document, answer: Document, results: list[tuple[Call, str]]) -> Document:
        source = payload.get("input")
        items = source if isinstance(source, list) else [{"type": "message", "role": "user", "content": source}]
        outputs = [{"type": "function_call_output", "call_id": call.id, "output": text} for call, text in results]
        return {**payload, "input": [*items, *_output(answer), *outputs]}

    def without_calls(self, answer: Document, earlier: list[Document]) -> Document:
        out: Document = orjson.loads(orjson.dumps(answer))
        items = [item for document in [*earlier, out] for item in _output(document)]
        out["output"] = [item for item in items if not _our_item(item)]
        summed_usage(out, earlier, self.usage_keys)
        return out


def _output(answer: Document) -> list[Document]:
    output = answer.get("output")
    return [item for item in output if isinstance(item, dict)] if isinstance(output, list) else []


def _our_item(item: Document) -> bool:
    return item.get("type") == "function_call" and item.get("name") == TOOL_NAME


class MessagesShape:
    """Anthropic Messages: a tool with an `input_schema`, calls as `tool_use` blocks, results as `tool_result`
    blocks in the next user message."""

    usage_keys = ("input_tokens", "output_tokens", "cache_read_input_tokens", "cache_creation_input_tokens")
    definition: Document = {"name": TOOL_NAME, "description": DESCRIPTION, "input_schema": PARAMETERS}  # noqa: RUF012

    def with_tool(self, payload: Document) -> Document:
        return {**payload, "tools": [*payload.get("tools", []), self.definition]}

    def whole_of(self, answer: object) -> Document | None:
        return as_document(answer)

    def calls(self, answer: Document) -> tuple[list[Call], bool]:
        ours, others = [], False
        for block in _content(answer):
            if block.get("type") == "tool_use" and block.get("name") == TOOL_NAME:
                ours.append(Call(str(block.get("id")), orjson.dumps(block.get("input", {})).decode()))
            elif block.get("type") == "tool_use":
                others = True
        return ours, others

    def continued(self, payload: Document, answer: Document, results: list[tuple[Call, str]]) -> Document:
        said = {"role": "assistant", "content": _content(answer)}
        replies = [{"type": "tool_result", "tool_use_id": call.id, "content": text} for call, text in results]
        return {**payload, "messages": [*payload["messages"], said, {"role": "user", "content": replies}]}

    def without_calls(self, answer: Document, earlier: list[Document]) -> Document:
        out: Document = orjson.loads(orjson.dumps(answer))
        blocks = [block for document in [*earlier, out] for block in _content(document)]
        out["content"] = [b for b in blocks if not (b.get("type") == "tool_use" and b.get("name") == TOOL_NAME)]
        if out.get("stop_reason") == "tool_use" and not any(b.get("type") == "tool_use" for b in out["content"]):
            out["stop_reason"] = "end_turn"
        summed_usage(out, earlier, self.usage_keys)
        return out


def _content(answer: Document) -> list[Document]:
    content = answer.get("content")
    return [block for block in content if isinstance(block, dict)] if isinstance(content, list) else []


class GeminiShape:
    """The Gemini API: a function declaration in a tool of its own, calls as `functionCall` parts of the candidate's
    content, results as `functionResponse` parts of the next user content. The model's content goes back as it
    came, its `thoughtSignature`s on the parts they came with."""

    usage_keys = (
        "promptTokenCount",
        "candidatesTokenCount",
        "totalTokenCount",
        "thoughtsTokenCount",
        "cachedContentTokenCount",
        "toolUsePromptTokenCount",
    )
    definition: Document = {  # noqa: RUF012 (never mutated: serialized as it is)
        "functionDeclarations": [{"name": TOOL_NAME, "description": DESCRIPTION, "parametersJsonSchema": PARAMETERS}]
    }

    def with_tool(self, payload: Document) -> Document:
        return {**payload, "tools": [*payload.get("tools", []), self.definition]}

    def whole_of(self, answer: object) -> Document | None:
        """One object, or a stream read without `alt=sse`, a JSON array of chunks: joined into one, its parts in
        order, the last chunk's finish and counts."""
        if not isinstance(answer, list):
            return as_document(answer)
        chunks = [chunk for chunk in answer if isinstance(chunk, dict)]
        if not chunks:
            return None
        joined: Document = orjson.loads(orjson.dumps(chunks[-1]))
        candidates = joined.get("candidates")
        if isinstance(candidates, list) and candidates and isinstance(candidates[0], dict):
            parts = [part for chunk in chunks for part in gemini_parts(chunk)]
            candidates[0]["content"] = {"role": "model", "parts": parts}
        return joined

    def calls(self, answer: Document) -> tuple[list[Call], bool]:
        return gemini_calls(gemini_parts(answer))

    def continued(self, payload: Document, answer: Document, results: list[tuple[Call, str]]) -> Document:
        said = {"role": "model", "parts": gemini_parts(answer)}
        replies = [gemini_response(call, text) for call, text in results]
        return {**payload, "contents": [*payload["contents"], said, {"role": "user", "parts": replies}]}

    def without_calls(self, answer: Document, earlier: list[Document]) -> Document:
        out: Document = orjson.loads(orjson.dumps(answer))
        candidates = out.get("candidates")
        if not isinstance(candidates, list) or not candidates or not isinstance(candidates[0], dict):
            return out
        parts = [part for document in [*earlier, out] for part in gemini_parts(document) if not gemini_ours(part)]
        content = candidates[0].get("content")
        candidates[0]["content"] = {**(content if isinstance(content, dict) else {"role": "model"}), "parts": parts}
        summed_usage(out, earlier, self.usage_keys, field="usageMetadata")
        return out


def gemini_parts(answer: Document) -> list[Document]:
    """The parts of an answer's first candidate."""
    candidates = answer.get("candidates")
    first = candidates[0] if isinstance(candidates, list) and candidates and isinstance(candidates[0], dict) else {}
    content = first.get("content")
    parts = content.get("parts") if isinstance(content, dict) else None
    return [part for part in parts if isinstance(part, dict)] if isinstance(parts, list) else []


def gemini_ours(part: Document) -> bool:
    call = part.get("functionCall")
    return isinstance(call, dict) and call.get("name") == TOOL_NAME


def gemini_calls(parts: list[Document]) -> tuple[list[Call], bool]:
    """The tool's calls among a model's parts (a call without an `id` is known by its place), and whether the
    client's own tools are called too."""
    ours, others = [], False
    for index, part in enumerate(parts):
        call = part.get("functionCall")
        if not isinstance(call, dict):
            continue
        if call.get("name") != TOOL_NAME:
            others = True
            continue
        named = call.get("id")
        ours.append(
            Call(str(named) if named else f"{GEMINI_NO_ID}{index}", orjson.dumps(call.get("args", {})).decode())
        )
    return ours, others


GEMINI_NO_ID = "inflight-part-"  # a call the model gave no `id`: its result goes without one, matched by order


def gemini_response(call: Call, text: str) -> Document:
    """A call's result as a `functionResponse` part, with the call's `id` when it had one."""
    response: Document = {"name": TOOL_NAME, "response": {"output": text}}
    if not call.id.startswith(GEMINI_NO_ID):
        response["id"] = call.id
    return {"functionResponse": response}


SHAPES: dict[str, ToolShape] = {
    "chat_completions": ChatShape(),
    "responses": ResponsesShape(),
    "messages": MessagesShape(),
    "gemini": GeminiShape(),
}


def shape_of(wire: WireFormat) -> ToolShape | None:
    """The tool's shape in this format (None: the format does not offer it)."""
    return SHAPES.get(wire.spec.name)
