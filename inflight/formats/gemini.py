"""The Gemini API (`POST /v1beta/models/{model}:generateContent`, `:streamGenerateContent`): `contents` read as
the core's messages, and written back.

The model and streaming are in the path, not the body. How `read` turns the body into the core's conversation:
- `systemInstruction` (a content, or a string) becomes a leading `system` message. It is counted, never
  compacted, and stays in its own field.
- A `model` content becomes one assistant message: its text parts as the content, its `thought` parts as
  reasoning, its `functionCall` parts as `tool_calls` (the args as the arguments, so the ledger can read the
  commands). A content with a `thoughtSignature` on any part, a `thought` part, or a part this module does not
  know is opaque: Gemini verifies the signature against the turn, so the content is sent byte for byte or dropped
  whole with its turn, never edited.
- A `user` content becomes one `tool` message per `functionResponse` part (what masking and truncation work on),
  followed, if other parts remain, by one user message holding them (an observation when it sits beside
  responses). A call's id is its own `id` when it has one; otherwise calls and responses are paired in order, as
  Gemini pairs them.

`origins` maps each message back: `(i,)` is the whole content `i`; `(i, j, ...)` are parts of it.

`write` walks the compacted messages. A message the core did not touch is written back as the content (or
parts) it came from. A masked or truncated result is written back as its `functionResponse` part with the new
text as `response.output`, keeping its name and id. The summary (a user message) is appended to the preceding
user content as a text part, so roles still alternate.

Answers: the prompt count is `usageMetadata.promptTokenCount` (implicit cache reads included; the cached
share is `cachedContentTokenCount`), in the JSON body or in each stream event. A refusal is a 400 whose message
names both counts ("The input token count (N) exceeds the maximum number of tokens allowed (M)."), or the same
error as a stream's event. Errors have Google's shape, `{"error": {"code", "message", "status"}}`.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeGuard

import orjson

from inflight.formats.seam import (
    UNROUTED,
    CoreRequest,
    FormatSpec,
    Message,
    Route,
    TakenOver,
    Target,
    UpstreamCall,
    data_event,
    is_comment,
    replaced_origin,
    text_of_parts,
)
from inflight.policy.refusals import Refusal, detect, detect_event

Part = dict[str, Any]
Content = dict[str, Any]
OPAQUE, OBSERVATION = "opaque", "observation"
# The parts whose meaning this module knows; any other (executableCode, a server tool's) makes its content opaque.
KNOWN_PARTS = ("text", "functionCall", "functionResponse", "inlineData", "fileData")
# The fields of a generateContent request that `countTokens` takes inside `generateContentRequest`.
COUNTED_FIELDS = ("contents", "systemInstruction", "tools", "toolConfig", "cachedContent")
# The proxy's error codes and types as Google's statuses, with the HTTP status Google puts beside them.
STATUS_OF_CODE = {
    "invalid_api_key": (401, "UNAUTHENTICATED"),
    "forbidden": (403, "PERMISSION_DENIED"),
    "not_found": (404, "NOT_FOUND"),
    "method_not_allowed": (405, "INVALID_ARGUMENT"),
    "request_too_large": (413, "INVALID_ARGUMENT"),
    "request_timeout": (408, "DEADLINE_EXCEEDED"),
    "upstream_timeout": (504, "DEADLINE_EXCEEDED"),
}
STATUS_OF_TYPE = {
    "invalid_request_error": (400, "INVALID_ARGUMENT"),
    "authentication_error": (401, "UNAUTHENTICATED"),
    "permission_error": (403, "PERMISSION_DENIED"),
    "upstream_error": (502, "UNAVAILABLE"),
    "server_error": (500, "INTERNAL"),
}


class GoogleErrors:
    """Google's error shape, `{"error": {"code", "message", "status"}}`; in a stream, a `data:` event of it, which
    the genai SDK raises on."""

    def body(self, message: str, *, error_type: str, param: str | None, code: str | None) -> bytes:
        status, name = STATUS_OF_CODE.get(code or "") or STATUS_OF_TYPE.get(error_type, (500, "INTERNAL"))
        return orjson.dumps({"error": {"code": status, "message": message, "status": name}})

    def event(self, body: bytes) -> bytes:
        return data_event(body)


class CountTokens:
    """`POST /v1beta/models/{model}:countTokens`: the upstream's exact count of a request's prompt."""

    def request(self, payload: dict[str, Any], *, model: str) -> UpstreamCall:
        fields = {key: payload[key] for key in COUNTED_FIELDS if key in payload}
        body = {"generateContentRequest": {"model": f"models/{model}", **fields}}
        return UpstreamCall(f"/v1beta/models/{model}:countTokens", body)

    def tokens(self, document: object) -> int | None:
        tokens = document.get("totalTokens") if isinstance(document, dict) else None
        return tokens if is_count(tokens) else None


class Gemini:
    """The Gemini API format. Gemini CLI sends no session id of its own; the key comes from `x-inflight-session`,
    else the head."""

    spec = FormatSpec(
        name="gemini",
        routes=(
            Route("/v1beta/models/{model}:generateContent", stream=False),
            Route("/v1beta/models/{model}:streamGenerateContent", stream=True),
        ),
        errors=GoogleErrors(),
        # The proxy's key goes as `x-goog-api-key`; a client signed in with OAuth sends a bearer token.
        credentials=(b"x-goog-api-key", b"authorization"),
        query_key=b"key",  # `?key=`, which Google takes as it takes `x-goog-api-key`
        forwarded=("/v1beta/{path:path}",),  # countTokens, the model list, files: forwarded unchanged
        client_header="x-goog-api-client",  # the genai SDK's
        usage_marker=b'"usageMetadata"',
        exact_count=CountTokens(),
        model_list=False,  # `GET /v1beta/models` answers `inputTokenLimit`s in Google's shape: not read yet
    )

    def read(self, payload: dict[str, Any], target: Target = UNROUTED, *, tenant: str = "") -> CoreRequest | None:
        model = target.params.get("model") or payload.get("model")
        source = payload.get("contents")
        if not isinstance(model, str) or not isinstance(source, list):
            return None
        if not all(isinstance(c, dict) and isinstance(c.get("parts", []), list) for c in source):
            return None
        model = model.removeprefix("models/")
        messages: list[Message] = []
        origins: list[tuple[int, ...] | None] = []
        kinds: dict[str, list[int]] = {OPAQUE: [], OBSERVATION: []}
        system = system_text(payload.get("systemInstruction"))
        if system:  # never edited: it stays whole in its own field
            kinds[OPAQUE].append(len(messages))
            messages.append({"role": "system", "content": system})
            origins.append(None)
        calls = CallIds()
        for index, content in enumerate(source):
            for view, origin, kind in views_of(index, content, calls):
                if kind:
                    kinds[kind].append(len(messages))
                messages.append(view)
                origins.append(origin)
        config = payload.get("generationConfig")
        limit = config.get("maxOutputTokens") if isinstance(config, dict) else None
        return CoreRequest(
            model=model,
            view={"messages": messages, **tool_fields(payload)},
            output_limit=limit if is_count(limit) and limit > 0 else None,
            opaque=frozenset(kinds[OPAQUE]),
            observations=frozenset(kinds[OBSERVATION]),
            origins=origins,
            streams=target.stream,
        )

    def write(self, payload: dict[str, Any], request: CoreRequest, messages: list[Message]) -> bytes:
        originals: list[Content] = payload["contents"]
        origin_of = {id(message): origin for message, origin in zip(request.messages, request.origins, strict=True)}
        where = {id(message): index for index, message in enumerate(request.messages)}
        written = Written(originals)
        position = 0  # compaction keeps the order, so a changed message is found at or after the last one written
        for message in messages:
            if id(message) in where:
                position = max(position, where[id(message)] + 1)
            if id(message) in origin_of:
                origin = origin_of[id(message)]
                if origin is not None:  # None is the system instruction, which stays in its own field
                    written.original(origin)
            elif (found := replaced_origin(request, message, position)) is not None:
                (index, j), position = found
                written.part(index, j, with_output(originals[index]["parts"][j], message.get("content")))
            else:
                written.new(message)
        return orjson.dumps({**payload, "contents": written.contents()})

    def refusal(self, status: int, body: bytes, *, content_encoding: bytes | None) -> Refusal | None:
        return detect(status, body, content_encoding=content_encoding)  # Google's `{"error": {...}}`, or an array

    def stream_pending(self, event: bytes) -> bool:
        return is_comment(event)  # the first `data:` event is already the answer or the error

    def stream_refusal(self, event: bytes) -> Refusal | None:
        return detect_event(event)

    def prompt_tokens(self, document: object) -> int | None:
        """`promptTokenCount`, which includes what the implicit cache served (`cachedContentTokenCount`)."""
        usage = usage_of(document)
        tokens = usage.get("promptTokenCount") if usage is not None else None
        return tokens if is_count(tokens) else None

    def output_tokens(self, document: object) -> int | None:
        """The reply's tokens: its candidates' and its thoughts' (both count against `maxOutputTokens`)."""
        usage = usage_of(document)
        if usage is None or not is_count(usage.get("candidatesTokenCount")):
            return None
        thoughts = usage.get("thoughtsTokenCount")
        return int(usage["candidatesTokenCount"]) + (thoughts if is_count(thoughts) else 0)

    def take_over(self, payload: dict[str, Any], *, prompt_tokens: int, count: Callable[[str], int]) -> TakenOver:
        return TakenOver(payload)  # the Gemini API has no server-side context management

    def reported_body(self, body: bytes, report: dict[str, Any]) -> bytes:
        return body

    def reported_event(self, event: bytes, report: dict[str, Any]) -> bytes:
        return event

    def rejects_server_compaction(self, status: int, body: bytes) -> bool:
        return False

    def summary_request(
        self, messages: list[Message], *, model: str, max_tokens: int, tools: object = None
    ) -> UpstreamCall:
        """The prompt as `systemInstruction`, the rest as alternating turns (`tools` is ignored: only Chat
        Completions summarizes in place)."""
        system = "\n\n".join(str(m.get("content")) for m in messages if m.get("role") == "system")
        contents: list[Content] = []
        for message in messages:
            if message.get("role") == "system":
                continue
            role = "model" if message.get("role") == "assistant" else "user"
            text = text_of_parts(message.get("content"))
            if contents and contents[-1]["role"] == role:
                contents[-1]["parts"].append({"text": text})
            else:
                contents.append({"role": role, "parts": [{"text": text}]})
        body = {
            "contents": contents,
            "systemInstruction": {"parts": [{"text": system}]},
            "generationConfig": {"maxOutputTokens": max_tokens, "temperature": 0},
        }
        return UpstreamCall(f"/v1beta/models/{model}:generateContent", body)

    def summary_reply(self, document: object) -> tuple[str, str | None]:
        candidates = document.get("candidates") if isinstance(document, dict) else None
        first = candidates[0] if isinstance(candidates, list) and candidates else None
        if not isinstance(first, dict):
            return "", None
        content = first.get("content")
        parts = content.get("parts") if isinstance(content, dict) else None
        text = "".join(
            part["text"]
            for part in (parts if isinstance(parts, list) else [])
            if isinstance(part, dict) and isinstance(part.get("text"), str) and not part.get("thought")
        )
        return text, ("length" if first.get("finishReason") == "MAX_TOKENS" else "stop")


View = tuple[Message, tuple[int, ...], str]  # a core message, its origin, and its kind: OPAQUE, OBSERVATION or ""


class CallIds:
    """The ids the core pairs calls and responses by: a call's own `id`, else one made from where it is, given in
    order to the responses of the next user content that have none."""

    def __init__(self) -> None:
        self.pending: deque[str] = deque()  # the latest model content's calls, in order
        self.answered: set[str] = set()  # of those, the ones a response named by its own id

    def calls(self, index: int, parts: list[Any]) -> list[str]:
        ids = [
            str(part["functionCall"].get("id") or f"gemini-{index}-{j}")
            for j, part in enumerate(parts)
            if isinstance(part, dict) and isinstance(part.get("functionCall"), dict)
        ]
        self.pending, self.answered = deque(ids), set()
        return ids

    def response(self, response: dict[str, Any], *, where: str) -> str:
        """The id of the call a response answers (`where` names an unpaired one: it answers no call)."""
        own = response.get("id")
        if isinstance(own, str) and own:
            self.answered.add(own)
            return own
        while self.pending and self.pending[0] in self.answered:
            self.pending.popleft()
        return self.pending.popleft() if self.pending else f"gemini-unpaired-{where}"


def views_of(index: int, content: Content, calls: CallIds) -> list[View]:
    """The core's messages one Gemini content becomes."""
    parts = content.get("parts") or []
    if content.get("role") == "model":
        return [model_view(index, parts, calls)]
    if not all(isinstance(part, dict) for part in parts):
        return [({"role": "user", "content": orjson.dumps(content).decode()}, (index,), OPAQUE)]
    responses = [j for j, part in enumerate(parts) if isinstance(part.get("functionResponse"), dict)]
    answers = set(responses)
    if not responses:
        opaque = any(not known(part) for part in parts)
        return [({"role": "user", "content": parts_of(parts)}, (index,), OPAQUE if opaque else "")]
    views: list[View] = []
    for j in responses:
        response = parts[j]["functionResponse"]
        views.append(
            (
                {
                    "role": "tool",
                    "tool_call_id": calls.response(response, where=f"{index}-{j}"),
                    "content": output_of(response),
                },
                (index, j),
                "",
            )
        )
    others = [j for j in range(len(parts)) if j not in answers]
    if others:  # text sent beside the responses is an observation, not a request
        views.append(({"role": "user", "content": parts_of([parts[j] for j in others])}, (index, *others), OBSERVATION))
    return views


def model_view(index: int, parts: list[Any], calls: CallIds) -> View:
    texts, reasoning, tool_calls, opaque = [], [], [], False
    ids = iter(calls.calls(index, parts))
    for part in parts:
        if not isinstance(part, dict):
            opaque = True
            continue
        if part.get("thoughtSignature") is not None or part.get("thought") or not known(part):
            opaque = True  # Gemini checks the signature against the turn: never edited
        if part.get("thought") and isinstance(part.get("text"), str):
            reasoning.append(part["text"])
        elif isinstance(part.get("text"), str):
            texts.append(part["text"])
        elif isinstance(part.get("functionCall"), dict):
            call = part["functionCall"]
            arguments = orjson.dumps(call.get("args") or {}).decode()
            function = {"name": str(call.get("name") or "tool"), "arguments": arguments}
            tool_calls.append({"id": next(ids), "type": "function", "function": function})
        elif not known(part):
            reasoning.append(orjson.dumps(part).decode())
    view: Message = {"role": "assistant", "content": "\n".join(texts) or None}
    if tool_calls:
        view["tool_calls"] = tool_calls
    if reasoning:
        view["reasoning_content"] = "\n".join(reasoning)
    return view, (index,), OPAQUE if opaque else ""


def known(part: Part) -> bool:
    return any(key in part for key in KNOWN_PARTS)


def output_of(response: dict[str, Any]) -> str:
    """A function's response as text: its `output` (Gemini CLI's), else its `error`, else the response's JSON."""
    body = response.get("response")
    if isinstance(body, dict):
        for key in ("output", "error"):
            if isinstance(body.get(key), str) and len(body) == 1:
                return str(body[key])
    return orjson.dumps(body).decode()


def parts_of(parts: list[Any]) -> list[dict[str, Any]]:
    """Parts as Chat Completions' parts: text as text, inline data as an image (counted by its size) and any other
    part as the text of its JSON."""
    out: list[dict[str, Any]] = []
    for part in parts:
        if isinstance(part, dict) and isinstance(part.get("text"), str):
            out.append({"type": "text", "text": part["text"]})
        elif isinstance(part, dict) and isinstance(part.get("inlineData"), dict):
            data = part["inlineData"]
            url = f"data:{data.get('mimeType') or 'image/png'};base64,{data.get('data') or ''}"
            out.append({"type": "image_url", "image_url": {"url": url}})
        else:
            out.append({"type": "text", "text": orjson.dumps(part).decode()})
    return out


def system_text(instruction: object) -> str:
    """The text of `systemInstruction`: a string, or a content's text parts."""
    if isinstance(instruction, str):
        return instruction
    if isinstance(instruction, dict):
        return text_of_parts(instruction.get("parts"))
    return ""


def tool_fields(payload: dict[str, Any]) -> dict[str, Any]:
    """The function declarations as Chat Completions' tools, for counting (other tools counted by their JSON)."""
    tools: list[dict[str, Any]] = []
    for tool in payload.get("tools") or []:
        if not isinstance(tool, dict):
            continue
        for declaration in tool.get("functionDeclarations") or []:
            if isinstance(declaration, dict):
                schema = declaration.get("parametersJsonSchema") or declaration.get("parameters") or {}
                function = {
                    "name": str(declaration.get("name") or "tool"),
                    "description": str(declaration.get("description") or ""),
                    "parameters": schema,
                }
                tools.append({"type": "function", "function": function})
        others = {key: value for key, value in tool.items() if key != "functionDeclarations"}
        if others:  # googleSearch, codeExecution, ...: named by the key, described by the JSON
            tools.append(
                {
                    "type": "function",
                    "function": {"name": next(iter(others)), "description": orjson.dumps(others).decode()},
                }
            )
    return {"tools": tools} if tools else {}


def usage_of(document: object) -> dict[str, Any] | None:
    if isinstance(document, list) and document:  # a stream read without `alt=sse` is a JSON array of chunks
        document = document[-1]
    usage = document.get("usageMetadata") if isinstance(document, dict) else None
    return usage if isinstance(usage, dict) else None


def is_count(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def with_output(part: Part, content: object) -> Part:
    """A `functionResponse` part with the core's new text as its `response.output`, its name and id kept."""
    text = content if isinstance(content, str) else text_of_parts(content)
    response = part["functionResponse"]
    return {**part, "functionResponse": {**response, "response": {"output": text}}}


@dataclass
class Entry:
    """One content being written: the whole or some parts of the client's content `source` (None: a new one)."""

    source: int | None
    role: str
    content: Content
    parts: list[tuple[float, Part]] | None = None  # (position in the original, part); None: the whole content


class Written:
    """The contents `write` builds, assembled at the end so that parts of one content stay together, in order."""

    def __init__(self, originals: list[Content]) -> None:
        self.originals = originals
        self.entries: list[Entry] = []

    def original(self, origin: tuple[int, ...]) -> None:
        index = origin[0]
        if len(origin) == 1:
            self.entries.append(Entry(index, role_of(self.originals[index]), self.originals[index]))
            return
        for j in origin[1:]:
            self.part(index, j, self.originals[index]["parts"][j])

    def part(self, index: int, j: int, part: Part) -> None:
        last = self.entries[-1] if self.entries else None
        if last is not None and last.source == index and last.parts is not None:
            last.parts.append((j, part))
        else:
            self.entries.append(Entry(index, role_of(self.originals[index]), self.originals[index], [(j, part)]))

    def new(self, message: Message) -> None:
        """Add a message the core wrote: a user message (the summary) joins the preceding user content; an
        assistant's is a model content with its calls."""
        text = text_of_parts(message.get("content"))
        if message.get("role") == "assistant":
            parts: list[Part] = [{"text": text}] if text else []
            for call in message.get("tool_calls") or []:
                function = call.get("function") if isinstance(call, dict) else None
                if isinstance(function, dict):
                    try:
                        args = orjson.loads(function.get("arguments") or "{}")
                    except orjson.JSONDecodeError:
                        args = {"input": function.get("arguments")}
                    parts.append({"functionCall": {"name": function.get("name"), "args": args}})
            self.entries.append(Entry(None, "model", {"role": "model", "parts": parts or [{"text": ""}]}))
            return
        part: Part = {"text": text}
        last = self.entries[-1] if self.entries else None
        if last is not None and last.role == "user":
            if last.parts is None:
                last.parts = [(float(j), p) for j, p in enumerate(last.content.get("parts") or [])]
            last.parts.append((float(len(last.parts)) + 1e9, part))  # after all the content's own parts
        else:
            self.entries.append(Entry(None, "user", {"role": "user", "parts": [part]}))

    def contents(self) -> list[Content]:
        out: list[Content] = []
        for entry in self.entries:
            if entry.parts is None:
                out.append(entry.content)
            else:
                ordered = [part for _, part in sorted(entry.parts, key=lambda pair: pair[0])]
                out.append({**entry.content, "parts": ordered})
        return out


def role_of(content: Content) -> str:
    return "model" if content.get("role") == "model" else "user"


GEMINI = Gemini()
