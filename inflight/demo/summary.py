"""Write the demo upstream's summary: extractive, deterministic, in the sections the summary prompt asks for.

No model writes it. It is built from what the summarized messages name: the task's opening words, the
files, the commands and the error lines, each on a line with its own wording (the proxy rejects a
reply that copies its input, `inflight.compaction.validation`). A later summary includes the earlier one,
so files and commands named before the first summary are still named after the second.

It handles both forms of request the proxy sends (`inflight.compaction.summary_job`): the prompt as the
system message with the transcript in `<messages>`, and "in place", the conversation as last sent with
the prompt as its last user message.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from inflight.compaction import head_length
from inflight.compaction.conversation import Message, text_of
from inflight.compaction.scan import error_lines, paths_in
from inflight.compaction.summary_job import SUMMARY_PREFIX, load_prompt, render_transcript, written_part
from inflight.compaction.validation import headings

TASK_WORDS = 60
MAX_FILES, MAX_COMMANDS, MAX_ERRORS = 12, 10, 4
# How many lines each section keeps across successive summaries, newest first (the ledger keeps the rest).
LIMITS = {"files": 2 * MAX_FILES, "commands": 2 * MAX_COMMANDS, "errors": 2 * MAX_ERRORS}
CALLS = re.compile(r"^-> calls (.+)$", re.MULTILINE)
KEEP_FROM = re.compile(r'before the one that begins "(.*?)" \(that one', re.DOTALL)
PROMPT_OPENING = load_prompt()[:60]  # how the shipped summary prompt begins


def is_summary_request(messages: Sequence[Any], prompt_opening: str = PROMPT_OPENING) -> bool:
    """The proxy's summary prompt opens the system message (the usual form) or the last message (in place)."""
    if not messages:
        return False
    ends = [messages[0], messages[-1]]
    return any(isinstance(m, dict) and text_of(m.get("content")).startswith(prompt_opening) for m in ends)


def handoff_note(messages: Sequence[Message], prompt_opening: str = PROMPT_OPENING) -> str:
    """The note for a summary request, under the prompt's own headings."""
    last = text_of(messages[-1].get("content"))
    if not last.startswith(prompt_opening):  # the usual form: the prompt, then the task and the transcript
        prompt, request = text_of(messages[0].get("content")), last
        task, transcript, previous = (
            tagged(request, "task"),
            tagged(request, "messages"),
            tagged(request, "previous_note"),
        )
        return write_note(headings(prompt), task=task, transcript=transcript, previous=previous)
    # In place: the conversation as last sent (its head, perhaps an earlier summary, the turns), then the
    # instruction, which names the first message that stays.
    conversation = list(messages[:-1])
    earlier = [m for m in conversation if text_of(m.get("content")).startswith(SUMMARY_PREFIX)]  # in the head
    head = head_length(conversation)
    task = "\n\n".join(
        text_of(m.get("content")) for m in conversation[:head] if m.get("role") == "user" and m not in earlier
    )
    span = [m for m in conversation[head : kept_from(conversation, last, head)] if m not in earlier]
    transcript = "\n\n".join(render_transcript(span, clip_tool_output=4000))
    previous = written_part(earlier[-1]) if earlier else ""
    return write_note(headings(last), task=task, transcript=transcript, previous=previous)


def kept_from(conversation: Sequence[Message], instruction: str, head: int) -> int:
    """The index where the unchanged messages begin (the instruction quotes the first one's opening)."""
    match = KEEP_FROM.search(instruction)
    if match:
        opening = match.group(1)[:40]
        for index, message in enumerate(conversation):
            if index >= head and text_of(message.get("content")).strip().startswith(opening):
                return index
    return len(conversation)


def tagged(text: str, tag: str) -> str:
    match = re.search(rf"<{tag}>\n(.*?)\n</{tag}>", text, re.DOTALL)
    return match.group(1) if match else ""


def write_note(sections: Sequence[str], *, task: str, transcript: str, previous: str) -> str:
    """Each section's lines: the earlier note's first, then what these messages add."""
    before = sections_of(previous)
    commands = unique(match.strip() for match in CALLS.findall(transcript))
    files = unique([*paths_in("\n".join(commands)), *paths_in(transcript)])  # those the agent asked for first
    errors = unique(error_lines(transcript))
    words = " ".join(task.split()[:TASK_WORDS])
    fresh = {
        "task": [f'Quoted from the task: "{words}{" ..." if len(task.split()) > TASK_WORDS else ""}"'],
        "state": [
            f"This note covers {transcript.count('[tool result of')} more tool results and their calls"
            + (", and the earlier note" if previous else "")
            + " (an extractive note by the demo's scripted upstream, not a model)."
        ],
        "files": [f"- named: {path}" for path in files[:MAX_FILES]],
        "commands": [f"- ran: {command}" for command in commands[:MAX_COMMANDS]],
        "errors": [f"- seen: {line}" for line in errors[:MAX_ERRORS]] or ["- none seen in these messages"],
        "next": [
            f"Carry on after the last call summarized: {commands[-1]}." if commands else "Carry on with the task."
        ],
    }
    lines: list[str] = []
    for heading in sections:
        kind = kind_of(heading)
        kept = [line for line in before.get(heading, []) if line.startswith("- ") and "none seen" not in line]
        kept = kept if kind in ("files", "commands", "errors") else []
        added = [line for line in fresh.get(kind, []) if line not in kept]
        if kind == "errors" and kept:
            added = [line for line in added if "none seen" not in line]
        limit = LIMITS.get(kind)
        lines += [f"## {heading}", *([*kept, *added][-limit:] if limit else added)]
    return "\n".join(lines)


def kind_of(heading: str) -> str:
    """Which of the prompt's sections this heading is, by its first word."""
    word = re.match(r"[a-z]*", heading.lower())
    return word.group(0) if word else ""


def sections_of(note: str) -> dict[str, list[str]]:
    """An earlier note's lines under each heading."""
    found: dict[str, list[str]] = {}
    current = None
    for line in note.splitlines():
        if line.startswith("## "):
            current = line[3:].strip()
            found[current] = []
        elif current is not None and line.strip():
            found[current].append(line.rstrip())
    return found


def unique(items: Any) -> list[str]:
    return list(dict.fromkeys(item for item in items if item))
