"""Rewrite a conversation so it fits: re-apply the record, then truncate, mask, summarize, fall back.

Pure: messages in, messages out. Counting and summarizing are passed in as callables, so this
module knows nothing of HTTP. Token figures here are in our own (uncalibrated) units; the caller
converts the budget.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from proxy.compaction.conversation import (
    PINNED_ROLES,
    Message,
    cut_points,
    head_length,
    last_user_index,
    text_of,
    tool_calls_by_id,
)
from proxy.compaction.mask import placeholder
from proxy.compaction.record import Record, Replacement, prefix_hash
from proxy.compaction.summary import (
    Summarize,
    SummaryJob,
    clip,
    local_digest,
    render_transcript,
    summary_message,
    summary_text,
)
from proxy.compaction.truncate import Limits, truncate_message
from proxy.config import Compaction

log = logging.getLogger("inflight")

MAX_SUMMARY_CHUNKS = 6
SUMMARY_PROMPT_TOKENS = 400  # the summarizer's own instructions, roughly
LAST_RESORT_MIN_BYTES = 256


@dataclass(frozen=True)
class Budget:
    """The request's budget and the thresholds derived from it, in tokens."""

    limit: int
    prune_at: int
    summarize_at: int
    target: int

    @classmethod
    def of(cls, limit: int, settings: Compaction) -> Budget:
        return cls(
            limit=limit,
            prune_at=int(limit * settings.prune_at),
            summarize_at=int(limit * settings.summarize_at),
            target=int(limit * settings.target),
        )


@dataclass
class Conversation:
    """The client's original messages with what counting learned about them."""

    messages: Sequence[Message]
    counts: Sequence[int]
    digests: Sequence[bytes]
    fixed_tokens: int  # reply priming and tool definitions: not ours to compact

    @property
    def tokens(self) -> int:
        return self.fixed_tokens + sum(self.counts)


@dataclass
class Outcome:
    messages: list[Message]
    tokens_before: int
    tokens_after: int
    actions: list[str]
    record: Record
    fits: bool
    messages_replaced: int = 0
    summarizer_ms: float | None = None
    summarizer_calls: int = 0
    notes: list[str] = field(default_factory=list)


@dataclass
class Draft:
    """A record being built: the state every stage reads and extends."""

    head_len: int
    prefix_len: int
    summary: Message | None = None
    summary_tokens: int = 0
    fallback: bool = False
    replaced: dict[int, Replacement] = field(default_factory=dict)

    @classmethod
    def from_record(cls, record: Record, conversation: Conversation) -> Draft:
        replaced = {
            index: r
            for index, r in record.replaced.items()
            if index < len(conversation.digests) and conversation.digests[index] == r.digest
        }
        return cls(record.head_len, record.prefix_len, record.summary, record.summary_tokens, record.fallback, replaced)

    def view(self, conversation: Conversation) -> list[tuple[Message, int, int | None]]:
        """(message, tokens, original index or None for the summary), in the order they are sent."""
        messages, counts = conversation.messages, conversation.counts
        out: list[tuple[Message, int, int | None]] = [self._item(i, messages, counts) for i in range(self.head_len)]
        if self.summary is not None:
            out.append((self.summary, self.summary_tokens, None))
        out += [(messages[i], counts[i], i) for i in range(self.head_len, self.prefix_len) if _pinned(messages[i])]
        out += [self._item(i, messages, counts) for i in range(self.prefix_len, len(messages))]
        return out

    def _item(self, index: int, messages: Sequence[Message], counts: Sequence[int]) -> tuple[Message, int, int]:
        replacement = self.replaced.get(index)
        if replacement is None:
            return messages[index], counts[index], index
        return replacement.message, replacement.tokens, index

    def tokens(self, conversation: Conversation) -> int:
        return conversation.fixed_tokens + sum(tokens for _, tokens, _ in self.view(conversation))

    def freeze(self, conversation: Conversation) -> Record:
        return Record(
            head_len=self.head_len,
            prefix_len=self.prefix_len,
            prefix_hash=prefix_hash(conversation.digests[: self.prefix_len]),
            summary=self.summary,
            summary_tokens=self.summary_tokens,
            fallback=self.fallback,
            replaced=dict(self.replaced),
        )


class Compactor:
    """The stages in order, built from one model's `compaction:` settings."""

    def __init__(
        self,
        settings: Compaction,
        *,
        count_message: Callable[[Message], int],
        count_text: Callable[[str], int],
        summarize: Summarize | None,
        summarizer_input_tokens: int,
    ) -> None:
        self.settings = settings
        self.count_message = count_message
        self.count_text = count_text
        self.summarize = summarize
        self.summarizer_input_tokens = summarizer_input_tokens

    async def run(
        self, conversation: Conversation, *, budget: Budget, record: Record | None, force: bool = False
    ) -> Outcome | None:
        """The rewritten conversation, or None when it goes upstream untouched."""
        before = conversation.tokens
        if record is None and before <= budget.prune_at and not force:
            return None
        messages = conversation.messages
        head_len = head_length(messages)
        draft = Draft.from_record(record, conversation) if record else Draft(head_len, head_len)
        actions: list[str] = []
        if record is not None:
            actions += ["summary-cached"] if record.summary is not None else []
            actions += sorted({r.kind for r in draft.replaced.values()})
        outcome = Outcome([], before, before, actions, record or draft.freeze(conversation), fits=True)
        total = draft.tokens(conversation)
        if force or total > self.recompact_at(budget, record):
            total = self.truncate(conversation, draft, budget, outcome, force=force)
            total = self.mask(conversation, draft, budget, outcome, force=force)
        if force or total > budget.summarize_at:
            total = await self.summarize_middle(conversation, draft, budget, outcome)
        if total > budget.limit:
            total = self.last_resort(conversation, draft, budget, outcome)
        outcome.messages = [message for message, _, _ in draft.view(conversation)]
        outcome.tokens_after = total
        outcome.record = draft.freeze(conversation)
        outcome.fits = total <= budget.limit
        outcome.actions = list(dict.fromkeys(outcome.actions)) or ["none"]
        return outcome

    def recompact_at(self, budget: Budget, record: Record | None) -> int:
        """Where truncate and mask run again. Without a record, at prune_at. With one, only once the
        rewritten request crosses summarize_at: masking one more result a turn between the two would
        change a message inside last turn's request every turn and defeat the upstream's prompt
        cache, for a few hundred tokens the request can afford (it is still under summarize_at)."""
        return budget.prune_at if record is None else budget.summarize_at

    # --- stage 1 -------------------------------------------------------------------------------

    def truncate(
        self, conversation: Conversation, draft: Draft, budget: Budget, outcome: Outcome, *, force: bool
    ) -> int:
        limits = Limits(self.settings.truncate.max_lines, self.settings.truncate.max_bytes)
        protected = _protected(conversation.messages)
        for index in range(draft.prefix_len, len(conversation.messages)):
            if index in protected or index in draft.replaced:
                continue
            cut = truncate_message(conversation.messages[index], limits)
            if cut is not None:
                draft.replaced[index] = Replacement(
                    conversation.digests[index], cut, self.count_message(cut), "truncate"
                )
                outcome.actions.append("truncate")
        return draft.tokens(conversation)

    # --- stage 2 -------------------------------------------------------------------------------

    def mask(self, conversation: Conversation, draft: Draft, budget: Budget, outcome: Outcome, *, force: bool) -> int:
        """All but the newest `keep_tool_results` results at once (then `keep_tool_results_min` if still
        above summarize_at): one big step rather than one result a turn, so the next turns need no change
        and the prefix stays stable."""
        messages = conversation.messages
        total = draft.tokens(conversation)
        results = [i for i in range(draft.prefix_len, len(messages)) if messages[i].get("role") == "tool"]
        calls = tool_calls_by_id(messages)
        for keep in (self.settings.mask.keep_tool_results, self.settings.mask.keep_tool_results_min):
            for index in results[: max(len(results) - keep, 0)]:
                current = draft.replaced.get(index)
                if current is not None and current.kind == "mask":
                    continue
                original = messages[index]
                masked = placeholder(original, calls.get(str(original.get("tool_call_id"))), conversation.counts[index])
                tokens = self.count_message(masked)
                previous_tokens = current.tokens if current else conversation.counts[index]
                draft.replaced[index] = Replacement(conversation.digests[index], masked, tokens, "mask")
                total += tokens - previous_tokens
                outcome.actions.append("mask")
            if not force and total <= budget.summarize_at:
                break
        return total

    # --- stage 3 and 4 -------------------------------------------------------------------------

    async def summarize_middle(self, conversation: Conversation, draft: Draft, budget: Budget, outcome: Outcome) -> int:
        messages = conversation.messages
        cut = self.choose_cut(conversation, draft, budget)
        if cut is None:
            return draft.tokens(conversation)
        span = [messages[i] for i in range(draft.prefix_len, cut) if not _pinned(messages[i])]
        previous = summary_text(draft.summary) if draft.summary is not None and not draft.fallback else None
        started = time.perf_counter()
        text, fallback = await self.summary_for(span, previous, outcome, budget)
        outcome.summarizer_ms = (time.perf_counter() - started) * 1000
        if fallback and draft.summary is not None:
            text = f"{summary_text(draft.summary)}\n\n{text}"  # keep what the earlier summary knew
        message = summary_message(clip(text, max(self.max_summary_tokens(budget) * 4, 400)))
        outcome.messages_replaced += cut - draft.prefix_len
        draft.summary, draft.summary_tokens, draft.fallback = message, self.count_message(message), fallback
        draft.prefix_len = cut
        draft.replaced = {i: r for i, r in draft.replaced.items() if i >= cut or i < draft.head_len}
        outcome.actions.append("fallback" if fallback else "summarize")
        return draft.tokens(conversation)

    def choose_cut(self, conversation: Conversation, draft: Draft, budget: Budget) -> int | None:
        """Where the verbatim tail starts: as many recent tokens as allowed, at least the last turn."""
        messages = conversation.messages
        cuts = cut_points(messages)
        valid = [i for i in range(draft.prefix_len + 1, len(messages)) if cuts[i]]
        last_user = last_user_index(messages)
        if last_user is not None and last_user >= draft.head_len:
            valid = [i for i in valid if i <= last_user]  # the last user message is never summarized
        if not valid:
            return None
        view = draft.view(conversation)
        tokens_from = {origin: 0 for _, _, origin in view if origin is not None}
        running = 0
        for _, tokens, origin in reversed(view):
            running += tokens
            if origin is not None and origin >= draft.prefix_len:
                tokens_from[origin] = running
        fixed = conversation.fixed_tokens + sum(t for _, t, o in view if o is None or o < draft.prefix_len)
        fixed -= draft.summary_tokens
        room = budget.target - fixed - self.max_summary_tokens(budget)
        tail_budget = min(self.settings.summarize.keep_recent_tokens, budget.limit // 2, max(room, 0))
        cut = valid[-1]
        for candidate in reversed(valid[:-1]):
            if tokens_from.get(candidate, 0) > tail_budget:
                break
            cut = candidate
        return cut

    def max_summary_tokens(self, budget: Budget) -> int:
        return max(min(self.settings.summarize.max_summary_tokens, budget.limit // 4), 32)

    async def summary_for(
        self, span: list[Message], previous: str | None, outcome: Outcome, budget: Budget
    ) -> tuple[str, bool]:
        """An LLM summary of the span (rolling over chunks when it is long); a local digest on failure."""
        if self.summarize is None:
            return local_digest(span), True
        try:
            summary = previous
            for chunk in self.chunks(span, previous, budget):
                job = SummaryJob(previous=summary, transcript=chunk, max_tokens=self.max_summary_tokens(budget))
                outcome.summarizer_calls += 1
                summary = (await self.summarize(job)).strip()
                if not summary:
                    raise ValueError("the summarizer returned an empty summary")
            return summary or "", False
        except Exception as exc:  # whatever went wrong, the request must still be served
            outcome.notes.append(f"summarizer_error={type(exc).__name__}")
            log.warning("[compaction] summarizer failed (%s: %s); using a local digest", type(exc).__name__, exc)
            return local_digest(span), True

    def chunks(self, span: list[Message], previous: str | None, budget: Budget) -> list[str]:
        """The transcript in pieces that each fit the summarizer's input; the oldest go first if too many."""
        room = self.summarizer_input_tokens - self.max_summary_tokens(budget) - SUMMARY_PROMPT_TOKENS
        room -= self.count_text(previous) if previous else 0
        room = max(room, 256)
        clip_chars = self.settings.summarize.clip_tool_output_chars
        while True:
            blocks = render_transcript(span, clip_tool_output=clip_chars)
            pieces: list[list[str]] = [[]]
            used = 0
            for block in blocks:
                tokens = self.count_text(block)
                if tokens > room:
                    block, tokens = clip(block, room * 3), self.count_text(clip(block, room * 3))
                if used + tokens > room and pieces[-1]:
                    pieces.append([])
                    used = 0
                pieces[-1].append(block)
                used += tokens
            if len(pieces) <= MAX_SUMMARY_CHUNKS or clip_chars <= 200:
                break
            clip_chars //= 3
        if len(pieces) > MAX_SUMMARY_CHUNKS:
            dropped = sum(len(p) for p in pieces[:-MAX_SUMMARY_CHUNKS])
            pieces = pieces[-MAX_SUMMARY_CHUNKS:]
            pieces[0].insert(0, f"[{dropped} earlier messages omitted: too long to summarize]")
        return ["\n\n".join(piece) for piece in pieces if piece]

    # --- stage 5 -------------------------------------------------------------------------------

    def last_resort(self, conversation: Conversation, draft: Draft, budget: Budget, outcome: Outcome) -> int:
        """Halve the biggest messages we may touch (never system/developer, never the last user text)."""
        messages = conversation.messages
        protected = _protected(messages)
        total = draft.tokens(conversation)
        while total > budget.limit:
            candidates = [
                (tokens, origin, message)
                for message, tokens, origin in draft.view(conversation)
                if origin is not None and origin not in protected and tokens > 32
            ]
            candidates.sort(key=lambda c: c[0], reverse=True)
            shrunk = False
            for tokens, origin, message in candidates:
                text = text_of(message.get("content"))
                size = len(text.encode())
                if size <= LAST_RESORT_MIN_BYTES:
                    continue
                limits = Limits(max(4, text.count("\n") // 2), max(LAST_RESORT_MIN_BYTES, size // 2))
                cut = truncate_message(message, limits)
                if cut is None:
                    continue
                new_tokens = self.count_message(cut)
                draft.replaced[origin] = Replacement(conversation.digests[origin], cut, new_tokens, "truncate")
                total += new_tokens - tokens
                shrunk = True
                break
            if not shrunk:
                break
        outcome.actions.append("truncate")
        return total


def _pinned(message: Message) -> bool:
    return message.get("role") in PINNED_ROLES


def _protected(messages: Sequence[Message]) -> set[int]:
    """Messages no stage may change: system/developer messages and the last user message."""
    protected = {i for i, m in enumerate(messages) if _pinned(m)}
    last_user = last_user_index(messages)
    if last_user is not None:
        protected.add(last_user)
    return protected
