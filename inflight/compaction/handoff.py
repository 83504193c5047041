"""The text an agent installs when inflight answers its own compaction request: the summary, then the turns after it.

An agent that compacts by itself replaces its whole history with the summary it is answered (Claude Code
keeps nothing else; Codex keeps the user's messages). A compaction of inflight's keeps the head and a
verbatim tail beside its summary, so the handoff says all three in text: the user's messages from the head
(unless the agent keeps them), the summary with its ledger, and the tail's turns, each long text cut to its
head and end so the handoff stays a few thousand tokens.
"""

from __future__ import annotations

from collections.abc import Sequence

from inflight.compaction.conversation import Message, describe_call, text_of

MESSAGE_CHARS = 2_000  # a user's or the assistant's text in the tail (or the head's user messages)
OUTPUT_CHARS = 800  # a tool's output, head and end
TAIL_CHARS = 24_000  # all of the tail: past it, its oldest turns go first


def handoff_text(
    messages: Sequence[Message],
    origins: Sequence[int | None],
    *,
    head_len: int,
    keeps_user_messages: bool,
    instructions: str = "",
) -> str:
    """The handoff written from a compaction's messages (`origins`: each one's index in the client's list, None for
    what the compaction wrote: the summary). Without a summary (nothing before the latest turns to summarize), the
    turns after the head follow the user's messages."""
    written = [i for i, origin in enumerate(origins) if origin is None]
    parts: list[str] = []
    if not keeps_user_messages:
        asked = [
            cut(text_of(message.get("content")), MESSAGE_CHARS)
            for message, origin in zip(messages, origins, strict=True)
            if origin is not None and origin < head_len and message.get("role") == "user"
        ]
        if asked := [text for text in asked if text.strip()]:
            parts.append("The user's messages at the start of the conversation:\n" + "\n\n".join(asked))
    parts.extend(text_of(messages[i].get("content")) for i in written)
    start = (
        written[-1] + 1
        if written
        else next((i for i, o in enumerate(origins) if o is not None and o >= head_len), len(messages))
    )
    tail = [turn_text(message) for message in messages[start:]]
    while tail and sum(map(len, tail)) > TAIL_CHARS:
        tail.pop(0)
    if tail:
        parts.append("The latest turns, as they happened (long outputs cut):\n" + "\n".join(tail))
    if instructions:
        parts.append(f"Written following the user's instructions for this summary: {instructions}")
    return "\n\n".join(parts)


def turn_text(message: Message) -> str:
    """One message of the tail as a line or a few: who said it, and what (tool calls by name and arguments)."""
    role = message.get("role")
    text = text_of(message.get("content"))
    if role == "tool":
        return f"- Tool output: {cut(text, OUTPUT_CHARS)}"
    lines = [f"- {str(role).capitalize()}: {cut(text, MESSAGE_CHARS)}"] if text.strip() else []
    for call in message.get("tool_calls") or []:
        function = call.get("function") if isinstance(call, dict) else None
        lines.append(f"- Assistant called {describe_call(function if isinstance(function, dict) else None)}")
    return "\n".join(lines)


def cut(text: str, limit: int) -> str:
    """`text` whole if it is at most `limit` characters, else its head and end around a marker."""
    if len(text) <= limit:
        return text
    half = limit // 2
    return f"{text[:half]} [... {len(text) - 2 * half:,} characters cut ...] {text[-half:]}"
