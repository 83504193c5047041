"""The agents' own compaction requests: recognised in a body, and answered in the shape each agent parses.

Claude Code asks for its summary with the whole history and one more text block, its summary prompt, at
the end of the last user message (after that turn's tool results); it reads the `<summary>` of a text
answer. Codex (with a custom provider) sends the whole history and then a user message holding only its
"CONTEXT CHECKPOINT COMPACTION" prompt on `/v1/responses`, and installs the assistant message of the
answer; with OpenAI as its provider it may instead end a request with a `compaction_trigger` item, and
installs the one `compaction` item it is answered (sealed by inflight, `inflight.formats.compaction_items`).
Gemini CLI sends its history with its snapshot prompt as the system instruction and one more user text asking
for a `<state_snapshot>`, then the same with the snapshot it got and a request to verify it; it installs the
text of the answer (`generateContent`). A request is recognised only by its structure and a pinned version's prompt
(`inflight.formats.agent_prompts`); the same words elsewhere (inside a tool result, in a user's own
question) are not the agent asking, and such a request is forwarded.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

import orjson

from inflight.formats.agent_prompts import (
    CLAUDE_CODE,
    CODEX,
    CODEX_TRIGGER,
    GEMINI_CLI,
    CheckpointPrompt,
    SummaryPrompt,
)
from inflight.frozen import frozen


@frozen(slots=True)
class AgentCompaction:
    """An agent's request for its own compaction: which agent, the user's own instructions ("" if none), and the
    body without the agent's prompt (the conversation to summarize)."""

    agent: str
    instructions: str
    history: dict[str, Any]
    keeps_user_messages: bool  # the agent keeps the user's messages beside the summary (Codex), so it need not
    context_tag: str = ""  # the element the agent's own context comes in (left out of the handoff: it adds it again)
    keeps_recent_turns: bool = False  # the agent keeps its latest turns after the summary, so the handoff need not
    wants_item: bool = False  # it is answered with one sealed `compaction` item, not with text


def recognised(format_name: str, payload: dict[str, Any]) -> AgentCompaction | None:
    """The agent's compaction request this body is, or None when it is not one (or not surely)."""
    if format_name == "messages":
        return claude_code_compaction(payload)
    if format_name == "responses":
        return codex_compaction(payload)
    if format_name == "gemini":
        return gemini_cli_compaction(payload)
    return None


def claude_code_compaction(payload: dict[str, Any]) -> AgentCompaction | None:
    """Claude Code's: the last user message ends with a text block of its summary prompt, after a history."""
    messages = payload.get("messages")
    if (
        not isinstance(messages, list)
        or len(messages) < 2
        or payload.get("tool_choice") not in (None, {"type": "auto"})
    ):
        return None
    last = messages[-1]
    if not isinstance(last, dict) or last.get("role") != "user":
        return None
    content = last.get("content")
    blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
    if not isinstance(blocks, list) or not blocks:
        return None
    block = blocks[-1]
    if not isinstance(block, dict) or block.get("type") != "text" or not isinstance(block.get("text"), str):
        return None
    found = next(
        (
            (prompt, asked)
            for prompt in CLAUDE_CODE
            if (asked := summary_instructions(prompt, block["text"])) is not None
        ),
        None,
    )
    if found is None:
        return None
    prompt, instructions = found
    rest = blocks[:-1]
    history = [*messages[:-1], {**last, "content": rest}] if rest else messages[:-1]
    history_payload = {**payload, "messages": history}
    return AgentCompaction(
        prompt.agent,
        instructions,
        history_payload,
        keeps_user_messages=False,
        context_tag=prompt.context_tag,
        keeps_recent_turns=prompt.keeps_recent_turns,
    )


def summary_instructions(prompt: SummaryPrompt, text: str) -> str | None:
    """The user's instructions ("" if none) if `text` is `prompt`, else None."""
    text = text.strip()
    if not text.startswith(prompt.opening) or prompt.task not in text or not text.endswith(prompt.ending):
        return None
    body, found, _ = text.rpartition(prompt.reminder)
    if not found:
        return None
    _, asked, instructions = body.partition(prompt.instructions)
    return instructions.strip() if asked else ""


def codex_compaction(payload: dict[str, Any]) -> AgentCompaction | None:
    """Codex's: the last input item is a user message of its checkpoint prompt alone, or its compaction trigger
    item, after a history."""
    items = payload.get("input")
    if not isinstance(items, list) or len(items) < 2 or payload.get("previous_response_id"):
        return None
    last = items[-1]
    agent, trigger = CODEX_TRIGGER
    if isinstance(last, dict) and last.get("type") == trigger:
        history = {**payload, "input": items[:-1]}
        return AgentCompaction(agent, "", history, keeps_user_messages=True, wants_item=True)
    if not isinstance(last, dict) or last.get("role") != "user" or last.get("type", "message") != "message":
        return None
    content = last.get("content")
    parts = [{"type": "input_text", "text": content}] if isinstance(content, str) else content
    if not isinstance(parts, list) or len(parts) != 1 or not isinstance(parts[0], dict):
        return None
    text = parts[0].get("text")
    if parts[0].get("type") != "input_text" or not isinstance(text, str):
        return None
    prompt = next((prompt for prompt in CODEX if is_checkpoint(prompt, text)), None)
    if prompt is None:
        return None
    return AgentCompaction(prompt.agent, "", {**payload, "input": items[:-1]}, keeps_user_messages=True)


def gemini_cli_compaction(payload: dict[str, Any]) -> AgentCompaction | None:
    """Gemini CLI's: its snapshot prompt as the system instruction, and a last user content of one text part
    asking for a snapshot (the history before it), or asking to verify the one it got (the history before both)."""
    contents = payload.get("contents")
    system = payload.get("systemInstruction")
    parts = system.get("parts") if isinstance(system, dict) else None
    instruction = "\n".join(
        str(p["text"]) for p in parts or [] if isinstance(p, dict) and isinstance(p.get("text"), str)
    )
    if not isinstance(contents, list) or len(contents) < 2:
        return None
    text = lone_text(contents[-1], "user")
    for prompt in GEMINI_CLI:
        if prompt.system not in instruction or text is None:
            continue
        if text.strip() in prompt.asks:
            history = contents[:-1]
        elif text.strip() == prompt.verify and len(contents) >= 3 and lone_text(contents[-2], "model") is not None:
            history = contents[:-2]  # the snapshot it was given is ours: it is given again
        else:
            continue
        return AgentCompaction(
            prompt.agent,
            "",
            {**payload, "contents": history},
            keeps_user_messages=False,
            context_tag=prompt.context_tag,
            keeps_recent_turns=prompt.keeps_recent_turns,
        )
    return None


def lone_text(content: object, role: str) -> str | None:
    """The text of a content of `role` that holds one text part and nothing else (None: not such a content)."""
    if not isinstance(content, dict) or content.get("role") != role:
        return None
    parts = content.get("parts")
    if not isinstance(parts, list) or len(parts) != 1 or not isinstance(parts[0], dict):
        return None
    text = parts[0].get("text")
    return text if isinstance(text, str) and set(parts[0]) == {"text"} else None


def is_checkpoint(prompt: CheckpointPrompt, text: str) -> bool:
    return text.strip() == prompt.text


def answer(
    format_name: str,
    text: str,
    *,
    model: str,
    prompt_tokens: int,
    output_tokens: int,
    stream: bool,
    item: dict[str, Any] | None = None,
) -> tuple[bytes, bytes]:
    """The answer (its body and content type) an agent installs as its summary: an Anthropic message of one text
    block, or a response of one assistant message, or of the one `item` given; as a stream if the request asked
    for one."""
    if item is not None:
        response = {**openai_response("", model=model, prompt_tokens=prompt_tokens, output_tokens=0), "output": [item]}
        if stream:
            return events(item_events(response)), b"text/event-stream"
        return orjson.dumps(response), b"application/json"
    if format_name == "messages":  # Claude Code installs what its answer's `<summary>` block holds
        text = f"<summary>\n{text}\n</summary>"
        message = anthropic_message(text, model=model, prompt_tokens=prompt_tokens, output_tokens=output_tokens)
        if stream:
            return events(anthropic_events(message)), b"text/event-stream"
        return orjson.dumps(message), b"application/json"
    if format_name == "gemini":  # Gemini CLI installs the answer's text as its snapshot
        reply = gemini_response(
            f"<state_snapshot>\n{text}\n</state_snapshot>",
            model=model,
            prompt_tokens=prompt_tokens,
            output_tokens=output_tokens,
        )
        if stream:
            return b"data: " + orjson.dumps(reply) + b"\r\n\r\n", b"text/event-stream"
        return orjson.dumps(reply), b"application/json"
    response = openai_response(text, model=model, prompt_tokens=prompt_tokens, output_tokens=output_tokens)
    if stream:
        return events(response_events(response)), b"text/event-stream"
    return orjson.dumps(response), b"application/json"


def gemini_response(text: str, *, model: str, prompt_tokens: int, output_tokens: int) -> dict[str, Any]:
    usage = {
        "promptTokenCount": prompt_tokens,
        "candidatesTokenCount": output_tokens,
        "totalTokenCount": prompt_tokens + output_tokens,
    }
    return {
        "candidates": [{"content": {"parts": [{"text": text}], "role": "model"}, "finishReason": "STOP", "index": 0}],
        "usageMetadata": usage,
        "modelVersion": model,
        "responseId": f"inflight-{uuid.uuid4().hex[:24]}",
    }


def events(named: list[dict[str, Any]]) -> bytes:
    """Server-sent events, each named by its `type`, as both APIs send them."""
    return b"".join(b"event: %s\ndata: %s\n\n" % (event["type"].encode(), orjson.dumps(event)) for event in named)


def anthropic_message(text: str, *, model: str, prompt_tokens: int, output_tokens: int) -> dict[str, Any]:
    return {
        "id": f"msg_inflight_{uuid.uuid4().hex[:24]}",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": [{"type": "text", "text": text}],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": {
            "input_tokens": prompt_tokens,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0,
            "output_tokens": output_tokens,
        },
    }


def anthropic_events(message: dict[str, Any]) -> list[dict[str, Any]]:
    usage = message["usage"]
    opening = {**message, "content": [], "stop_reason": None, "usage": {**usage, "output_tokens": 1}}
    text = message["content"][0]["text"]
    return [
        {"type": "message_start", "message": opening},
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": text}},
        {"type": "content_block_stop", "index": 0},
        {
            "type": "message_delta",
            "delta": {"stop_reason": "end_turn", "stop_sequence": None},
            "usage": {"output_tokens": usage["output_tokens"]},
        },
        {"type": "message_stop"},
    ]


def openai_response(text: str, *, model: str, prompt_tokens: int, output_tokens: int) -> dict[str, Any]:
    message = {
        "type": "message",
        "id": f"msg_inflight_{uuid.uuid4().hex[:24]}",
        "status": "completed",
        "role": "assistant",
        "content": [{"type": "output_text", "text": text, "annotations": []}],
    }
    return {
        "id": f"resp_inflight_{uuid.uuid4().hex[:24]}",
        "object": "response",
        "created_at": int(time.time()),
        "status": "completed",
        "model": model,
        "output": [message],
        "usage": {
            "input_tokens": prompt_tokens,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": output_tokens,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": prompt_tokens + output_tokens,
        },
        "error": None,
        "incomplete_details": None,
    }


def response_events(response: dict[str, Any]) -> list[dict[str, Any]]:
    opening = {**response, "status": "in_progress", "output": [], "usage": None}
    item = response["output"][0]
    text = item["content"][0]["text"]
    part = {"type": "output_text", "text": "", "annotations": []}
    base = {"item_id": item["id"], "output_index": 0, "content_index": 0}
    named: list[dict[str, Any]] = [
        {"type": "response.created", "response": opening},
        {"type": "response.in_progress", "response": opening},
        {
            "type": "response.output_item.added",
            "output_index": 0,
            "item": {**item, "status": "in_progress", "content": []},
        },
        {"type": "response.content_part.added", **base, "part": part},
        {"type": "response.output_text.delta", **base, "delta": text},
        {"type": "response.output_text.done", **base, "text": text},
        {"type": "response.content_part.done", **base, "part": {**part, "text": text}},
        {"type": "response.output_item.done", "output_index": 0, "item": item},
        {"type": "response.completed", "response": response},
    ]
    return [{**event, "sequence_number": n} for n, event in enumerate(named)]


def item_events(response: dict[str, Any]) -> list[dict[str, Any]]:
    """The stream of a response whose output is one finished item (a `compaction` item)."""
    opening = {**response, "status": "in_progress", "output": [], "usage": None}
    [item] = response["output"]
    named: list[dict[str, Any]] = [
        {"type": "response.created", "response": opening},
        {"type": "response.in_progress", "response": opening},
        {"type": "response.output_item.added", "output_index": 0, "item": item},
        {"type": "response.output_item.done", "output_index": 0, "item": item},
        {"type": "response.completed", "response": response},
    ]
    return [{**event, "sequence_number": n} for n, event in enumerate(named)]
