"""How the pinned agents ask for their own compaction, kept as data: a new agent version is a new entry here.

Each entry is what `inflight.formats.agent_compaction` looks for in the last message of a request (taken
from the agents' own requests, `tests/formats/test_agent_compaction.py` shows one of each).
"""

from __future__ import annotations

from inflight.frozen import frozen


@frozen(slots=True)
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


@frozen(slots=True)
class CheckpointPrompt:
    """Codex's: a user message whose only text is `text` (surrounding whitespace aside)."""

    agent: str
    text: str


@frozen(slots=True)
class SnapshotPrompt:
    """Gemini CLI's: a system instruction that holds `system`, and a last user content of one text part that is
    one of `asks` (a first snapshot, or one that integrates an earlier snapshot); or, to verify it, `verify` after
    a model content holding the snapshot it was given."""

    agent: str
    system: str
    asks: tuple[str, ...]
    verify: str
    context_tag: str = ""  # the element its own context comes in, which it adds again after compressing
    keeps_recent_turns: bool = False  # it keeps its latest turns verbatim after the snapshot it installs


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
        # Its wrapper says "the messages after this summary are ... kept verbatim", but 2.1.328 keeps none of the
        # turns it summarized (its next request holds only the summary and the turn that was under way): the
        # handoff carries them.
        keeps_recent_turns=False,
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

# Codex's remote compaction (`remote_compaction_v2`, with OpenAI as its provider): an otherwise normal request whose
# last input item is of this type, answered with exactly one `compaction` item.
CODEX_TRIGGER = ("codex remote compaction", "compaction_trigger")

GEMINI_CLI = (
    SnapshotPrompt(
        agent="gemini-cli 0.61.0",
        system=(
            "You are a specialized system component responsible for distilling chat history into a structured XML "
            "<state_snapshot>."
        ),
        asks=(
            "Generate a new <state_snapshot> based on the provided history.\n\nFirst, reason in your scratchpad. "
            "Then, generate the updated <state_snapshot>.",
            "A previous <state_snapshot> exists in the history. You MUST integrate all still-relevant information "
            "from that snapshot into the new one, updating it with the more recent events. Do not lose established "
            "constraints or critical knowledge.\n\nFirst, reason in your scratchpad. Then, generate the updated "
            "<state_snapshot>.",
        ),
        verify=(
            "Critically evaluate the <state_snapshot> you just generated. Did you omit any specific technical "
            "details, file paths, tool results, or user constraints mentioned in the history? If anything is missing "
            "or could be more precise, generate a FINAL, improved <state_snapshot>. Otherwise, repeat the exact same "
            "<state_snapshot> again."
        ),
        context_tag="session_context",
        keeps_recent_turns=True,  # it keeps the latest 30% of its history after the snapshot
    ),
)
