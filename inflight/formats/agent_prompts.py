"""How the pinned agents ask for their own compaction, kept as data: a new agent version is a new entry here.

Each entry is what `inflight.formats.agent_compaction` looks for in the last message of a request (taken
from the agents' own requests, `tests/formats/test_agent_compaction.py` shows one of each).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class SummaryPrompt:
    """Claude Code's: a text block that opens with `opening`, holds `task`, may carry the user's `/compact`
    instructions after `instructions`, and ends with a paragraph that opens with `reminder` and ends with `ending`."""

    agent: str
    opening: str
    task: str
    instructions: str
    reminder: str
    ending: str
    context_tag: str = ""  # the element its own context comes in, which it adds again after compacting
    keeps_recent_turns: bool = False  # it keeps its latest turns verbatim after the summary it installs


@dataclass(frozen=True, slots=True)
class CheckpointPrompt:
    """Codex's: a user message whose only text is `text` (surrounding whitespace aside)."""

    agent: str
    text: str


CLAUDE_CODE = (
    SummaryPrompt(
        agent="claude-code 2.1.328",
        opening="CRITICAL: Respond with TEXT ONLY. Do NOT call any tools.",
        task=(
            "Your task is to create a detailed summary of the conversation so far, paying close attention to the "
            "user's explicit requests and your previous actions."
        ),
        instructions="\nAdditional Instructions:\n",
        reminder="\nREMINDER: Do NOT call any tools. Respond with plain text only",
        ending="Tool calls will be rejected and you will fail the task.",
        context_tag="system-reminder",
        keeps_recent_turns=True,  # "The messages after this summary are the most recent messages ..., kept verbatim"
    ),
)

CODEX = (
    CheckpointPrompt(
        agent="codex 0.169.0",
        text=(
            "You are performing a CONTEXT CHECKPOINT COMPACTION. Create a handoff summary for another LLM that "
            "will resume the task.\n\nInclude:\n- Current progress and key decisions made\n- Important context, "
            "constraints, or user preferences\n- What remains to be done (clear next steps)\n- Any critical data, "
            "examples, or references needed to continue\n\nBe concise, structured, and focused on helping the "
            "next LLM seamlessly continue the work."
        ),
    ),
)
