"""The summary that replaces the middle of a conversation: the summarizer's prompt, input and output.

The summary is a structured checkpoint, not a story: the agent continues from it with no other
memory of the messages it replaces, so it must carry the task, what was done and decided, and
the exact names (paths, commands, errors, identifiers) the next steps will need.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from proxy.compaction.conversation import Message, calls_of_results, describe_call, text_of
from proxy.compaction.ledger import LEDGER_HEADING

SUMMARY_PREFIX = "[Previous conversation summary]"

SYSTEM_PROMPT = """You compact the history of an AI agent's conversation that no longer fits its context window.
Your summary REPLACES the messages you are given: the agent will continue the task from your summary
alone, with no other memory of them. Write a structured checkpoint with exactly these sections:

## Original task
What the user asked for, with its constraints.
## Progress and decisions
What has been done, what was found, and what was decided and why.
## Working memory
File paths, commands, error messages, identifiers, values and code snippets the agent will need,
copied verbatim.
## Open problems
What is failing or unresolved.
## Next steps
What the agent was about to do next.

Be concise and factual. Do not continue the conversation, do not address the user, do not invent."""

UPDATE_INSTRUCTION = (
    "Below is the existing checkpoint, followed by the messages that came after it. "
    "Update the checkpoint so that it covers both; keep what still matters from the old one."
)
NEW_INSTRUCTION = "Summarize the following conversation into the checkpoint."


@dataclass(frozen=True)
class SummaryJob:
    """What the summarizer is asked: fold `transcript` into `previous` (or start from nothing)."""

    previous: str | None
    transcript: str
    max_tokens: int

    def messages(self) -> list[Message]:
        parts = [UPDATE_INSTRUCTION if self.previous else NEW_INSTRUCTION]
        if self.previous:
            parts.append(f"<checkpoint>\n{self.previous}\n</checkpoint>")
        parts.append(f"<conversation>\n{self.transcript}\n</conversation>")
        return [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": "\n\n".join(parts)}]


# Returns the summary text; raises on any failure (the digest stage then falls back to a local digest).
Summarize = Callable[[SummaryJob], Awaitable[str]]


def summary_message(text: str) -> Message:
    return {"role": "user", "content": f"{SUMMARY_PREFIX}\n{text.strip()}"}


def summary_text(message: Message) -> str:
    content = message.get("content")
    return content[len(SUMMARY_PREFIX) :].strip() if isinstance(content, str) else ""


def written_part(message: Message) -> str:
    """A summary message's text without its ledger: the LLM's summary (or the fallback note)."""
    return summary_text(message).split(LEDGER_HEADING)[0].strip()


def clip(text: str, limit: int) -> str:
    """Head and tail of `text` within `limit` characters."""
    if len(text) <= limit:
        return text
    half = (limit - 40) // 2
    return f"{text[:half]}\n[... {len(text) - 2 * half:,} characters clipped ...]\n{text[-half:]}"


def render_transcript(messages: Sequence[Message], *, clip_tool_output: int) -> list[str]:
    """One block of text per message, tool output clipped: the summarizer's input."""
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
