"""Stage 1: cut oversized message text down to its start and end, saying exactly what was cut.

Both ends are kept because tool output has its command echo and headers at the top and its
verdict (the exception, the test summary, the exit status) at the bottom.
"""

from __future__ import annotations

from itertools import accumulate
from typing import Any

from inflight.compaction.actions import Action
from inflight.compaction.conversation import Message, protected, text_of
from inflight.compaction.facts import facts_note
from inflight.compaction.record import Replacement
from inflight.compaction.retrieval import handle_of, read_back_note
from inflight.compaction.stage import Work
from inflight.config import Truncate as TruncateSettings
from inflight.frozen import frozen


@frozen
class Limits:
    max_lines: int
    max_bytes: int


def marker(omitted_lines: int, total_lines: int, omitted_bytes: int, facts: str = "", handle: str | None = None) -> str:
    """Describe what a cut removed; `facts` (`facts_note` of the removed part) keeps its error lines and paths, and
    `handle` names where all of it can be read back."""
    said = f"; in them: {facts}" if facts else ""
    said += f"; {read_back_note(handle)}" if handle else ""
    return f"[... omitted {omitted_lines:,} of {total_lines:,} lines ({omitted_bytes:,} bytes){said} ...]"


def truncate_text(text: str, limits: Limits, handle: str | None = None) -> str | None:
    """The start and end of `text` within the limits, or None when it already fits."""
    ascii = text.isascii()  # if so, a character is a byte
    size = len(text) if ascii else len(text.encode())
    lines = text.split("\n")
    if len(lines) <= limits.max_lines and size <= limits.max_bytes:
        return None
    keep_lines = min(len(lines), limits.max_lines)
    budget = max(limits.max_bytes - 120, 64)  # room for the marker itself
    # Cumulative bytes of the first n lines, each with its newline, so a 200 KB output is measured only once.
    ends = [0, *accumulate(len(line) + 1 if ascii else len(line.encode()) + 1 for line in lines)]

    def kept_bytes(head_n: int, tail_n: int) -> int:
        return ends[head_n] + ends[-1] - ends[len(lines) - tail_n]

    head_n, tail_n = _split(keep_lines)
    while head_n + tail_n > 1 and kept_bytes(head_n, tail_n) > budget:
        head_n, tail_n = _split(max(1, (head_n + tail_n) // 2))
    head, tail = lines[:head_n], lines[len(lines) - tail_n :] if tail_n else []
    if kept_bytes(head_n, tail_n) > budget:  # a single enormous line: cut inside it
        return _cut_bytes(text, budget, total_lines=len(lines), handle=handle)
    kept = "\n".join(head + tail)
    omitted_lines = len(lines) - head_n - tail_n
    facts = facts_note("\n".join(lines[head_n : len(lines) - tail_n]))
    note = marker(omitted_lines, len(lines), size - len(kept.encode()), facts, handle)
    return "\n".join([*head, note, *tail])


def truncate_message(message: Message, limits: Limits, handle: str | None = None) -> Message | None:
    """A copy of `message` with its oversized text cut, or None when nothing needed cutting."""
    content = message.get("content")
    if isinstance(content, str):
        cut = truncate_text(content, limits, handle)
        return None if cut is None else {**message, "content": cut}
    if isinstance(content, list):
        parts: list[Any] = []
        changed = False
        for part in content:
            text = part.get("text") if isinstance(part, dict) else None
            cut = truncate_text(text, limits, handle) if isinstance(text, str) else None
            parts.append(part if cut is None else {**part, "text": cut})
            changed = changed or cut is not None
        return {**message, "content": parts} if changed else None
    return None


def _split(count: int) -> tuple[int, int]:
    head = (count + 1) // 2
    return head, count - head


def _cut_bytes(text: str, budget: int, *, total_lines: int, handle: str | None = None) -> str:
    data = text.encode()
    half = budget // 2
    head = data[:half].decode(errors="ignore")
    tail = data[len(data) - half :].decode(errors="ignore")
    omitted = len(data) - len(head.encode()) - len(tail.encode())
    kept_lines = head.count("\n") + tail.count("\n") + 1
    if total_lines > kept_lines:
        note = marker(total_lines - kept_lines, total_lines, omitted, handle=handle)
    else:
        back = f"; {read_back_note(handle)}" if handle else ""
        note = f"[... omitted {omitted:,} of {len(data):,} bytes{back} ...]"
    return f"{head}\n{note}\n{tail}"


class TruncateStage:
    """Truncate every oversized message after the summarized prefix and before the agent's recent work.

    Pinned messages and the latest request are left alone, as is the latest user message unless it alone takes
    more than a quarter of the budget."""

    def __init__(self, settings: TruncateSettings) -> None:
        self.limits = Limits(settings.max_lines, settings.max_bytes)

    @staticmethod
    def whole(work: Work, index: int) -> bool:
        """Whether a message of the agent's recent work stays whole: unless it alone takes a quarter of the budget."""
        return work.recent(index) and work.conversation.counts[index] <= work.budget.limit // 4

    async def run(self, work: Work) -> None:
        if not work.prune:
            return
        messages, draft = work.conversation.messages, work.draft
        kept = protected(messages, work.latest_request) | work.conversation.opaque
        latest_user = work.latest_user_message()  # e.g. a text-action agent's latest observation, unless huge
        if latest_user is not None:
            kept.add(latest_user)
        for index in range(draft.prefix_len, len(messages)):
            if index in kept or index in draft.replaced or self.whole(work, index):
                continue
            digest = work.conversation.digests[index]
            cut = truncate_message(messages[index], self.limits, handle_of(digest) if work.handles else None)
            if cut is not None:
                tokens = work.count_replacement(index, cut, size=len(text_of(cut.get("content"))))
                draft.replaced[index] = Replacement(digest, cut, tokens, "truncate")
                work.outcome.actions.append(Action.TRUNCATE)
