"""Extract the facts an agent needs from the messages a compaction drops: commands, files, errors, identifiers.

Extraction is deterministic. The ledger is built from these facts, and `inflight eval` checks that the
compacted request still contains them. They are read from tool calls and their results, and from agents
that act through text (a command in a fenced block of the assistant's message, its output in the next
user message).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from typing import Any

import orjson

from inflight.compaction.conversation import Message, calls_of_results, text_of
from inflight.compaction.scan import MAX_LINE, error_lines, first_line, identifiers_in, paths_in
from inflight.frozen import frozen

COMMAND_KEYS = ("command", "cmd", "code", "script", "query", "input")
PATH_KEYS = ("path", "file_path", "filepath", "file", "filename", "target_file", "target", "directory", "dir")
SHELL_TOOLS = (
    "bash",
    "shell",
    "sh",
    "run",
    "execute",
    "execute_bash",
    "terminal",
    "run_terminal_cmd",
    "exec",
    "exec_command",  # Codex's function tool ({"cmd": ...})
    "local_shell",  # the Responses API's local_shell_call, as `inflight.formats.responses` reads it
)
FENCED = re.compile(r"```[\w-]*\n(.*?)```", re.DOTALL)


@frozen
class Step:
    """One action of the agent and what came back."""

    command: str
    output: str


@frozen
class Facts:
    commands: tuple[str, ...]
    outcomes: dict[str, str]  # command -> first line of its output (or its error line)
    files: dict[str, str]  # path -> the first command that named it
    errors: tuple[str, ...]
    identifiers: tuple[str, ...]


def command_of(function: dict[str, Any]) -> str:
    """Describe a tool call as a command line.

    For a shell tool that is its `command` argument as is; for any other tool, its name followed by its
    command-like and path-like arguments (`str_replace_editor view src/a.py`)."""
    name = str(function.get("name") or "tool")
    arguments = function.get("arguments")
    if isinstance(arguments, dict):  # some clients send the object itself
        parsed: Any = arguments
    else:
        try:
            parsed = orjson.loads(arguments) if isinstance(arguments, str) and arguments else {}
        except orjson.JSONDecodeError:
            return f"{name} {arguments}".strip()
    if not isinstance(parsed, dict):
        return f"{name} {arguments}".strip()
    command = next((str(parsed[k]).strip() for k in COMMAND_KEYS if isinstance(parsed.get(k), str)), "")
    if command and name.lower() in SHELL_TOOLS:
        return command
    paths = [str(parsed[k]).strip() for k in PATH_KEYS if isinstance(parsed.get(k), str)]
    if not command and not paths:  # no way to tell which argument matters: use all the short ones
        paths = [str(v) for v in parsed.values() if isinstance(v, str | int | float) and len(str(v)) <= 200]
    return " ".join([name, *([command] if command else []), *paths]).strip()


def text_commands(text: str) -> list[str]:
    """Commands an agent wrote in fenced blocks (text-action agents put the one to run last)."""
    return [block.strip() for block in FENCED.findall(text) if block.strip()]


def steps(messages: Sequence[Message]) -> Iterator[Step]:
    """Yield each command in the span with its output.

    A command is a tool call with its result, or a fenced command in an assistant message with the next user
    message as its output."""
    calls = calls_of_results(messages)
    pending_text: str | None = None
    for index, message in enumerate(messages):
        role = message.get("role")
        text = text_of(message.get("content"))
        if role == "tool":
            function = calls.get(index)
            yield Step(command_of(function) if function else "tool call", text)
        elif role == "assistant":
            pending_text = None
            if not message.get("tool_calls"):
                found = text_commands(text)
                pending_text = found[-1] if found else None
        elif role == "user" and pending_text is not None:
            yield Step(pending_text, text)
            pending_text = None
    if pending_text is not None:
        yield Step(pending_text, "")


def facts_of(messages: Sequence[Message]) -> Facts:
    """The facts of a span of messages, in the order they happened."""
    commands: dict[str, None] = {}
    outcomes: dict[str, str] = {}
    files: dict[str, str] = {}
    errors: dict[str, None] = {}
    seen_in_output: set[str] = set()
    reused: dict[str, None] = {}
    for step in steps(messages):
        command = step.command.strip()[:MAX_LINE]
        commands[command] = None
        found_errors = error_lines(step.output)
        outcomes[command] = found_errors[-1] if found_errors else first_line(step.output)
        for path in [*paths_in(step.command), *paths_in(step.output)]:
            files.setdefault(path, command)
        errors.update(dict.fromkeys(found_errors))
        reused.update(dict.fromkeys(name for name in identifiers_in(step.command) if name in seen_in_output))
        seen_in_output.update(identifiers_in(step.output))
    for message in messages:  # names the agent mentioned in its reasoning after reading them in output
        if message.get("role") == "assistant":
            text = text_of(message.get("content"))
            reused.update(dict.fromkeys(name for name in identifiers_in(text) if name in seen_in_output))
    reused_names = tuple(name for name in reused if name not in files)
    return Facts(tuple(commands), outcomes, files, tuple(errors), reused_names)


def facts_note(text: str, *, max_errors: int = 3, max_files: int = 12, max_chars: int = 480) -> str:
    """Summarize the error lines and file paths of text about to be cut or masked, in one line kept in its place."""
    errors = list(dict.fromkeys(error_lines(text)))[-max_errors:]
    files = list(dict.fromkeys(paths_in(text)))[:max_files]
    parts = ([f"errors: {' | '.join(errors)}"] if errors else []) + ([f"files: {', '.join(files)}"] if files else [])
    note = "; ".join(parts)
    return note if len(note) <= max_chars else note[: max_chars - 3] + "..."
