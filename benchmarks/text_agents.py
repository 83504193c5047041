"""What compaction keeps of a text-action agent's latest turn: replays conversations offline, as `inflight eval`.

    python -m benchmarks.text_agents [--window 8000 ...] [TRACE.json | RUN.traj ...]

A text-action agent (SWE-agent's default, ReAct) writes its command in its own text and gets the
output back as a user message, an observation. Each conversation is replayed turn by turn (every
growing prefix that ends with a user or tool message, `inflight.pipeline.evaluation.turns`) through the
server's pipeline at each window, ledger only, and each compacted request is checked for:

- **latest user message lost**: the request's last user message (for a text-action agent, the
  observation it acts on next) is not sent unchanged, although it takes at most a quarter of the budget
  (a bigger one may be cut, since the request could not fit otherwise);
- **observation without its command**: a user message that answers an assistant message is sent while
  that assistant message is not sent unchanged (summarized away, or cut).

The conversations: the repo's traces (`tests/fixtures/traces`), the function-calling ones also in
SWE-agent's text form (the command in a fenced block, the output as a user message), and every
text-action one also with a demonstration in its head, as SWE-agent sends it (its demonstration
template around the text-actions trace, then the issue). Any other paths given are added: chat
request bodies, or SWE-agent trajectories (`.traj`, their `history`). Prints a table; asserts nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.conversations import load_traces
from benchmarks.harness import table
from inflight.compaction.conversation import Message, head_length, last_user_index
from inflight.config import load_settings
from inflight.pipeline.engine import Pipeline, build_pipeline
from inflight.pipeline.evaluation import compacted_turns
from tests.support.swe_agent import demonstration

MODEL = "gpt-4o"


def as_text_actions(messages: list[Message]) -> list[Message]:
    """A function-calling conversation as a text-action agent has it: each call a fenced command in the
    assistant's text, each result a user message."""
    out: list[Message] = []
    for message in messages:
        if message.get("role") == "assistant" and message.get("tool_calls"):
            commands = [command_of(call.get("function") or {}) for call in message["tool_calls"]]
            fenced = "\n".join(f"```\n{command}\n```" for command in commands)
            out.append({"role": "assistant", "content": f"{message.get('content') or ''}\n{fenced}".strip()})
        elif message.get("role") == "tool":
            out.append({"role": "user", "content": message.get("content") or ""})
        else:
            out.append(message)
    return out


def command_of(function: dict[str, Any]) -> str:
    """`name arg1 arg2`: the command line SWE-agent's tools stand for."""
    try:
        arguments = json.loads(function.get("arguments") or "{}")
    except json.JSONDecodeError:
        arguments = {}
    values = arguments.values() if isinstance(arguments, dict) else []
    return " ".join([str(function.get("name", "run")), *(str(value) for value in values)])


def with_demonstration(messages: list[Message], solved: list[Message]) -> list[Message]:
    """The conversation with SWE-agent's demonstration message (`solved` shown) after its system prompt,
    before the issue."""
    text = "\n".join(str(m.get("content") or "") for m in solved if m.get("role") != "system")
    system = [m for m in messages[:1] if m.get("role") == "system"]
    return [*system, demonstration(text), *messages[len(system) :]]


def is_text_actions(messages: list[Message]) -> bool:
    return not any(m.get("tool_calls") or m.get("role") == "tool" for m in messages)


def read_conversation(path: Path) -> list[Message]:
    """A chat request body's messages, or a SWE-agent trajectory's history (role and content of each)."""
    data = json.loads(path.read_text())
    if isinstance(data, dict) and "history" in data:
        keep = ("role", "content", "tool_calls", "tool_call_id")
        return [{key: entry[key] for key in keep if key in entry} for entry in data["history"]]
    return list(data["messages"])


def conversations(extra: list[Path]) -> Iterator[tuple[str, list[Message]]]:
    traces = {name: list(body["messages"]) for name, body in load_traces().items()}
    solved = traces["swe_marshmallow_text_actions"]
    found = [*traces.items(), *((path.stem, read_conversation(path)) for path in extra)]
    for name, messages in found:
        yield name, messages
        text = messages if is_text_actions(messages) else as_text_actions(messages)
        if text is not messages:
            yield f"{name} (as text)", text
        if sum(m.get("role") == "user" for m in text[: head_length(text)]) > 1:  # a demonstration is there already
            continue
        yield f"{name} (as text, demonstration in the head)", with_demonstration(text, solved)


@dataclass
class Counts:
    compacted: int = 0
    latest_eligible: int = 0  # compacted requests whose latest user message is at most a quarter of the budget
    latest_lost: int = 0
    without_command: int = 0
    unfit: int = 0


async def replay(pipeline: Pipeline, name: str, messages: list[Message], counts: Counts) -> None:
    async for replayed in compacted_turns(pipeline, f"text-agents:{name}", {"model": MODEL, "messages": messages}):
        original, outcome, accounting = replayed.request["messages"], replayed.outcome, replayed.accounting
        end, counted = len(original), replayed.counted
        counts.compacted += 1
        counts.unfit += not outcome.fits
        record = outcome.record  # which of the original messages are sent whole (the rest summarized, or cut)
        whole = (set(range(record.head_len)) | set(range(record.prefix_len, end))) - set(record.replaced)
        latest = last_user_index(original)
        if latest is not None and counted.count.messages[latest] <= accounting.budget // 4:
            counts.latest_eligible += 1
            counts.latest_lost += latest not in whole
        shown = whole | set(record.replaced)  # sent, whole or cut
        answers = [i for i in shown if i >= record.head_len and original[i].get("role") == "user"]
        counts.without_command += any(
            original[i - 1].get("role") == "assistant" and i - 1 not in whole for i in answers
        )


async def measure(window: int, found: list[tuple[str, list[Message]]]) -> Counts:
    overrides = {"discover_context_window": False, "models": {MODEL: {"context_window": window}}}
    pipeline = build_pipeline(load_settings(None, overrides=overrides), summarizers=None)
    counts = Counts()
    try:
        for name, messages in found:
            await replay(pipeline, name, messages, counts)
    finally:
        await pipeline.aclose()
    return counts


def arguments() -> argparse.ArgumentParser:
    """The command line (`tests/test_docs.py` checks each command the docs show against it)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("paths", nargs="*", type=Path, help="more conversations: chat bodies or SWE-agent .traj files")
    parser.add_argument("--window", type=int, nargs="+", default=[4000, 8000, 16000])
    return parser


def main() -> None:
    args = arguments().parse_args()
    found = list(conversations(args.paths))
    print(f"{len(found)} conversations: {', '.join(name for name, _ in found)}\n")
    rows = []
    for window in args.window:
        c = asyncio.run(measure(window, found))
        rows.append(
            [
                f"{window:,}",
                c.compacted,
                f"{c.latest_lost} of {c.latest_eligible}",
                f"{c.without_command} of {c.compacted}",
                c.unfit,
            ]
        )
    header = ["window", "compacted requests", "latest user message lost", "observation without its command", "unfit"]
    print(table(rows, header))


if __name__ == "__main__":
    main()
