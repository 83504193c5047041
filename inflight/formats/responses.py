"""The Responses API (`POST /v1/responses`): `input` items read as the core's messages, and written back.

How `read` turns items into messages:
- `instructions` becomes a leading `system` message (counted and never compacted; it stays in its own
  field). `input` given as a string becomes one `user` message.
- A `message` item (or an item with a `role` and no `type`) becomes a message with that role: its text
  parts as text, `input_image` as an image (counted as one), `input_file` counted by size.
- The model's output from one turn becomes one `assistant` message: the consecutive `reasoning` items,
  output `message` and calls (`function_call`, `custom_tool_call`, `local_shell_call`). The calls become
  `tool_calls`, with a custom tool's `input` or a shell's `action` as the arguments so the ledger can
  read the commands. Such a message is opaque: it carries encrypted reasoning that the upstream
  verifies, so it is sent unchanged or dropped together with its turn, and a reasoning item always
  stays with the output that follows it.
- Each output item (`function_call_output`, `custom_tool_call_output`, `local_shell_call_output`)
  becomes a `tool` message answering its call; these are what masking and truncation work on.
- `compaction` items, `item_reference`s and any type this module does not know become an opaque `user`
  message counted by its size.

`write` walks the compacted messages. A message the core did not touch is written back as the exact
items it came from. A tool result the core masked or truncated is written back as its output item with
the new output (parts stay parts). A new message (the summary) becomes a `message` item. Everything else
in the body is kept.

With `previous_response_id` the history is stored upstream and not visible here, so such a request is
counted but never compacted (`compactable` is False). Usage is `usage.input_tokens` in the JSON body or
in `response.completed`. A refusal is a 400 with `code: context_length_exceeded`, or a `response.failed`
event with that code, which comes after `response.created` and `response.in_progress` (so
`stream_pending` has the proxy read the stream up to it before relaying).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from typing import Any

import orjson

from inflight.codecs.sse import event_data
from inflight.formats.compaction_items import ItemKey, is_ours
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
    event_name,
    is_comment,
    refuses_field,
    text_of_parts,
    usage_count,
)
from inflight.policy.refusals import Refusal, detect, detect_document

log = logging.getLogger("inflight")

CALLS = ("function_call", "custom_tool_call", "local_shell_call")
OUTPUTS = ("function_call_output", "custom_tool_call_output", "local_shell_call_output")
PENDING_EVENTS = frozenset({"response.created", "response.in_progress", "response.queued"})
UNREADABLE_ITEM = (
    "[inflight: the summary of the earlier conversation was sealed by another inflight proxy or for another "
    "key (or changed) and could not be read; the messages it replaced are not available]"
)
TEXT_PARTS = ("input_text", "output_text", "text", "summary_text", "reasoning_text")

Item = dict[str, Any]


class Responses(OpenAIShape):
    """The Responses API format; `item_key` decrypts inflight's own compaction items (None: each is replaced by
    the unreadable-item note)."""

    def __init__(self, item_key: ItemKey | None = None) -> None:
        self.item_key = item_key

    spec = FormatSpec(
        name="responses",
        routes=(Route("/v1/responses"),),
        errors=OPENAI_ERRORS,
        session_header="session-id",  # Codex's; `prompt_cache_key` in the body takes precedence
        in_place_summaries=False,  # a summary asked through Chat Completions cannot use this API's prompt cache
    )

    def read(self, payload: dict[str, Any], target: Target = UNROUTED, *, tenant: str = "") -> CoreRequest | None:
        model, source = payload.get("model"), payload.get("input")
        if not isinstance(model, str) or not isinstance(source, str | list):
            return None
        if isinstance(source, list) and not all(isinstance(item, dict) for item in source):
            return None
        messages, origins, opaque = view_of(payload.get("instructions"), source)
        expanded: list[int] = []
        if isinstance(source, list) and any(is_our_item(item) for item in source):
            messages, origins, opaque, expanded = self.expand(messages, origins, opaque, source, tenant=tenant)
        view: dict[str, Any] = {"messages": messages, **tool_fields(payload)}
        limit = payload.get("max_output_tokens")
        session = payload.get("prompt_cache_key")
        return CoreRequest(
            model=model,
            view=view,
            output_limit=limit if isinstance(limit, int) and not isinstance(limit, bool) and limit > 0 else None,
            session=session if isinstance(session, str) and session else None,
            opaque=frozenset(opaque),
            # With a stored response or conversation, the history is kept upstream, so we cannot rewrite it.
            compactable=payload.get("previous_response_id") is None and payload.get("conversation") is None,
            origins=origins,
            expanded=frozenset(expanded),
            unopened=sum(messages[i].get("content") is UNREADABLE_ITEM for i in expanded),
            compact_at=compact_threshold(payload.get("context_management")),
        )

    def expand(
        self,
        messages: list[Message],
        origins: list[tuple[int, ...] | None],
        opaque: list[int],
        items: list[Item],
        *,
        tenant: str,
    ) -> tuple[list[Message], list[tuple[int, ...] | None], list[int], list[int]]:
        """Replace inflight's compaction items with the summaries they hold, decrypted for `tenant`, and drop
        what the last one covers.

        Each summary becomes a user message, as the core writes summaries. As OpenAI does, every item between
        the head (the instructions and task: everything before the model's first output) and the last of our
        items is dropped, except system and developer messages (an agent resends its instructions every time)
        and our other items (each holds an earlier summary). A tool output whose call was dropped goes too."""
        last = max(i for i, item in enumerate(items) if is_our_item(item))
        head_end = next((i for i, item in enumerate(items) if is_output_item(item)), len(items))
        kept: list[tuple[Message, tuple[int, ...] | None, bool, bool]] = []
        for index, (message, origin) in enumerate(zip(messages, origins, strict=True)):
            item_index = origin[0] if origin else None
            if item_index is not None and is_our_item(items[item_index]):
                summary = {"role": "user", "content": self.open(items[item_index], tenant=tenant)}
                kept.append((summary, origin, False, True))
            elif (
                item_index is None
                or item_index < head_end
                or item_index > last
                or message.get("role") in ("system", "developer")
            ):
                kept.append((message, origin, index in opaque, False))
        calls = {c.get("id") for m, _, _, _ in kept for c in m.get("tool_calls") or [] if isinstance(c, dict)}
        kept = [k for k in kept if k[0].get("role") != "tool" or k[0].get("tool_call_id") in calls]
        return (
            [m for m, _, _, _ in kept],
            [o for _, o, _, _ in kept],
            [i for i, (_, _, is_opaque, _) in enumerate(kept) if is_opaque],
            [i for i, (_, _, _, is_expanded) in enumerate(kept) if is_expanded],
        )

    def open(self, item: Item, *, tenant: str) -> str:
        """The summary held in one of our compaction items.

        An item that cannot be decrypted (encrypted with another key, as after a restart without
        `responses.item_key`, or for another client's key, or by an older inflight, or edited) is replaced
        by a note saying so. The request is still sent (the upstream could not have read the item either),
        and the model is told that something was lost."""
        token = str(item.get("encrypted_content"))
        summary = self.item_key.open(token, tenant=tenant) if self.item_key is not None else None
        if summary is None:
            log.warning("[responses] a compaction item of inflight's could not be opened; sent as a note instead")
            return UNREADABLE_ITEM
        return summary

    def write(self, payload: dict[str, Any], request: CoreRequest, messages: list[Message]) -> bytes:
        source = payload["input"]
        items: list[Item] = (
            source if isinstance(source, list) else [{"type": "message", "role": "user", "content": source}]
        )
        by_identity = {id(message): origin for message, origin in zip(request.messages, request.origins, strict=True)}
        where = {id(message): index for index, message in enumerate(request.messages)}
        expanded = {id(request.messages[index]) for index in request.expanded}
        written: list[Item] = []
        # Compaction keeps the order, so a changed message is found at or after the last one written.
        position = 0
        for message in messages:
            origin = by_identity.get(id(message))
            if id(message) in where:
                position = max(position, where[id(message)] + 1)
            if id(message) in expanded:
                written.append(message_item(message))  # the summary held in our compaction item
            elif origin is not None:
                written += [items[index] for index in origin]  # untouched: write its original items
            elif id(message) in by_identity:
                continue  # the instructions: they stay in their own field
            elif (found := self.replaced_output(request, message, position)) is not None:
                index, position = found
                written.append(with_output(items[index], message.get("content")))
            else:
                written.append(message_item(message))
        return orjson.dumps({**payload, "input": written})

    @staticmethod
    def replaced_output(request: CoreRequest, message: Message, start: int) -> tuple[int, int] | None:
        """The output item a masked or truncated tool message came from, and the position after it.

        It is the first tool message at or after `start` that answers the same call (agents may reuse call ids)."""
        if message.get("role") != "tool":
            return None
        for position in range(start, len(request.messages)):
            original, origin = request.messages[position], request.origins[position]
            if (
                original.get("role") == "tool"
                and original.get("tool_call_id") == message.get("tool_call_id")
                and origin
            ):
                return origin[0], position + 1
        return None

    def refusal(self, status: int, body: bytes, *, content_encoding: bytes | None) -> Refusal | None:
        return detect(status, body, content_encoding=content_encoding)

    def stream_pending(self, event: bytes) -> bool:
        """Whether the event is `response.created` or similar, or a comment (`: OPENROUTER PROCESSING`), which
        does not yet show acceptance or refusal."""
        return is_comment(event) or event_type(event) in PENDING_EVENTS

    def stream_refusal(self, event: bytes) -> Refusal | None:
        document = event_document(event)
        if not isinstance(document, dict):
            return None
        if document.get("type") == "response.failed" and isinstance(document.get("response"), dict):
            return detect_document(document["response"])
        if document.get("type") == "error" or "error" in document:
            return detect_document(document)
        return None

    def prompt_tokens(self, document: object) -> int | None:
        return usage_count(document, "input_tokens", envelope="response")  # a stream's `response.completed`

    def output_tokens(self, document: object) -> int | None:
        return usage_count(document, "output_tokens", envelope="response")

    def take_over(self, payload: dict[str, Any], *, prompt_tokens: int, count: Callable[[str], int]) -> TakenOver:
        return TakenOver(self.without_server_compaction(payload))

    def without_server_compaction(self, payload: dict[str, Any]) -> dict[str, Any]:
        entries = payload.get("context_management")
        if not isinstance(entries, list):
            return payload
        others = [e for e in entries if not (isinstance(e, dict) and e.get("type") == "compaction")]
        without = {key: value for key, value in payload.items() if key != "context_management"}
        return {**without, "context_management": others} if others else without

    def rejects_server_compaction(self, status: int, body: bytes) -> bool:
        return refuses_field(status, body, "context_management")

    def summary_request(
        self, messages: list[Message], *, model: str, max_tokens: int, tools: object = None
    ) -> UpstreamCall:
        """The prompt as `instructions`, the rest as input, not stored upstream (`tools` is ignored: only Chat
        Completions summarizes in place)."""
        instructions = "\n\n".join(str(m.get("content")) for m in messages if m.get("role") == "system")
        others = [{"role": m["role"], "content": m.get("content")} for m in messages if m.get("role") != "system"]
        body = {
            "model": model,
            "instructions": instructions,
            "input": others,
            "max_output_tokens": max_tokens,
            "store": False,
            "stream": False,
        }
        return UpstreamCall("/v1/responses", body)

    def summary_reply(self, document: object) -> tuple[str, str | None]:
        if not isinstance(document, dict):
            return "", None
        output = document.get("output")
        texts = [
            text_of_parts(item.get("content"))
            for item in (output if isinstance(output, list) else [])
            if isinstance(item, dict) and item.get("type") == "message"
        ]
        details = document.get("incomplete_details")
        cut = isinstance(details, dict) and details.get("reason") == "max_output_tokens"
        return "".join(texts), ("length" if cut else "stop")


def view_of(
    instructions: object, source: str | list[Item]
) -> tuple[list[Message], list[tuple[int, ...] | None], list[int]]:
    """The messages, the items each came from (None for the instructions), and the indices of opaque ones."""
    messages: list[Message] = []
    origins: list[tuple[int, ...] | None] = []
    opaque: list[int] = []
    if isinstance(instructions, str) and instructions:
        messages.append({"role": "system", "content": instructions})
        origins.append(None)
    if isinstance(source, str):
        messages.append({"role": "user", "content": source})
        origins.append((0,))
        return messages, origins, opaque
    for indices in turns_of(source):
        first = source[indices[0]]
        kind = first.get("type")
        if is_output_item(first):
            message = assistant_message([source[i] for i in indices])
            opaque.append(len(messages))
        elif kind in OUTPUTS:
            message = {"role": "tool", "tool_call_id": str(first.get("call_id")), "content": output_content(first)}
        elif kind in (None, "message") and isinstance(first.get("role"), str):
            message = {"role": first["role"], "content": content_of(first.get("content"))}
        else:  # compaction, item_reference, Codex's additional_tools, unknown types: kept as is, counted by size
            role = first["role"] if first.get("role") in ("system", "developer") else "user"
            message = {"role": role, "content": orjson.dumps(first).decode()}
            opaque.append(len(messages))
        messages.append(message)
        origins.append(indices)
    return messages, origins, opaque


def compact_threshold(entries: object) -> int | None:
    """N from `context_management: [{"type": "compaction", "compact_threshold": N}]` (None: no such entry)."""
    for entry in entries if isinstance(entries, list) else []:
        if isinstance(entry, dict) and entry.get("type") == "compaction":
            threshold = entry.get("compact_threshold")
            if isinstance(threshold, int) and not isinstance(threshold, bool) and threshold > 0:
                return threshold
    return None


def is_our_item(item: object) -> bool:
    """Whether the item is a `compaction` item inflight made (`inflight.formats.compaction_items`), not the
    upstream's."""
    return isinstance(item, dict) and item.get("type") == "compaction" and is_ours(item.get("encrypted_content"))


def turns_of(items: list[Item]) -> Iterator[tuple[int, ...]]:
    """Item indices grouped into the core's messages: each run of the model's outputs (the reasoning, message
    and calls of one turn, which always sit together between inputs) is one group; any other item is alone."""
    group: list[int] = []
    for index, item in enumerate(items):
        if is_output_item(item):
            group.append(index)
            continue
        if group:
            yield tuple(group)
            group = []
        yield (index,)
    if group:
        yield tuple(group)


def is_output_item(item: Item) -> bool:
    """Whether the model produced the item: its reasoning, an assistant message, a tool call."""
    kind = item.get("type")
    return kind == "reasoning" or kind in CALLS or (kind in (None, "message") and item.get("role") == "assistant")


def assistant_message(items: list[Item]) -> Message:
    texts, calls, reasoning = [], [], []
    for item in items:
        kind = item.get("type")
        if kind == "reasoning":
            summary = item.get("summary")
            reasoning.append(text_of_parts(summary) if isinstance(summary, list) else "")
            reasoning.append(str(item.get("encrypted_content") or ""))
        elif kind in CALLS:
            calls.append({"id": str(item.get("call_id")), "type": "function", "function": call_function(item)})
        else:
            texts.append(text_of_parts(item.get("content")))
    message: Message = {"role": "assistant", "content": "\n".join(t for t in texts if t) or None}
    if calls:
        message["tool_calls"] = calls
    if any(reasoning):
        message["reasoning_content"] = "\n".join(r for r in reasoning if r)
    return message


def call_function(item: Item) -> dict[str, str]:
    """A call as Chat Completions' `function`, with a custom tool's input or a shell's action as the arguments."""
    kind = item.get("type")
    if kind == "custom_tool_call":
        return {"name": str(item.get("name") or "tool"), "arguments": str(item.get("input") or "")}
    if kind == "local_shell_call":
        action = item.get("action")
        command = action.get("command") if isinstance(action, dict) else None
        shown = " ".join(map(str, command)) if isinstance(command, list) else str(command or "")
        return {"name": "local_shell", "arguments": orjson.dumps({"command": shown}).decode()}
    return {"name": str(item.get("name") or "tool"), "arguments": str(item.get("arguments") or "")}


def output_content(item: Item) -> str | list[dict[str, Any]]:
    output = item.get("output")
    if isinstance(output, str):
        return output
    if isinstance(output, list):
        return content_of(output)
    return orjson.dumps(output).decode()


def content_of(content: object) -> str | list[dict[str, Any]]:
    """A message's content in Chat Completions' form: a string, or text and image parts."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return "" if content is None else orjson.dumps(content).decode()
    parts: list[dict[str, Any]] = []
    for part in content:
        kind = part.get("type") if isinstance(part, dict) else None
        if kind in TEXT_PARTS and isinstance(part.get("text"), str):
            parts.append({"type": "text", "text": part["text"]})
        elif kind == "refusal" and isinstance(part.get("refusal"), str):
            parts.append({"type": "text", "text": part["refusal"]})
        elif kind == "input_image":
            url = part.get("image_url") if isinstance(part.get("image_url"), str) else ""
            parts.append({"type": "image_url", "image_url": {"url": url, "detail": part.get("detail") or "auto"}})
        else:
            parts.append({"type": "text", "text": orjson.dumps(part).decode()})
    return parts


def with_output(item: Item, content: object) -> Item:
    """An output item with the core's new output, in the item's own form.

    A mask (a string) replaces the output whole; truncated parts change only the text of the parts that
    were cut (an image or file part stays as it was)."""
    output = item.get("output")
    if isinstance(output, list) and isinstance(content, list) and len(content) == len(output):
        parts = []
        for original, part in zip(output, content, strict=True):
            text = part.get("text") if isinstance(part, dict) else None
            keep = not isinstance(original, dict) or not isinstance(original.get("text"), str) or text is None
            parts.append(original if keep else {**original, "text": text})
        return {**item, "output": parts}
    text = content if isinstance(content, str) else text_of_parts(content)
    if isinstance(output, list):
        return {**item, "output": [{"type": "input_text", "text": text}]}
    return {**item, "output": text}


def message_item(message: Message) -> Item:
    """A message the core wrote (the summary) as an input item."""
    role = message.get("role") if message.get("role") in ("user", "system", "developer", "assistant") else "user"
    text = message.get("content") if isinstance(message.get("content"), str) else text_of_parts(message.get("content"))
    kind = "output_text" if role == "assistant" else "input_text"
    return {"type": "message", "role": role, "content": [{"type": kind, "text": text}]}


def tool_fields(payload: dict[str, Any]) -> dict[str, Any]:
    """The tool definitions as Chat Completions' fields, for counting (function tools converted, others
    counted by the size of their JSON)."""
    fields: dict[str, Any] = {}
    tools = payload.get("tools")
    if isinstance(tools, list) and tools:
        fields["tools"] = [chat_tool(tool) for tool in tools if isinstance(tool, dict)]
    choice = payload.get("tool_choice")
    if isinstance(choice, str):
        fields["tool_choice"] = choice
    elif isinstance(choice, dict) and isinstance(choice.get("name"), str):
        fields["tool_choice"] = {"type": "function", "function": {"name": choice["name"]}}
    text = payload.get("text")
    form = text.get("format") if isinstance(text, dict) else None
    if isinstance(form, dict) and form.get("type") == "json_schema":
        schema = {"name": form.get("name") or "response", "schema": form.get("schema") or {}}
        fields["response_format"] = {"type": "json_schema", "json_schema": schema}
    return fields


def chat_tool(tool: dict[str, Any]) -> dict[str, Any]:
    if tool.get("type") == "function":
        function = {key: tool[key] for key in ("name", "description", "parameters") if key in tool}
        return {"type": "function", "function": function}
    # A custom tool (with its grammar) or a built-in one: named by its name or type, described by its JSON.
    name = str(tool.get("name") or tool.get("type") or "tool")
    return {"type": "function", "function": {"name": name, "description": orjson.dumps(tool).decode()}}


def event_document(event: bytes) -> Any:
    """An SSE event's data, parsed (None if it has none or it is not JSON)."""
    data = event_data(event)
    try:
        return orjson.loads(data) if data else None
    except orjson.JSONDecodeError:
        return None


def event_type(event: bytes) -> str | None:
    """An event's name, else the `type` in its data (OpenAI's streams name some events but not all)."""
    named = event_name(event)
    if named is not None:
        return named
    document = event_document(event)
    kind = document.get("type") if isinstance(document, dict) else None
    return kind if isinstance(kind, str) else None


RESPONSES = Responses()
