"""The text an agent installs when inflight answers its own compaction request: the summary, then the turns after it.

An agent that compacts by itself replaces its whole history with the summary it is answered (Claude Code
keeps nothing else; Codex keeps the user's messages). A compaction of inflight's keeps the head and a
verbatim tail beside its summary, so the handoff says all three in text: the user's messages from the head
(unless the agent keeps them), the summary with its ledger, and the tail's turns, each long text cut to its
head and end so the handoff stays a few thousand tokens.

When the agent compacts again before much has happened, the summary its head already holds is carried over with
the turns since, and no summarizer is asked (`carried_handoff`): the handoff ends with a marker, so inflight finds
its own parts again inside whatever the agent wrapped them in.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from inflight.compaction.conversation import Message, describe_call, text_of
from inflight.compaction.facts import steps
from inflight.compaction.ledger import LEDGER_HEADING, Ledger
from inflight.compaction.middle import REPLACED_NOTE
from inflight.compaction.summary_job import SUMMARY_PREFIX
from inflight.frozen import frozen

MESSAGE_CHARS = 2_000  # a user's or the assistant's text in the tail (or the head's user messages)
OUTPUT_CHARS = 400  # a tool's output, head and end
USER_MESSAGES = "The user's messages at the start of the conversation:\n"
LATEST_TURNS = "The latest turns, as they happened (long outputs cut):\n"
# The ledger below a summary (its newest entries): the agent keeps it in its context from then on, writes it to the
# prompt cache again at each of its compactions and reads it at each step; a longer one also brings the next sooner.
LEDGER_CHARS = 800
TAIL_CHARS = 4_000  # all of the tail (about a thousand tokens): past it, its oldest turns go first
INSTRUCTIONS = "Written following the user's instructions for this summary: "
END = "[End of the summary]"  # the handoff's last line, so that the next compaction finds where it ends


def handoff_text(
    messages: Sequence[Message],
    origins: Sequence[int | None],
    *,
    head_len: int,
    keeps_user_messages: bool,
    keeps_recent_turns: bool = False,
    instructions: str = "",
    context_tag: str = "",
    ledger: Ledger | None = None,
) -> str:
    """The handoff written from a compaction's messages (`origins`: each one's index in the client's list, None for
    what the compaction wrote: the summary). Without a summary (nothing before the latest turns to summarize), the
    turns after the head follow the user's messages; an agent that `keeps_recent_turns` gets none. The summary's
    ledger is rendered anew from the compaction's `ledger` (else cut to its head and end). Text in `context_tag`
    elements is left out: the agent's own context (Claude Code's `<system-reminder>`s), which it adds again itself."""

    written = [i for i, origin in enumerate(origins) if origin is None]
    users = [] if keeps_user_messages else users_said(messages, origins, head_len, context_tag)
    summaries = [with_ledger(readable(messages[i], context_tag), ledger) for i in written]
    after_head = (i for i, origin in enumerate(origins) if origin is not None and origin >= head_len)
    start = written[-1] + 1 if written else next(after_head, len(messages))
    recent = [] if keeps_recent_turns and written else messages[start:]
    tail = turn_lines(recent, context_tag)
    while tail and sum(map(len, tail)) > TAIL_CHARS:
        tail.pop(0)
    return assembled(users, summaries, tail, instructions)


def carried_handoff(
    messages: Sequence[Message],
    *,
    head_len: int,
    keeps_user_messages: bool,
    context_tag: str = "",
    made_ahead: tuple[int, str] | None = None,
) -> str | None:
    """The handoff written without asking the summarizer, from the latest summary there is and every turn since.

    That summary is `made_ahead` (the messages up to its cut, and its text), else the summary of an earlier handoff
    in the head (the agent installed it), else none: only the turns after the head. None when the turns since do not
    all fit the tail, since what they did would be cut away: a new summary is needed."""
    if made_ahead is not None:
        cut, summary = made_ahead
        earlier = EarlierHandoff(summary, "")
    else:
        cut = head_len
        earlier = next(
            (
                found
                for message in messages[:head_len]
                if message.get("role") == "user" and (found := EarlierHandoff.within(readable(message, context_tag)))
            ),
            EarlierHandoff("", ""),
        )
    tail = ([earlier.turns] if earlier.turns else []) + turn_lines(messages[cut:], context_tag)
    if sum(map(len, tail)) + len(tail) > TAIL_CHARS:
        return None
    origins: list[int | None] = list(range(len(messages)))
    users = [] if keeps_user_messages else users_said(messages, origins, head_len, context_tag)
    summaries = [with_ledger_cut(earlier.summary)] if earlier.summary else []
    return assembled(users, summaries, tail, "")


@frozen(slots=True)
class EarlierHandoff:
    """The parts of a handoff of ours found in a message: its summary (with its ledger) and its latest turns."""

    summary: str
    turns: str

    @classmethod
    def within(cls, text: str) -> EarlierHandoff | None:
        """The handoff that ends in `text` at our end marker, or None if it holds none."""
        end = text.rfind(END)
        if end < 0:
            return None
        body = text[:end]
        said_at = body.rfind(f"\n\n{INSTRUCTIONS}")
        body = body[:said_at] if said_at >= 0 else body
        summary_at = body.find(SUMMARY_PREFIX)
        turns_at = body.find(LATEST_TURNS, max(summary_at, 0))
        summary = body[summary_at : turns_at if turns_at >= 0 else len(body)] if summary_at >= 0 else ""
        turns = body[turns_at + len(LATEST_TURNS) :] if turns_at >= 0 else ""
        return cls(summary.strip(), turns.strip())


def handed_over(head: Sequence[Message]) -> tuple[list[Message], str] | None:
    """A head that holds an earlier handoff of ours (the agent installed it), for the summarizer: the head with that
    message cut to the user's messages it quoted, and the handoff's summary and latest turns as the note to extend.
    None if the head holds none. Without this the summarizer would take the earlier work for part of the task."""
    for index, message in enumerate(head):
        text = text_of(message.get("content")) if message.get("role") == "user" else ""
        earlier = EarlierHandoff.within(text)
        if earlier is None:
            continue
        note = "\n\n".join(part for part in (earlier.summary, earlier.turns and LATEST_TURNS + earlier.turns) if part)
        # An agent that keeps the user's messages itself (Codex) got a handoff that quotes none: nothing of it is task.
        task = [{**message, "content": users_part(text)}] if USER_MESSAGES in text else []
        return [*head[:index], *task, *head[index + 1 :]], note.removeprefix(SUMMARY_PREFIX).strip()
    return None


def assembled(users: list[str], summaries: list[str], tail: list[str], instructions: str) -> str:
    """A handoff's text from its parts, in order, with the end marker last."""
    parts = [USER_MESSAGES + "\n\n".join(users)] if users else []
    parts.extend(summaries)
    if tail:
        parts.append(LATEST_TURNS + "\n".join(tail))
    if instructions:
        parts.append(INSTRUCTIONS + instructions)
    parts.append(END)
    return "\n\n".join(parts)


def users_said(
    messages: Sequence[Message], origins: Sequence[int | None], head_len: int, context_tag: str
) -> list[str]:
    """The user's messages of the head (of one holding an earlier handoff, the ones it quoted), each cut."""
    return [
        cut(said, MESSAGE_CHARS)
        for message, origin in zip(messages, origins, strict=True)
        if origin is not None and origin < head_len and message.get("role") == "user"
        if (said := users_part(readable(message, context_tag)).strip())
    ]


def turn_lines(messages: Sequence[Message], context_tag: str) -> list[str]:
    """The messages as the tail's lines, one entry a message (empty ones left out)."""
    return [line for message in messages if (line := turn_text(message, readable(message, context_tag)))]


def readable(message: Message, context_tag: str) -> str:
    """A message's text without the agent's own context elements (`context_tag`), which it adds again itself."""
    text = text_of(message.get("content"))
    return without_tagged(text, context_tag) if context_tag else text


def users_part(text: str) -> str:
    """A head message's text; of one that holds an earlier handoff (the agent installed it as the start of its
    conversation), only the user's messages quoted in it, so the next handoff quotes them again and does not nest."""
    start = text.find(USER_MESSAGES)
    if start < 0:
        return text
    start += len(USER_MESSAGES)
    marks = (f"\n\n{SUMMARY_PREFIX}", f"\n\n{LATEST_TURNS}", f"\n\n{END}")
    ends = [end for mark in marks if (end := text.find(mark, start)) >= 0]
    return text[start : min(ends, default=len(text))]


def with_ledger_cut(summary: str) -> str:
    """A summary message's text with its ledger (after the last ledger heading) cut to `LEDGER_CHARS`."""
    note, heading, ledger = summary.rpartition(LEDGER_HEADING)
    return f"{note}{heading}{cut(ledger, LEDGER_CHARS)}" if heading else summary


def with_ledger(summary: str, ledger: Ledger | None) -> str:
    """A summary message's text with its ledger rendered anew from `ledger` within `LEDGER_CHARS` (the newest entries
    of each kind, `Ledger.render`), and what followed the ledger kept; without one, cut (`with_ledger_cut`). The last
    ledger heading is the ledger's: the summary's own text may quote one."""
    note, heading, rest = summary.rpartition(LEDGER_HEADING)
    if ledger is None or not heading:
        return with_ledger_cut(summary)
    after = rest.rfind(f"\n\n{REPLACED_NOTE}")  # how to read back what the summary replaced, kept
    return f"{note}{ledger.render(LEDGER_CHARS)}{rest[after:] if after >= 0 else ''}"


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


def without_context(ledger: Ledger, messages: Sequence[Message], context_tag: str) -> Ledger:
    """The ledger without what only the agent's own context elements (`context_tag`) in `messages` said: Claude Code
    puts its `<system-reminder>`s into tool results too, and adds them again itself; they are none of its work."""
    if not context_tag:
        return ledger
    texts = [text_of(message.get("content")) for message in messages]
    context = "\n".join(part for text in texts for part in tagged(text, context_tag))
    if not context:
        return ledger
    # What the agent did and saw besides: the messages' text outside those elements, and its tool calls' commands (a
    # file it only opened is named in a call's arguments, which no message's text holds).
    rest = "\n".join(
        [*(without_tagged(text, context_tag) for text in texts), *(step.command for step in steps(messages))]
    )
    return ledger.without(lambda fact: fact in context and fact not in rest)


def elements(text: str, tag: str) -> Iterator[tuple[int, int, int, int]]:
    """Where each closed `<tag>...</tag>` element of `text` is: its start, where its content starts and ends, and
    its end; an unclosed one, and what follows it, is not an element."""
    opening, closing = f"<{tag}>", f"</{tag}>"
    at = 0
    while (start := text.find(opening, at)) >= 0:
        end = text.find(closing, start)
        if end < 0:
            return
        at = end + len(closing)
        yield start, start + len(opening), end, at


def tagged(text: str, tag: str) -> list[str]:
    """What `text`'s `<tag>...</tag>` elements hold (an unclosed one is left out), in one pass."""
    return [text[inner:close] for _, inner, close, _ in elements(text, tag)]


def without_tagged(text: str, tag: str) -> str:
    """`text` without its `<tag>...</tag>` elements (an unclosed one is kept), in one pass."""
    kept: list[str] = []
    at = 0
    for start, _, _, end in elements(text, tag):
        kept.append(text[at:start])
        at = end
    kept.append(text[at:])
    return "".join(kept)
