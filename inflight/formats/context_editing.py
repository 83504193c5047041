"""Anthropic's context editing (`context_management.edits`), done by inflight for upstreams that lack it.

A client can ask Anthropic to edit its context before the model sees it. `clear_tool_uses_20250919`
replaces the results of old tool uses with a placeholder once the prompt passes a trigger (and, with
`clear_tool_inputs`, their inputs too); `clear_thinking_20251015` removes the thinking from all but the
latest assistant turns. An upstream that does not know the field (llama.cpp, vLLM, a gateway) either
refuses it, or ignores it and overflows the window. In that case inflight does the edits itself,
removes the field, and reports what it did as Anthropic does (`context_management.applied_edits`).

The rules, as Anthropic documents them:
- `clear_tool_uses_20250919`: `trigger` (`{"type": "input_tokens" | "tool_uses", "value": N}`,
  default 100,000 input tokens); `keep` (`{"type": "tool_uses", "value": N}`, default 3: the latest
  tool uses stay whole); `exclude_tools` (names never cleared); `clear_at_least` (`input_tokens`:
  nothing is cleared unless at least that much can be); `clear_tool_inputs` (true, or the names of
  the tools whose inputs are cleared too).
- `clear_thinking_20251015`: `keep` (`{"type": "thinking_turns", "value": N}`, default 1; `"all"`
  keeps every one). An assistant message made of thinking alone keeps it (an empty turn is invalid).

Other edits (`compact_20260112`) are not done here: inflight's own compaction replaces them.

Each edit walks the whole conversation, so a body may ask for at most `MAX_EDITS` of them (a real client
asks for one or two): more is refused, so the work stays linear in what was sent.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson

from inflight.errors import BadRequest
from inflight.frozen import frozen

TOOL_USES = "clear_tool_uses_20250919"
THINKING_BLOCKS = "clear_thinking_20251015"
THINKING = ("thinking", "redacted_thinking")
DEFAULT_TRIGGER_TOKENS = 100_000
DEFAULT_KEEP_TOOL_USES = 3
DEFAULT_KEEP_THINKING_TURNS = 1
MAX_EDITS = 8  # edits done for one request; more is refused with a 400
CLEARED_RESULT = "[inflight: this tool result was cleared to save context (context_management clear_tool_uses)]"

Count = Callable[[str], int]  # tokens of a text, in the upstream's units
Message = dict[str, Any]


@frozen
class Edited:
    """The body with the edits done and the field removed, and what was done (Anthropic's `applied_edits`)."""

    payload: dict[str, Any]
    applied: list[dict[str, Any]]


def asks_edits(payload: dict[str, Any]) -> bool:
    """Whether the body asks the upstream to edit its context (any `context_management.edits`)."""
    management = payload.get("context_management")
    edits = management.get("edits") if isinstance(management, dict) else None
    return isinstance(edits, list) and bool(edits)


def apply_edits(payload: dict[str, Any], *, prompt_tokens: int, count: Count) -> Edited:
    """Apply each edit the body asks for, in order, each to the prompt as the previous edits left it."""
    management = payload.get("context_management")
    edits = management.get("edits") if isinstance(management, dict) else None
    if isinstance(edits, list) and len(edits) > MAX_EDITS:
        raise BadRequest(
            f"context_management.edits: inflight does at most {MAX_EDITS} edits in the upstream's place, "
            f"got {len(edits):,}",
            param="context_management.edits",
        )
    messages: list[Message] = list(payload.get("messages") or [])
    applied: list[dict[str, Any]] = []
    for edit in edits if isinstance(edits, list) else []:
        kind = edit.get("type") if isinstance(edit, dict) else None
        report = None
        if kind == TOOL_USES:
            report = clear_tool_uses(messages, edit, prompt_tokens=prompt_tokens, count=count)
        elif kind == THINKING_BLOCKS:
            report = clear_thinking(messages, edit, count=count)
        if report is not None:
            applied.append(report)
            prompt_tokens -= int(report["cleared_input_tokens"])
    without = {key: value for key, value in payload.items() if key != "context_management"}
    return Edited({**without, "messages": messages}, applied)


def clear_tool_uses(
    messages: list[Message], edit: dict[str, Any], *, prompt_tokens: int, count: Count
) -> dict[str, Any] | None:
    """Clear the results (and, if asked, the inputs) of all but the latest tool uses, in `messages`."""
    uses = tool_uses(messages)
    trigger = field_of(edit, "trigger")
    if trigger.get("type") == "tool_uses":
        if len(uses) <= number(trigger.get("value"), 0):
            return None
    elif prompt_tokens <= number(trigger.get("value"), DEFAULT_TRIGGER_TOKENS):
        return None
    keep_field = edit.get("keep")
    keep = number(keep_field.get("value") if isinstance(keep_field, dict) else None, DEFAULT_KEEP_TOOL_USES)
    excluded = names_in(edit.get("exclude_tools"))
    inputs = edit.get("clear_tool_inputs")
    inputs_of = names_in(inputs)
    results = results_by_id(messages)
    cleared, tokens = 0, 0
    changed: dict[tuple[int, int], dict[str, Any]] = {}
    for index, position, block in uses[: max(len(uses) - keep, 0)]:
        if block.get("name") in excluded:
            continue
        found = results.get(str(block.get("id")))
        use_changed = False
        if found is not None and found[2].get("content") != CLEARED_RESULT:
            result = found[2]
            tokens += count(text_of(result.get("content"))) - count(CLEARED_RESULT)
            changed[found[0], found[1]] = {**result, "content": CLEARED_RESULT}
            use_changed = True
        if (inputs is True or block.get("name") in inputs_of) and block.get("input"):
            tokens += count(orjson.dumps(block.get("input")).decode())
            changed[index, position] = {**block, "input": {}}
            use_changed = True
        cleared += use_changed
    at_least = field_of(edit, "clear_at_least")
    if not cleared or tokens < number(at_least.get("value"), 0):
        return None
    for (index, position), block in changed.items():
        content = list(messages[index]["content"])
        content[position] = block
        messages[index] = {**messages[index], "content": content}
    return {"type": TOOL_USES, "cleared_tool_uses": cleared, "cleared_input_tokens": max(tokens, 0)}


def clear_thinking(messages: list[Message], edit: dict[str, Any], *, count: Count) -> dict[str, Any] | None:
    """Take the thinking out of all but the latest `keep` assistant turns that have some."""
    keep = edit.get("keep", {"type": "thinking_turns", "value": DEFAULT_KEEP_THINKING_TURNS})
    if keep == "all" or (isinstance(keep, dict) and keep.get("type") == "all"):
        return None
    kept = number(keep.get("value") if isinstance(keep, dict) else None, DEFAULT_KEEP_THINKING_TURNS)
    turns = [i for i, m in enumerate(messages) if m.get("role") == "assistant" and thinking_of(m)]
    cleared, tokens = 0, 0
    for index in turns[: max(len(turns) - kept, 0)]:
        content = messages[index]["content"]
        others = [b for b in content if not (isinstance(b, dict) and b.get("type") in THINKING)]
        if not others:
            continue  # only thinking: removing it would leave an empty turn, which is refused
        tokens += sum(count(str(b.get("thinking") or b.get("data") or "")) for b in thinking_of(messages[index]))
        messages[index] = {**messages[index], "content": others}
        cleared += 1
    if not cleared:
        return None
    return {"type": THINKING_BLOCKS, "cleared_thinking_turns": cleared, "cleared_input_tokens": tokens}


def tool_uses(messages: list[Message]) -> list[tuple[int, int, dict[str, Any]]]:
    """(message index, block index, block) of every `tool_use`, in order."""
    return [
        (i, j, block)
        for i, message in enumerate(messages)
        if message.get("role") == "assistant" and isinstance(message.get("content"), list)
        for j, block in enumerate(message["content"])
        if isinstance(block, dict) and block.get("type") == "tool_use"
    ]


def results_by_id(messages: list[Message]) -> dict[str, tuple[int, int, dict[str, Any]]]:
    """The `tool_result` answering each tool use, by its id (for a reused id, the latest result)."""
    return {
        str(block.get("tool_use_id")): (i, j, block)
        for i, message in enumerate(messages)
        if message.get("role") == "user" and isinstance(message.get("content"), list)
        for j, block in enumerate(message["content"])
        if isinstance(block, dict) and block.get("type") == "tool_result"
    }


def thinking_of(message: Message) -> list[dict[str, Any]]:
    content = message.get("content")
    blocks = content if isinstance(content, list) else []
    return [b for b in blocks if isinstance(b, dict) and b.get("type") in THINKING]


def text_of(content: object) -> str:
    if isinstance(content, str):
        return content
    return orjson.dumps(content).decode() if content is not None else ""


def names_in(value: object) -> set[str]:
    """The tool names in a list the client sent (other entries, or a value that is not a list, are ignored)."""
    return {name for name in value if isinstance(name, str)} if isinstance(value, list) else set()


def field_of(edit: dict[str, Any], name: str) -> dict[str, Any]:
    value = edit.get(name)
    return value if isinstance(value, dict) else {}


def number(value: object, default: int) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else default
