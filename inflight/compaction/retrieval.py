"""Reading back what compaction took out: handles, the `inflight_retrieve` tool, and what a call is answered with.

Every masked or truncated tool output, and every span a summary stands for, names a handle (`inflight:` and
16 hex digits) in its placeholder. The handle is a digest of the original's own digest, so the same original
gets the same handle on every turn and in every process, and the placeholder's bytes (and the prompt cache)
stay the same. The originals are kept per tenant (`inflight.records.originals`), so a handle is only ever
read back for the client whose conversation it came from. Nothing here does I/O.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import orjson
import re2

from inflight.compaction.conversation import Message, pinned, text_of
from inflight.compaction.record import Record, prefix_hash
from inflight.compaction.summary_job import render_transcript

TOOL_NAME = "inflight_retrieve"
PREFIX = "inflight:"
HANDLE_DIGITS = 16
DESCRIPTION = (
    "Read back the original text that a placeholder naming a handle `inflight:<id>` stands for (a shortened tool "
    "output or earlier messages); give `lines` (START-END) or `grep` (a regular expression) to read only part of it."
)
PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "handle": {"type": "string", "description": "The handle, as `inflight:<id>`."},
        "lines": {"type": "string", "description": "Only these lines, as START-END (1-based, inclusive)."},
        "grep": {"type": "string", "description": "Only the lines matching this regular expression."},
    },
    "required": ["handle"],
    "additionalProperties": False,
}
HANDLE = re.compile(PREFIX + r"[0-9a-f]{16}")  # a handle in a request's text
UNAVAILABLE = "[inflight_retrieve: unavailable: {why}]"
NO_ROOM = UNAVAILABLE.format(why="no room left")
FIT_NOTE = (
    "\n[inflight_retrieve: clipped to its first {kept:,} of {total:,} characters to fit the room left in the context "
    "window (ask for `lines` or `grep`)]"
)
MAX_GREP_LINES = 2000


def handle_of(digest: bytes) -> str:
    """The handle of the original whose digest (`Conversation.digests`) or span hash is `digest`."""
    found = hashlib.blake2b(digest, digest_size=HANDLE_DIGITS // 2, person=b"inflight-handle").hexdigest()
    return PREFIX + found


def span_handle(digests: Sequence[bytes]) -> str:
    """The handle of the messages a summary stands for, from their digests."""
    return handle_of(prefix_hash(digests))


def read_back_note(handle: str) -> str:
    """The words a placeholder names its handle with."""
    return f"read it back: {handle}"


def originals(record: Record, messages: Sequence[Message], digests: Sequence[bytes]) -> Iterator[tuple[str, Any]]:
    """Each handle a record's placeholders name, with a callable that renders the original's text.

    The text is rendered only when asked, since it is kept once and a conversation is compacted again every turn."""
    if record.summary is not None and record.prefix_len > record.head_len:
        span = range(record.head_len, record.prefix_len)

        def transcript() -> str:
            kept = [messages[i] for i in span if not pinned(messages[i])]
            return "\n\n".join(render_transcript(kept, clip_tool_output=1 << 62))

        yield span_handle(digests[record.head_len : record.prefix_len]), transcript
    for index, replacement in record.replaced.items():
        if index < len(messages) and digests[index] == replacement.digest:
            message = messages[index]
            yield handle_of(replacement.digest), lambda message=message: text_of(message.get("content"))


def read_back(original: str | None, arguments: str, *, max_chars: int) -> str:
    """What a call with these (JSON) arguments is answered with: the original, or the part asked for, within
    `max_chars`; or a note that it is unavailable. Never raises: the model's arguments may be anything."""
    try:
        asked = orjson.loads(arguments) if arguments else {}
    except orjson.JSONDecodeError:
        return UNAVAILABLE.format(why="the arguments are not JSON")
    if not isinstance(asked, dict) or not isinstance(asked.get("handle"), str):
        return UNAVAILABLE.format(why='expected {"handle": "inflight:<id>"}')
    if original is None:
        return UNAVAILABLE.format(why=f"no original is kept for {asked['handle'][:40]}")
    text, said = original, ""
    lines, grep = asked.get("lines"), asked.get("grep")
    if isinstance(lines, str) and lines.strip():
        text, said = _lines(original, lines)
    elif isinstance(grep, str) and grep:
        text, said = _grep(original, grep)
    if len(text) > max_chars:
        said += f"; clipped to its first {max_chars:,} of {len(text):,} characters (ask for `lines` or `grep`)"
        text = text[:max_chars]
    return f"{text}\n[inflight_retrieve: {said.lstrip('; ')}]" if said else text


def fitted(text: str, *, room: int, count: Callable[[str], int]) -> str:
    """`text` within `room` tokens as `count` counts them: whole, or clipped with a note saying so, or, when not even
    the note fits, a note that no room is left."""
    if count(text) <= room:
        return text
    left = room - count(FIT_NOTE.format(kept=len(text), total=len(text)))
    low, high = 0, max(0, min(len(text), left * 16))  # a token is rarely longer than 16 characters
    while low < high:  # the longest start of the text that fits
        middle = (low + high + 1) // 2
        if count(text[:middle]) <= left:
            low = middle
        else:
            high = middle - 1
    if low == 0:
        return NO_ROOM
    return text[:low] + FIT_NOTE.format(kept=low, total=len(text))


def _lines(text: str, asked: str) -> tuple[str, str]:
    all_lines = text.split("\n")
    start_s, _, end_s = asked.partition("-")
    try:
        start = max(int(start_s), 1)
        end = min(int(end_s) if end_s.strip() else len(all_lines), len(all_lines))
    except ValueError:
        return text, f"`lines` {asked[:40]!r} is not START-END; all {len(all_lines):,} lines follow"
    return "\n".join(all_lines[start - 1 : end]), f"lines {start}-{end} of {len(all_lines):,}"


def _grep(text: str, pattern: str) -> tuple[str, str]:
    """The matching lines, numbered; RE2, since the pattern comes from the model and must run in linear time."""
    try:
        compiled = re2.compile(pattern)
    except Exception:  # RE2 raises its own error type for a pattern it cannot compile
        return "", f"`grep` {pattern[:40]!r} is not a regular expression"
    found = [f"{n}: {line}" for n, line in enumerate(text.split("\n"), 1) if compiled.search(line)]
    said = f"{len(found):,} lines match {pattern[:40]!r}"
    if len(found) > MAX_GREP_LINES:
        said += f"; the first {MAX_GREP_LINES:,} shown"
    return "\n".join(found[:MAX_GREP_LINES]), said
