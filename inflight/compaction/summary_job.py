"""The summary that replaces the middle of a conversation: the summarizer's prompt, input and output.

The summary is a structured checkpoint, not a story: the agent continues from it with no other
memory of the messages it replaces, so it must carry the task, what was done and decided, and
the exact names (paths, commands, errors, identifiers) the next steps will need.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import field
from functools import lru_cache
from pathlib import Path
from typing import Any

from inflight.compaction.actions import Action
from inflight.compaction.background.scheduler import Final
from inflight.compaction.conversation import Message, calls_of_results, describe_call, text_of
from inflight.compaction.ledger import LEDGER_HEADING
from inflight.frozen import frozen

SUMMARY_PREFIX = "[Previous conversation summary]"

PROMPT_FILE = Path(__file__).parent / "prompts" / "summary.md"
HEAD_CHARS = 6000  # how much of the task the summarizer sees (the start and end of a longer one)
LEDGER_CHARS = 4000


@lru_cache(maxsize=16)
def load_prompt(path: str | None = None) -> str:
    """Read the summarizer's instructions: `compaction.summarize.prompt_file`, or the one shipped with the package."""
    return (Path(path) if path else PROMPT_FILE).read_text(encoding="utf-8")


@frozen
class InPlace:
    """The conversation as last sent upstream, for asking the same model to summarize it "in place".

    When the summarizer is the upstream's own model, its prompt cache already holds these messages. Sent
    again unchanged, with the instruction as one more user message (and the same tools, which it is told
    not to call), they cost a cache hit instead of a fresh prompt."""

    model: str
    messages: Sequence[Message]
    tokens: int  # in our units
    tools: Any = None
    keep_from: str = ""  # the start of the first message that stays unchanged after the summary


@frozen
class SummaryJob:
    """One summarizer request: extend the summary `previous` (or write a new one) to cover `transcript`.

    The summarizer also sees the task (`head`) and the ledger kept beside the summary. With `in_place`, the
    conversation itself is the input, and `transcript` is only used to check the reply."""

    previous: str | None
    transcript: str
    max_tokens: int
    head: str = ""
    ledger: str = ""
    prompt: str = field(default_factory=load_prompt)
    in_place: InPlace | None = None
    input_tokens: int = 0  # tokens it sends by our count, excluding the summary so far; charged to summarizer budgets

    def words(self) -> int:
        return max(self.max_tokens * 2 // 5, 60)  # about 60% of the room, in words; the rest is for the ledger

    def messages(self) -> list[Message]:
        if self.in_place is not None:
            return [*self.in_place.messages, {"role": "user", "content": self.instruction(self.in_place)}]
        parts = [f"<task>\n{self.head}\n</task>"] if self.head else []
        if self.ledger:
            parts.append(f"<ledger>\n{self.ledger}\n</ledger>")
        if self.previous:
            parts.append(f"<previous_note>\n{self.previous}\n</previous_note>")
        parts.append(f"<messages>\n{self.transcript}\n</messages>")
        ask = "Update the previous note so that it also covers these messages." if self.previous else "Write the note."
        parts.append(f"{ask} Use the sections and headings you were given, in at most {self.words()} words.")
        return [{"role": "system", "content": self.prompt}, {"role": "user", "content": "\n\n".join(parts)}]

    def instruction(self, in_place: InPlace) -> str:
        keep = ""
        if in_place.keep_from:
            keep = f' before the one that begins "{in_place.keep_from}" (that one and all after it stay)'
        return (
            f"{self.prompt}\n\n---\nThe conversation above is the one to hand over: the task is in its first user "
            f"messages, and there is no <ledger> block here. Your note replaces its messages{keep}. Write the note "
            f"now, with the sections and headings above, in at most {self.words()} words. Do not call a tool."
        )


def head_for_summarizer(messages: Sequence[Message]) -> str:
    """The head's user messages (the task, a demonstration) as text for the summarizer, newest first."""
    texts = [text_of(m.get("content")) for m in messages if m.get("role") == "user"]
    return clip("\n\n".join(reversed(texts)), HEAD_CHARS)


# Returns the summary text; raises on any failure (the digest stage then falls back to a local digest).
Summarize = Callable[[SummaryJob], Awaitable[str]]


class SummaryBudgetSpent(Final):
    """The summarizer was not called because the client's or the proxy's summarizer budget is spent for now.

    A background job is not retried; the turn goes on with a ledger digest and reports why."""

    action = Action.SUMMARY_BUDGET


def summary_message(text: str) -> Message:
    return {"role": "user", "content": f"{SUMMARY_PREFIX}\n{text.strip()}"}


def summary_text(message: Message) -> str:
    content = message.get("content")
    return content[len(SUMMARY_PREFIX) :].strip() if isinstance(content, str) else ""


def written_part(message: Message) -> str:
    """A summary message's text without its ledger: the LLM's summary (or the fallback note)."""
    return summary_text(message).split(LEDGER_HEADING)[0].strip()


def clip(text: str, limit: int) -> str:
    """The start and end of `text` within `limit` characters."""
    if len(text) <= limit:
        return text
    half = (limit - 40) // 2
    return f"{text[:half]}\n[... {len(text) - 2 * half:,} characters clipped ...]\n{text[-half:]}"


def render_transcript(messages: Sequence[Message], *, clip_tool_output: int) -> list[str]:
    """Render messages as the summarizer's input: one block of text per message, with tool output clipped."""
    calls = calls_of_results(messages)
    blocks: list[str] = []
    for index, message in enumerate(messages):
        role = str(message.get("role", "unknown"))
        text = text_of(message.get("content"))
        if role == "tool":
            call = describe_call(calls.get(index))
            blocks.append(f"[tool result of {call}]\n{clip(text, clip_tool_output)}")
            continue
        if role == "user" and text.startswith(SUMMARY_PREFIX):
            blocks.append(f"[earlier summary]\n{summary_text(message)}")
            continue
        lines = [f"[{role}]", text] if text else [f"[{role}]"]
        for call in message.get("tool_calls") or []:
            if isinstance(call, dict) and isinstance(call.get("function"), dict):
                lines.append(f"-> calls {describe_call(call['function'])}")
        blocks.append("\n".join(lines))
    return blocks
