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
from inflight.compaction.ledger import LEDGER_HEADING
from inflight.compaction.summary_job import SUMMARY_PREFIX

MESSAGE_CHARS = 2_000  # a user's or the assistant's text in the tail (or the head's user messages)
OUTPUT_CHARS = 400  # a tool's output, head and end
USER_MESSAGES = "The user's messages at the start of the conversation:\n"
LATEST_TURNS = "The latest turns, as they happened (long outputs cut):\n"
LEDGER_CHARS = 1_500  # the ledger below a summary: the agent keeps it in its context from then on
TAIL_CHARS = 4_000  # all of the tail (about a thousand tokens): past it, its oldest turns go first


def handoff_text(
    messages: Sequence[Message],
    origins: Sequence[int | None],
    *,
    head_len: int,
    keeps_user_messages: bool,
    keeps_recent_turns: bool = False,
    instructions: str = "",
    context_tag: str = "",
) -> str:
    """The handoff written from a compaction's messages (`origins`: each one's index in the client's list, None for
    what the compaction wrote: the summary). Without a summary (nothing before the latest turns to summarize), the
    turns after the head follow the user's messages; an agent that `keeps_recent_turns` gets none. The summary's
    ledger is cut to its head and end. Text in `context_tag` elements is left out: the agent's own context (Claude
    Code's `<system-reminder>`s), which it adds again itself."""

    def text(message: Message) -> str:
        readable = text_of(message.get("content"))
        return without_tagged(readable, context_tag) if context_tag else readable

    written = [i for i, origin in enumerate(origins) if origin is None]
    parts: list[str] = []
    if not keeps_user_messages:
        asked = [
            cut(said, MESSAGE_CHARS)
            for message, origin in zip(messages, origins, strict=True)
            if origin is not None and origin < head_len and message.get("role") == "user"
            if (said := users_part(text(message)).strip())
        ]
        if asked:
            parts.append(USER_MESSAGES + "\n\n".join(asked))
    parts.extend(with_ledger_cut(text(messages[i])) for i in written)
    after_head = (i for i, origin in enumerate(origins) if origin is not None and origin >= head_len)
    start = written[-1] + 1 if written else next(after_head, len(messages))
    recent = [] if keeps_recent_turns and written else messages[start:]
    tail = [line for message in recent if (line := turn_text(message, text(message)))]
    while tail and sum(map(len, tail)) > TAIL_CHARS:
        tail.pop(0)
    if tail:
        parts.append(LATEST_TURNS + "\n".join(tail))
    if instructions:
        parts.append(f"Written following the user's instructions for this summary: {instructions}")
    return "\n\n".join(parts)


def users_part(text: str) -> str:
    """A head message's text; of one that holds an earlier handoff (the agent installed it as the start of its
    conversation), only the user's messages quoted in it, so the next handoff quotes them again and does not nest."""
    start = text.find(USER_MESSAGES)
    if start < 0:
        return text
    start += len(USER_MESSAGES)
    ends = [end for mark in (f"\n\n{SUMMARY_PREFIX}", f"\n\n{LATEST_TURNS}") if (end := text.find(mark, start)) >= 0]
    return text[start : min(ends, default=len(text))]


def with_ledger_cut(summary: str) -> str:
    """A summary message's text with its ledger cut to `LEDGER_CHARS`."""
    note, heading, ledger = summary.partition(LEDGER_HEADING)
    return f"{note}{heading}{cut(ledger, LEDGER_CHARS)}" if heading else summary


def turn_text(message: Message, text: str) -> str:
    """One message of the tail (its `text`) as a line or a few: who said it, and what (tool calls by name and
    arguments)."""
    role = message.get("role")
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


def without_tagged(text: str, tag: str) -> str:
    """`text` without its `<tag>...</tag>` elements (an unclosed one is kept), in one pass."""
    opening, closing = f"<{tag}>", f"</{tag}>"
    kept: list[str] = []
    at = 0
    while (start := text.find(opening, at)) >= 0:
        end = text.find(closing, start)
        if end < 0:
            break
        kept.append(text[at:start])
        at = end + len(closing)
    kept.append(text[at:])
    return "".join(kept)
