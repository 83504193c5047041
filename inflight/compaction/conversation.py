"""The shape of a conversation: its head, its turns, and where it can be cut without breaking it.

OpenAI rejects a request in which a `tool` message does not answer a tool call of an earlier
assistant message, or in which an assistant's tool call has no answer. So a cut is only allowed
where every tool call made before it has been answered before it.
"""

from __future__ import annotations

import functools
import hashlib
import re
from collections.abc import Sequence
from typing import Any

import orjson

from inflight.frozen import frozen

Message = dict[str, Any]
PINNED_ROLES = ("system", "developer")  # a tuple, so `role in PINNED_ROLES` compares and never raises on a list role
MAX_VALUE_CHARS = 60
MAX_ARGS_CHARS = 160


@frozen
class Conversation:
    """The client's original messages, with their token counts and digests."""

    messages: Sequence[Message]
    counts: Sequence[int]
    digests: Sequence[bytes]
    fixed_tokens: int  # reply priming and tool definitions, which compaction cannot shrink
    # Messages that must be kept byte for byte or dropped whole, never edited (encrypted reasoning, a
    # provider's compaction item). The wire format says which.
    opaque: frozenset[int] = frozenset()
    # User messages that are not requests, such as text a tool turn carries beside its results (Claude Code's
    # reminders). The wire format says which.
    observations: frozenset[int] = frozenset()
    # Messages whose count is estimated from samples (`TokenCounter.count_request`). They are older than any
    # compaction keeps, unless the window is bigger than assumed; any that are kept get counted exactly later.
    approximated: frozenset[int] = frozenset()

    @property
    def tokens(self) -> int:
        return self.fixed_tokens + sum(self.counts)

    @functools.cached_property
    def matched(self) -> Sequence[bytes]:
        """Per message, what a record and a summary made ahead are matched by (`identities_of`)."""
        return identities_of(self.messages, self.digests)


def identities_of(messages: Sequence[Message], digests: Sequence[bytes]) -> list[bytes]:
    """Per message, its digest, except that a tool result is known by its call alone.

    Agents clear or mask their own old tool results (Gemini CLI's tool output masking, Claude Code's cleared
    tool results); a record's summary or replacement already stands in for such a result, so the record still
    applies and the prefix the upstream cached stays the same."""
    return [
        tool_identity(message) if message.get("role") == "tool" else digest
        for message, digest in zip(messages, digests, strict=True)
    ]


def tool_identity(message: Message) -> bytes:
    """A tool result's identity: the call it answers."""
    return hashlib.blake2b(b"tool\0" + str(message.get("tool_call_id")).encode(), digest_size=16).digest()


def pinned(message: Message) -> bool:
    """System and developer messages: never summarized, truncated or masked."""
    return message.get("role") in PINNED_ROLES


def protected(messages: Sequence[Message], latest_request: int | None) -> set[int]:
    """Messages no stage but the last resort may change: system/developer messages and the latest request."""
    indices = {i for i, m in enumerate(messages) if pinned(m)}
    if latest_request is not None:
        indices.add(latest_request)
    return indices


def observation_regex(pattern: str | None) -> re.Pattern[str] | None:
    """Compile `compaction.mask.observation_pattern` with the flags every caller expects; None when unset."""
    return re.compile(pattern, re.MULTILINE) if pattern else None


def is_observation(messages: Sequence[Message], index: int, pattern: re.Pattern[str] | None) -> bool:
    """Whether a user message is a tool observation of a text-action agent such as SWE-agent.

    It must follow an assistant message and match `compaction.mask.observation_pattern`."""
    message = messages[index]
    if pattern is None or message.get("role") != "user" or index == 0 or messages[index - 1].get("role") != "assistant":
        return False
    return pattern.search(text_of(message.get("content"))) is not None


def latest_request_index(
    messages: Sequence[Message], pattern: re.Pattern[str] | None, observations: frozenset[int] = frozenset()
) -> int | None:
    """Return the index of the latest user message that is a real request rather than an observation.

    Observations are found by `pattern` or named by the wire format. The latest request is never cut or summarized.
    """
    for index in range(len(messages) - 1, -1, -1):
        message = messages[index]
        if message.get("role") == "user" and index not in observations and not is_observation(messages, index, pattern):
            return index
    return None


def head_length(messages: Sequence[Message]) -> int:
    """The head: the system message(s) and every message before the first assistant turn.

    That is where agents put the task, and often more than one user message: SWE-agent sends a
    long demonstration, then the issue being solved. All of it is kept; none of it is summarized.
    """
    for index, message in enumerate(messages):
        if message.get("role") == "assistant":
            return index
    return len(messages)


def turn_starts(messages: Sequence[Message]) -> list[bool]:
    """`start[i]` is True where the kept, unchanged tail of the conversation may begin.

    That is an assistant message before which every tool call is answered. It is never an observation (a tool
    result, or a text-action agent's user message), which would be separated from the command it answers."""
    cuts = cut_points(messages)
    return [cuts[i] and i < len(messages) and messages[i].get("role") == "assistant" for i in range(len(cuts))]


def call_ids(message: Message) -> list[str]:
    calls = message.get("tool_calls") if message.get("role") == "assistant" else None
    if not isinstance(calls, list):
        return []
    return [call["id"] for call in calls if isinstance(call, dict) and isinstance(call.get("id"), str)]


def cut_points(messages: Sequence[Message]) -> list[bool]:
    """`cut[i]` is True when messages[:i] and messages[i:] keep every tool call with its result."""
    unanswered: set[str] = set()
    cuts = [True]
    for message in messages:
        unanswered.update(call_ids(message))
        if message.get("role") == "tool":
            unanswered.discard(message.get("tool_call_id"))
        cuts.append(not unanswered)
    # A cut just before a tool message would separate it from its call, even when the call is otherwise answered.
    for index, message in enumerate(messages):
        if message.get("role") == "tool":
            cuts[index] = False
    return cuts


def last_user_index(messages: Sequence[Message]) -> int | None:
    for index in range(len(messages) - 1, -1, -1):
        if messages[index].get("role") == "user":
            return index
    return None


def calls_of_results(messages: Sequence[Message]) -> dict[int, dict[str, Any]]:
    """Map each tool result's index to the `function` (name, arguments) of the call it answers.

    The call is the nearest earlier one with the same id, because agents reuse ids (`call_1` every turn)."""
    open_calls: dict[str, dict[str, Any]] = {}
    found: dict[int, dict[str, Any]] = {}
    for index, message in enumerate(messages):
        role = message.get("role")
        if role == "assistant" and isinstance(message.get("tool_calls"), list):
            for call in message["tool_calls"]:
                if (
                    isinstance(call, dict)
                    and isinstance(call.get("id"), str)
                    and isinstance(call.get("function"), dict)
                ):
                    open_calls[call["id"]] = call["function"]
        elif role == "tool":
            function = open_calls.get(str(message.get("tool_call_id")))
            if function is not None:
                found[index] = function
    return found


def problems(messages: Sequence[Message]) -> list[str]:
    """What makes a message list invalid for OpenAI's tool-call rules (empty when it is valid)."""
    found: list[str] = []
    pending: set[str] = set()
    for index, message in enumerate(messages):
        role = message.get("role")
        if role == "tool":
            call_id = message.get("tool_call_id")
            if call_id not in pending:
                found.append(f"message {index}: tool result {call_id!r} answers no earlier open tool call")
            pending.discard(call_id)
            continue
        if pending and role != "tool":
            found.append(f"message {index}: tool calls {sorted(pending)} have no result before it")
            pending.clear()
        pending.update(call_ids(message))
    if pending:
        found.append(f"end: tool calls {sorted(pending)} have no result")
    return found


def text_of(content: Any) -> str:
    """The readable text of a message's content (string or parts)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = [p.get("text", "") for p in content if isinstance(p, dict) and isinstance(p.get("text"), str)]
        others = sum(1 for p in content if not (isinstance(p, dict) and isinstance(p.get("text"), str)))
        return "\n".join(texts) + (f"\n[{others} non-text part(s)]" if others else "")
    return ""


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


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."
