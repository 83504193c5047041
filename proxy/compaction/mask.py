"""Stage 2: replace old tool results by a short placeholder that still says what the call was.

The placeholder is a pure function of the call and the result, so the same result is masked to
the same bytes on every turn (the upstream's prompt cache depends on it).
"""

from __future__ import annotations

from typing import Any

import orjson

from proxy.compaction.conversation import Message

MAX_VALUE_CHARS = 60
MAX_ARGS_CHARS = 160


def describe_call(function: dict[str, Any] | None) -> str:
    """`read_file(path="src/app.py")`, clipped; the raw arguments when they are not a JSON object."""
    if not function:
        return "unknown tool"
    name = function.get("name") if isinstance(function.get("name"), str) else "tool"
    arguments = function.get("arguments")
    try:
        parsed = orjson.loads(arguments) if isinstance(arguments, str) and arguments else {}
    except orjson.JSONDecodeError:
        parsed = None
    if isinstance(parsed, dict):
        pairs = [f"{key}={_clip(orjson.dumps(value).decode(), MAX_VALUE_CHARS)}" for key, value in parsed.items()]
        rendered = ", ".join(pairs)
    else:
        rendered = str(arguments)
    return f"{name}({_clip(rendered, MAX_ARGS_CHARS)})"


def placeholder(message: Message, function: dict[str, Any] | None, tokens: int) -> Message:
    """The masked form of a tool result: same role and id, a one-line content."""
    text = f"[tool output pruned: {describe_call(function)} returned {tokens:,} tokens]"
    masked = {key: (text if key == "content" else value) for key, value in message.items()}
    masked.setdefault("content", text)
    return masked


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."
