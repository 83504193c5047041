"""Anthropic Messages (`POST /v1/messages`): content blocks read as the core's messages, and written back.

How `read` turns the body into the core's conversation:
- The top-level `system` (a string or text blocks) becomes a leading `system` message. It is counted
  and never compacted, and stays in its own field, never rewritten. `system`-role messages inside
  `messages` (Claude Code sends some) are treated the same way and written back unchanged.
- An `assistant` message becomes one assistant message: its text blocks as the content, its
  `tool_use` blocks as `tool_calls` (the input as the arguments, so the ledger can read the
  commands), and its `thinking` as reasoning (counted; the signature is not). A message with a
  `thinking` or `redacted_thinking` block, or a block this module does not know (a server tool's
  use and result), is opaque: sent unchanged or dropped together with its turn, never edited.
- A `user` message becomes one `tool` message per `tool_result` block (these are what masking and
  truncation work on; their content is a string or text and image parts), followed, if any other
  blocks remain, by one user message holding them (text, images, documents).

`origins` maps each message back: `(i,)` is the whole message `i`; `(i, j, ...)` are blocks of it.

`write` walks the compacted messages. A message the core did not touch is written back as the exact
message (or blocks) it came from. A masked or truncated tool result is written back as its
`tool_result` block with the new content, keeping every other key (`is_error` and `cache_control`
included). The summary (a user message) is appended to the preceding user message as a text block,
so roles still alternate. Blocks from one message stay in one message, in their order.

Prompt caching: a request may have at most 4 `cache_control` breakpoints. Those on the system and the
tools stay where they are. A breakpoint on a message that compaction removed moves to the last block
before the recent messages kept verbatim (the summary), so the rewritten prefix can be cached at once.
If the total would exceed 4, the oldest breakpoints in the messages are removed first.

Answers: the prompt count is `input_tokens + cache_read_input_tokens + cache_creation_input_tokens`
(from the `usage` of the JSON body, or of the stream's `message_start`). A refusal is a 400 ("prompt is
too long: N tokens > M maximum", or "input length and `max_tokens` exceed context limit") or an `error`
event. Errors have Anthropic's shape, `{"type": "error", "error": {"type", "message"}}`.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import orjson

from inflight.compaction.summary_job import SUMMARY_PREFIX
from inflight.formats.context_editing import apply_edits, asks_edits
from inflight.formats.seam import (
    UNROUTED,
    CoreRequest,
    FormatSpec,
    Message,
    Route,
    TakenOver,
    Target,
    UpstreamCall,
    event_name,
    is_comment,
    refuses_field,
    replaced_origin,
    text_of_parts,
    usage_count,
)
from inflight.policy.refusals import Refusal, detect, detect_event

Block = dict[str, Any]
THINKING = ("thinking", "redacted_thinking")
KNOWN_ASSISTANT_BLOCKS = ("text", "tool_use", *THINKING)
MAX_BREAKPOINTS = 4
OPAQUE, OBSERVATION = "opaque", "observation"  # the kinds `views_of` marks a view with
# The fields `count_tokens` accepts: the prompt's (`max_tokens`, `stream` and `metadata` concern the reply).
COUNTED_FIELDS = ("model", "system", "messages", "tools", "tool_choice", "thinking", "mcp_servers")
ANTHROPIC_VERSION = b"2023-06-01"
SESSION_IN_USER_ID = re.compile(r"session_([0-9A-Za-z-]{8,64})")
# The proxy's error types, as Anthropic names them (`authentication_error` is chosen by the code).
ERROR_TYPES = {"upstream_error": "api_error", "server_error": "api_error"}
ERROR_CODES = {"invalid_api_key": "authentication_error", "not_found": "not_found_error"}
ERROR_CODES |= {"request_too_large": "request_too_large"}


class AnthropicErrors:
    """Anthropic's error shape, `{"type": "error", "error": {"type", "message"}}`; in a stream, `event: error`."""

    def body(self, message: str, *, error_type: str, param: str | None, code: str | None) -> bytes:
        kind = ERROR_CODES.get(code or "") or ERROR_TYPES.get(error_type, error_type)
        return orjson.dumps({"type": "error", "error": {"type": kind, "message": message}})

    def event(self, body: bytes) -> bytes:
        """An `event: error` event, because Anthropic's SDKs read only named events."""
        return b"event: error\ndata: " + body.strip().replace(b"\n", b"") + b"\n\n"


class CountTokens:
    """`POST /v1/messages/count_tokens`: the upstream's exact count of a request's prompt."""

    def request(self, payload: dict[str, Any], *, model: str) -> UpstreamCall:
        body = {key: payload[key] for key in COUNTED_FIELDS if key in payload}
        return UpstreamCall("/v1/messages/count_tokens", body)

    def tokens(self, document: object) -> int | None:
        tokens = document.get("input_tokens") if isinstance(document, dict) else None
        return tokens if isinstance(tokens, int) and is_count(tokens) else None


class Messages:
    """The Anthropic Messages format. Its session header is Claude Code's, which takes precedence over the body's."""

    spec = FormatSpec(
        name="messages",
        routes=(Route("/v1/messages"),),
        errors=AnthropicErrors(),
        # The proxy's key goes as `x-api-key`; Claude Code signed in with an account sends a bearer token.
        credentials=(b"x-api-key", b"authorization"),
        forwarded=("/v1/messages/{path:path}",),  # count_tokens, batches: forwarded to Anthropic's upstream
        client_header="anthropic-version",  # so Claude Code's `/v1/models` and `/v1/files` go there too
        session_header="x-claude-code-session-id",
        session_header_first=True,  # Claude Code's header first, then the body's `metadata.user_id`
        in_place_summaries=False,  # an Anthropic upstream does not serve a summary asked through Chat Completions
        exact_count=CountTokens(),
    )

    def read(self, payload: dict[str, Any], target: Target = UNROUTED, *, tenant: str = "") -> CoreRequest | None:
        model, source = payload.get("model"), payload.get("messages")
        if not isinstance(model, str) or not isinstance(source, list):
            return None
        if not all(isinstance(m, dict) and isinstance(m.get("content"), str | list) for m in source):
            return None
        messages: list[Message] = []
        origins: list[tuple[int, ...] | None] = []
        kinds: dict[str, list[int]] = {OPAQUE: [], OBSERVATION: []}
        system = text_of_parts(payload.get("system"))
        if system:  # never edited: it stays whole in its own field
            kinds[OPAQUE].append(len(messages))
            messages.append({"role": "system", "content": system})
            origins.append(None)
        for index, message in enumerate(source):
            for view, origin, kind in views_of(index, message):
                if kind:
                    kinds[kind].append(len(messages))
                messages.append(view)
                origins.append(origin)
        limit = payload.get("max_tokens")
        return CoreRequest(
            model=model,
            view={"messages": messages, **tool_fields(payload)},
            output_limit=limit if isinstance(limit, int) and not isinstance(limit, bool) and limit > 0 else None,
            output_limit_binding=False,  # at the window, Anthropic just stops (`model_context_window_exceeded`)
            session=session_of(payload.get("metadata")),
            opaque=frozenset(kinds[OPAQUE]),
            observations=frozenset(kinds[OBSERVATION]),
            origins=origins,
            server_edits=asks_edits(payload),
        )

    def write(self, payload: dict[str, Any], request: CoreRequest, messages: list[Message]) -> bytes:
        originals: list[dict[str, Any]] = payload["messages"]
        origin_of = {id(message): origin for message, origin in zip(request.messages, request.origins, strict=True)}
        where = {id(message): index for index, message in enumerate(request.messages)}
        written = Written(originals)
        # Compaction keeps the order, so a changed message is found at or after the last one written.
        position = 0
        for message in messages:
            if id(message) in where:
                position = max(position, where[id(message)] + 1)
            if id(message) in origin_of:
                origin = origin_of[id(message)]
                if origin is not None:  # None is the top-level system, which stays in its own field
                    written.original(origin)
            elif (found := replaced_origin(request, message, position)) is not None:
                (index, block), position = found
                written.block(index, block, with_result(originals[index]["content"][block], message.get("content")))
            else:
                written.new(message)
        out = written.messages()
        budget = MAX_BREAKPOINTS - breakpoints_of(payload.get("system")) - breakpoints_of(payload.get("tools"))
        place_breakpoints(out, originals, written, budget)
        mark_head(out, written, budget, marks=[*marks_in(payload.get("tools")), *marks_in(payload.get("system"))])
        return orjson.dumps({**payload, "messages": out})

    def refusal(self, status: int, body: bytes, *, content_encoding: bytes | None) -> Refusal | None:
        return detect(status, body, content_encoding=content_encoding)

    def stream_pending(self, event: bytes) -> bool:
        """Whether the event is a `ping` or a comment, which says nothing yet (a refusal comes as an HTTP error
        or an `error` event)."""
        return is_comment(event) or event_name(event) == "ping"

    def stream_refusal(self, event: bytes) -> Refusal | None:
        return detect_event(event)  # `event: error`, `{"type": "error", "error": {...}}`

    def prompt_tokens(self, document: object) -> int | None:
        """All prompt tokens, however the upstream served them: uncached, read from its cache, or written to it."""
        if isinstance(document, dict) and isinstance(document.get("message"), dict):
            document = document["message"]  # the stream's `message_start`
        usage = document.get("usage") if isinstance(document, dict) else None
        if not isinstance(usage, dict) or not is_count(usage.get("input_tokens")):
            return None  # `message_delta` may carry only the output count
        keys = ("input_tokens", "cache_read_input_tokens", "cache_creation_input_tokens")
        return sum(part for key in keys if isinstance(part := usage.get(key), int) and is_count(part))

    def output_tokens(self, document: object) -> int | None:
        """The reply's token count; in a stream `message_delta` carries the final one (a body, or
        `message_start`, has its own)."""
        tokens = usage_count(document, "output_tokens", envelope="message")
        return tokens if is_count(tokens) else None

    def take_over(self, payload: dict[str, Any], *, prompt_tokens: int, count: Callable[[str], int]) -> TakenOver:
        """Apply the context edits the body asks for here (`inflight.formats.context_editing`)."""
        edited = apply_edits(payload, prompt_tokens=prompt_tokens, count=count)
        # Anthropic reports the edits for any request that asked for them, even when none were applied.
        return TakenOver(edited.payload, {"applied_edits": edited.applied}, edited=bool(edited.applied))

    def reported_body(self, body: bytes, report: dict[str, Any]) -> bytes:
        document = orjson.loads(body)
        return orjson.dumps({**document, "context_management": report}) if isinstance(document, dict) else body

    def reported_event(self, event: bytes, report: dict[str, Any]) -> bytes:
        """In a stream the report goes in `message_delta`, where Anthropic sends it."""
        if event_name(event) != "message_delta" and b'"message_delta"' not in event:
            return event
        lines = event.split(b"\n")
        for index, line in enumerate(lines):
            if line.startswith(b"data:"):
                document = orjson.loads(line[5:])
                if isinstance(document, dict) and document.get("type") == "message_delta":
                    lines[index] = b"data: " + orjson.dumps({**document, "context_management": report})
        return b"\n".join(lines)

    def rejects_server_compaction(self, status: int, body: bytes) -> bool:
        """Whether the upstream does not know `context_management` or the beta it needs (a gateway's "Extra
        inputs are not permitted", vLLM's "Unrecognized request argument")."""
        return refuses_field(status, body, "context_management", beta="context-management-")

    def summary_request(
        self, messages: list[Message], *, model: str, max_tokens: int, tools: object = None
    ) -> UpstreamCall:
        """The prompt as `system`, the rest as user turns (`tools` is ignored: only Chat Completions summarizes
        in place)."""
        system = "\n\n".join(str(m.get("content")) for m in messages if m.get("role") == "system")
        turns = [
            {"role": "assistant" if m.get("role") == "assistant" else "user", "content": str(m.get("content"))}
            for m in messages
            if m.get("role") != "system"
        ]
        body = {"model": model, "system": system, "messages": turns, "max_tokens": max_tokens, "stream": False}
        return UpstreamCall("/v1/messages", body, ((b"anthropic-version", ANTHROPIC_VERSION),))

    def summary_reply(self, document: object) -> tuple[str, str | None]:
        if not isinstance(document, dict):
            return "", None
        content = document.get("content")
        text = "".join(
            block["text"]
            for block in (content if isinstance(content, list) else [])
            if isinstance(block, dict) and block.get("type") == "text" and isinstance(block.get("text"), str)
        )
        return text, ("length" if document.get("stop_reason") == "max_tokens" else "stop")


View = tuple[Message, tuple[int, ...], str]  # a core message, its origin, and its kind: OPAQUE, OBSERVATION or ""


def views_of(index: int, message: dict[str, Any]) -> list[View]:
    """The core's messages one Anthropic message becomes."""
    role, content = message.get("role"), message["content"]
    if role == "assistant":
        return [assistant_view(content, index)]
    if role == "system":  # never compacted or edited: it is written back whole
        return [({"role": "system", "content": text_of_parts(content)}, (index,), OPAQUE)]
    if role != "user":  # a role this module does not know: kept unchanged, counted by the size of its JSON
        return [({"role": "user", "content": orjson.dumps(message).decode()}, (index,), OPAQUE)]
    if isinstance(content, str):
        return [({"role": "user", "content": content}, (index,), "")]
    results = [j for j, block in enumerate(content) if is_block(block, "tool_result")]
    if not results:
        return [({"role": "user", "content": parts_of(content)}, (index,), "")]
    views: list[View] = []
    for j in results:
        block = content[j]
        tool = {"role": "tool", "tool_call_id": str(block.get("tool_use_id")), "content": result_content(block)}
        views.append((tool, (index, j), ""))
    answers = set(results)
    others = [j for j in range(len(content)) if j not in answers]
    # Other blocks sent alongside the results (such as a reminder) are an observation, not a request.
    if others:
        beside = {"role": "user", "content": parts_of([content[j] for j in others])}
        views.append((beside, (index, *others), OBSERVATION))
    return views


def assistant_view(content: str | list[Any], index: int) -> View:
    if isinstance(content, str):
        return {"role": "assistant", "content": content}, (index,), ""
    texts, calls, reasoning, opaque = [], [], [], False
    for block in content:
        kind = block.get("type") if isinstance(block, dict) else None
        if kind == "text" and isinstance(block.get("text"), str):
            texts.append(block["text"])
        elif kind == "tool_use":
            arguments = orjson.dumps(block.get("input", {})).decode()
            function = {"name": str(block.get("name") or "tool"), "arguments": arguments}
            calls.append({"id": str(block.get("id")), "type": "function", "function": function})
        elif kind == "thinking":
            reasoning.append(str(block.get("thinking") or ""))
            opaque = True
        else:  # redacted thinking, a server tool's use or result, an unknown block: counted by size, never edited
            reasoning.append(str(block.get("data")) if kind == "redacted_thinking" else orjson.dumps(block).decode())
            opaque = True
    view: Message = {"role": "assistant", "content": "\n".join(texts) or None}
    if calls:
        view["tool_calls"] = calls
    if any(reasoning):
        view["reasoning_content"] = "\n".join(r for r in reasoning if r)
    return view, (index,), OPAQUE if opaque else ""


def result_content(block: Block) -> str | list[dict[str, Any]]:
    content = block.get("content")
    if isinstance(content, str):
        return content
    return parts_of(content) if isinstance(content, list) else ""


def parts_of(blocks: list[Any]) -> list[dict[str, Any]]:
    """Blocks as Chat Completions' parts: text as text, an image as an image, a document as a file, and any
    other block as the text of its JSON. Images and files are counted as such and never truncated, since
    truncation only cuts text."""
    parts: list[dict[str, Any]] = []
    for block in blocks:
        kind = block.get("type") if isinstance(block, dict) else None
        if kind == "text" and isinstance(block.get("text"), str):
            parts.append({"type": "text", "text": block["text"]})
        elif kind == "image" and isinstance(block.get("source"), dict):
            parts.append({"type": "image_url", "image_url": {"url": image_url(block["source"])}})
        elif kind == "document" and isinstance(block.get("source"), dict):
            parts.append({"type": "file", "file": {"file_data": document_data(block["source"])}})
        else:
            parts.append({"type": "text", "text": orjson.dumps(block).decode()})
    return parts


def document_data(source: dict[str, Any]) -> str:
    """A document's bytes as base64, which a file is counted by: a PDF's as sent, a text document's encoded
    ("" for a document sent by reference, counted as a file of unknown size)."""
    data = source.get("data")
    if source.get("type") == "text" and isinstance(data, str):
        return base64.b64encode(data.encode()).decode()
    return data if source.get("type") == "base64" and isinstance(data, str) else ""


def image_url(source: dict[str, Any]) -> str:
    """A data URL for a base64 image (its size is read from its header), or the URL of a linked one."""
    if source.get("type") == "base64":
        return f"data:{source.get('media_type') or 'image/png'};base64,{source.get('data') or ''}"
    return str(source.get("url") or "")


def is_block(block: object, kind: str) -> bool:
    return isinstance(block, dict) and block.get("type") == kind


def is_count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def session_of(metadata: object) -> str | None:
    """The session id in `metadata.user_id`: Claude Code's JSON (`session_id`), or the
    `user_…_account_…_session_<uuid>` string of earlier Claude Code versions."""
    user_id = metadata.get("user_id") if isinstance(metadata, dict) else None
    if not isinstance(user_id, str) or not user_id:
        return None
    if user_id.startswith("{"):
        try:
            parsed = orjson.loads(user_id)
        except orjson.JSONDecodeError:
            parsed = None
        session = parsed.get("session_id") if isinstance(parsed, dict) else None
        return session if isinstance(session, str) and session else None
    found = SESSION_IN_USER_ID.search(user_id)
    return found.group(1) if found else None


def tool_fields(payload: dict[str, Any]) -> dict[str, Any]:
    """The tool definitions as Chat Completions' fields, for counting (a server tool is counted by its JSON)."""
    fields: dict[str, Any] = {}
    tools = payload.get("tools")
    if isinstance(tools, list) and tools:
        fields["tools"] = [chat_tool(tool) for tool in tools if isinstance(tool, dict)]
    choice = payload.get("tool_choice")
    if isinstance(choice, dict) and isinstance(choice.get("name"), str):
        fields["tool_choice"] = {"type": "function", "function": {"name": choice["name"]}}
    return fields


def chat_tool(tool: dict[str, Any]) -> dict[str, Any]:
    if "input_schema" in tool:
        function = {
            "name": tool.get("name"),
            "description": tool.get("description") or "",
            "parameters": tool["input_schema"],
        }
        return {"type": "function", "function": function}
    name = str(tool.get("name") or tool.get("type") or "tool")
    return {"type": "function", "function": {"name": name, "description": orjson.dumps(tool).decode()}}


def with_result(block: Block, content: object) -> Block:
    """A `tool_result` block with the core's new content. A mask (a string) replaces the content whole;
    truncated parts change only the text of the parts that were cut (an image stays as it was)."""
    original = block.get("content")
    if isinstance(original, list) and isinstance(content, list) and len(content) == len(original):
        blocks = []
        for kept, part in zip(original, content, strict=True):
            text = part.get("text") if isinstance(part, dict) else None
            same = not is_block(kept, "text") or text is None
            blocks.append(kept if same else {**kept, "text": text})
        return {**block, "content": blocks}
    text = content if isinstance(content, str) else text_of_parts(content)
    return {**block, "content": text}


@dataclass
class Entry:
    """One message being written: the whole or some blocks of the client's message `source` (None: a new one)."""

    source: int | None
    role: str
    message: dict[str, Any]
    blocks: list[tuple[int, Block]] | None = None  # (index in the original, block); None: the whole message
    new_block: int | None = None  # the index in `content` of a block we wrote (the summary), once written


class Written:
    """The messages `write` builds, assembled only at the end so that blocks of one message stay together."""

    def __init__(self, originals: list[dict[str, Any]]) -> None:
        self.originals = originals
        self.entries: list[Entry] = []
        self.summary_at: tuple[int, int] | None = None  # (message, block) of the written summary
        self.summarized = False  # the first new message is a summary (not a message cut by the last-resort stage)

    def original(self, origin: tuple[int, ...]) -> None:
        index = origin[0]
        if len(origin) == 1:
            self.entries.append(Entry(index, str(self.originals[index].get("role")), self.originals[index]))
            return
        for j in origin[1:]:
            self.block(index, j, self.originals[index]["content"][j])

    def block(self, index: int, j: int, block: Block) -> None:
        last = self.entries[-1] if self.entries else None
        if last is not None and last.source == index and last.blocks is not None:
            last.blocks.append((j, block))
        else:
            self.entries.append(
                Entry(index, str(self.originals[index].get("role")), self.originals[index], [(j, block)])
            )

    def new(self, message: Message) -> None:
        """Add a message the core wrote: the summary, or one cut by the last-resort stage.

        A user message is appended to the preceding user message (roles must alternate); an assistant's is
        written with its calls as `tool_use` blocks."""
        role, text = message.get("role"), text_of_parts(message.get("content"))
        if role == "assistant":
            self.entries.append(Entry(None, "assistant", {"role": "assistant", "content": assistant_blocks(message)}))
            return
        if role == "system":
            self.entries.append(Entry(None, "system", {"role": "system", "content": text}))
            return
        block: Block = {"type": "text", "text": text}
        if role == "tool":
            block = {"type": "tool_result", "tool_use_id": message.get("tool_call_id"), "content": text}
        last = self.entries[-1] if self.entries else None
        if last is not None and last.role == "user":
            if last.blocks is None:
                last.blocks = [(j, b) for j, b in enumerate(blocks_of(last.message["content"]))]
            last.blocks.append((len(last.blocks) + 10**9, block))  # sorts after all the message's own blocks
            spot = (len(self.entries) - 1, len(last.blocks) - 1)
        else:
            self.entries.append(Entry(None, "user", {"role": "user", "content": [block]}))
            spot = (len(self.entries) - 1, 0)
        if self.summary_at is None:  # the first new message is the summary (only the head comes before it)
            self.summary_at, self.summarized = spot, text.startswith(SUMMARY_PREFIX)

    def messages(self) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for entry in self.entries:
            if entry.blocks is None:
                out.append(entry.message)
            else:
                ordered = [block for _, block in sorted(entry.blocks, key=lambda pair: pair[0])]
                out.append({**entry.message, "content": ordered})
        return out


def blocks_of(content: object) -> list[Block]:
    if isinstance(content, list):
        return list(content)
    return [{"type": "text", "text": content if isinstance(content, str) else ""}]


def assistant_blocks(message: Message) -> list[Block]:
    blocks: list[Block] = []
    if text := text_of_parts(message.get("content")):
        blocks.append({"type": "text", "text": text})
    for call in message.get("tool_calls") or []:
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict):
            continue
        try:
            arguments = orjson.loads(function.get("arguments") or "{}")
        except orjson.JSONDecodeError:
            arguments = {"input": function.get("arguments")}
        blocks.append({"type": "tool_use", "id": call.get("id"), "name": function.get("name"), "input": arguments})
    return blocks or [{"type": "text", "text": ""}]


def breakpoints_of(field: object) -> int:
    """The number of `cache_control` breakpoints in `system`, `tools` or content, including a tool result's parts."""
    if isinstance(field, list):
        return sum(breakpoints_of(item) for item in field)
    if not isinstance(field, dict):
        return 0
    return (field.get("cache_control") is not None) + breakpoints_of(field.get("content"))


Spot = tuple[int, ...]  # a block's path in the messages: (message, block) or (message, block, part)


def place_breakpoints(
    out: list[dict[str, Any]], originals: list[dict[str, Any]], written: Written, budget: int
) -> None:
    """Move a breakpoint from the removed messages to the summary, and keep at most `budget` in the messages."""
    kept = {entry.source for entry in written.entries}
    removed = [
        control
        for index, message in enumerate(originals)
        if index not in kept
        for _, control in marks_of(message.get("content"), (index,))
    ]
    if removed and written.summary_at is not None:
        index, position = written.summary_at
        content = list(out[index]["content"])
        content[position] = {**content[position], "cache_control": removed[-1]}  # the latest removed one
        out[index] = {**out[index], "content": content}
    spots = [spot for spot, _ in message_marks(out)]
    # Removed in this order: the oldest, then the summary's, and last the latest (it caches the most).
    order = [spot for spot in spots[:-1] if spot != written.summary_at]
    order += [spot for spot in spots[:-1] if spot == written.summary_at] + spots[-1:]
    dropped: dict[int, list[Spot]] = {}
    for spot in order[: max(len(spots) - max(budget, 0), 0)]:
        dropped.setdefault(spot[0], []).append(spot[1:])
    for index, paths in dropped.items():  # each message copied once, however many of its marks go
        out[index] = without_marks(out[index], paths)


def mark_head(out: list[dict[str, Any]], written: Written, budget: int, *, marks: list[Any]) -> None:
    """Add a breakpoint at the end of the head, just before a summary, if the request has one to spare and the
    client caches its tools or system (`marks`, in order).

    It copies the preceding breakpoint, so no TTL is longer than an earlier one's (Anthropic refuses a 1h
    breakpoint after a 5m one). The head, system and tools are then read from the cache across compactions,
    instead of being written to it again after each one."""
    if written.summary_at is None or not written.summarized or not marks:
        return
    spots = message_marks(out)
    if len(spots) >= budget:
        return
    index, position = written.summary_at
    if position == 0:
        index -= 1
        content = out[index].get("content") if index >= 0 else None
        if not isinstance(content, list) or not content:
            return
        position = len(content)
    head_end = (index, position - 1)
    preceding = [mark for spot, mark in spots if spot < head_end]
    content = list(out[index]["content"])
    block = content[position - 1]
    # A thinking block takes no `cache_control`.
    if not isinstance(block, dict) or block.get("cache_control") is not None or block.get("type") in THINKING:
        return
    content[position - 1] = {**block, "cache_control": (preceding or marks)[-1]}
    out[index] = {**out[index], "content": content}


def marks_in(field: object) -> list[Any]:
    """The `cache_control` of each breakpoint in `system` or `tools`, in order."""
    return [
        item["cache_control"]
        for item in (field if isinstance(field, list) else [])
        if isinstance(item, dict) and item.get("cache_control") is not None
    ]


def message_marks(messages: list[dict[str, Any]]) -> list[tuple[Spot, Any]]:
    """Each breakpoint in the messages, in order: its path and its `cache_control`."""
    return [found for i, message in enumerate(messages) for found in marks_of(message.get("content"), (i,))]


def marks_of(content: object, path: Spot) -> list[tuple[Spot, Any]]:
    """Each breakpoint in a message's content, in order: its path and its `cache_control`."""
    found: list[tuple[Spot, Any]] = []
    for j, block in enumerate(content if isinstance(content, list) else []):
        if isinstance(block, dict):
            if block.get("cache_control") is not None:
                found.append(((*path, j), block["cache_control"]))
            found += marks_of(block.get("content"), (*path, j))
    return found


def without_marks(node: dict[str, Any], paths: list[Spot]) -> dict[str, Any]:
    """A copy of `node` (a message or a block) without the breakpoints at `paths` in its content, each list copied
    once (so the work is linear in the marks); `node` is unchanged."""
    if any(not path for path in paths):
        node = {key: value for key, value in node.items() if key != "cache_control"}
    inner: dict[int, list[Spot]] = {}
    for path in paths:
        if path:
            inner.setdefault(path[0], []).append(path[1:])
    if not inner:
        return node
    content = list(node["content"])
    for position, rest in inner.items():
        content[position] = without_marks(content[position], rest)
    return {**node, "content": content}


MESSAGES = Messages()
