"""Stage 3: an LLM summary of the middle, rolled over chunks when the middle is long.

A failing summarizer leaves the draft as it was and says why in the outcome; the digest stage
after it then drops the same middle with a local digest.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from inflight.compaction.actions import Action
from inflight.compaction.conversation import Message
from inflight.compaction.middle import due_cut, grown_ledger, max_summary_tokens, replace_middle, span
from inflight.compaction.stage import Work
from inflight.compaction.stages.digest import without_notes
from inflight.compaction.summary_job import (
    LEDGER_CHARS,
    InPlace,
    Summarize,
    SummaryBudgetSpent,
    SummaryJob,
    clip,
    head_for_summarizer,
    load_prompt,
    render_transcript,
    written_part,
)
from inflight.config import Summarize as SummarizeSettings

log = logging.getLogger("inflight")

MAX_SUMMARY_CHUNKS = 6
MESSAGE_OVERHEAD_TOKENS = 64  # the chat format around the two messages, and the tags
MIN_ROOM_TOKENS = 256


class SummarizerTooSmall(ValueError):
    """The summarizer's window cannot take a useful piece of transcript beside what goes with it."""


@dataclass(frozen=True)
class SummaryPlan:
    jobs: list[SummaryJob]  # one per chunk of the transcript, in order
    previous: str | None  # the record's earlier note, which the first chunk is folded into
    in_place: SummaryJob | None = None  # asked first, when planned
    problem: Exception | None = None  # why no chunk could be made (raised if the in-place request fails)


class SummarizeStage:
    def __init__(
        self,
        settings: SummarizeSettings,
        *,
        summarize: Summarize,
        count_text: Callable[[str], int],
        input_tokens: int,
    ) -> None:
        self.settings = settings
        self.summarize = summarize
        self.count_text = count_text
        self.input_tokens = input_tokens  # the summarizer model's window, in our units

    async def run(self, work: Work) -> None:
        cut = due_cut(work, self.settings)
        if cut is None:
            return
        started = time.perf_counter()
        try:
            text = await self.summary_for(work, cut)
        except Exception as exc:  # whatever went wrong, the request must still be served
            work.outcome.notes["summarizer_error"] = type(exc).__name__
            rejected = getattr(exc, "rejected", None)
            if rejected:  # said in x-inflight-actions: the reply came, and was not good enough to keep
                work.outcome.actions.append(Action.rejected(rejected))
            if isinstance(exc, SummaryBudgetSpent):
                work.outcome.actions.append(exc.action)
            log.warning("[compaction] summarizer failed (%s: %s); using a local digest", type(exc).__name__, exc)
            return
        finally:
            work.outcome.summarizer_ms = (time.perf_counter() - started) * 1000
        replace_middle(work, cut, text, settings=self.settings, fallback=False, ledger=grown_ledger(work, cut))

    async def summary_for(self, work: Work, cut: int, *, in_place: InPlace | None = None) -> str:
        """The summary of the conversation up to `cut`, the record's earlier summary folded in."""
        return await self.ask(self.plan(work, cut, in_place=in_place), work)

    def plan(self, work: Work, cut: int, *, in_place: InPlace | None = None) -> SummaryPlan:
        """What the summarizer will be asked, before any call: CPU only (render, count, chunk), so that a
        background job works it out off the event loop and then awaits the calls on it.

        `in_place`: ask with the conversation as last sent (see `InPlace`) when that fits the summarizer's
        window; the chunks of the usual form are made too, for when that fails."""
        draft = work.draft
        previous = without_notes(written_part(draft.summary)) if draft.summary else None
        messages = span(work, cut)
        max_tokens = self.max_tokens(work)
        in_place_job = self.in_place_job(messages, in_place, max_tokens) if in_place is not None else None
        try:
            jobs = self.rolling_jobs(messages, max_tokens, work, previous=previous or None)
        except SummarizerTooSmall as exc:
            return SummaryPlan([], previous or None, in_place_job, exc)
        return SummaryPlan(jobs, previous or None, in_place_job)

    async def ask(self, plan: SummaryPlan, work: Work) -> str:
        """The summary: asked in place if planned (and kept if good), else chunk by chunk, each call
        folding its chunk into the note so far."""
        if plan.in_place is not None:
            text = await self.ask_in_place(plan.in_place, work)
            if text:
                return text
        if plan.problem is not None:
            raise plan.problem
        summary = plan.previous
        for job in plan.jobs:
            work.outcome.summarizer_calls += 1
            summary = (await self.summarize(dataclasses.replace(job, previous=summary))).strip()
            if not summary:
                raise ValueError("the summarizer returned an empty summary")
        return summary or ""

    def in_place_job(self, messages: list[Message], in_place: InPlace, max_tokens: int) -> SummaryJob | None:
        """The in-place request, when the conversation, the instruction and the reply fit the summarizer."""
        prompt = load_prompt(self.settings.prompt_file)
        sent = in_place.tokens + self.count_text(prompt) + MESSAGE_OVERHEAD_TOKENS
        if sent + max_tokens > self.input_tokens:
            return None
        clip_chars = self.settings.clip_tool_output_chars
        transcript = "\n\n".join(render_transcript(messages, clip_tool_output=clip_chars))  # to check the reply
        return SummaryJob(None, transcript, max_tokens, prompt=prompt, in_place=in_place, input_tokens=sent)

    async def ask_in_place(self, job: SummaryJob, work: Work) -> str | None:
        """The reply to the in-place request; None when it is refused or its reply rejected (a model may
        carry on the conversation instead of summarizing it): then the usual form is asked."""
        work.outcome.summarizer_calls += 1
        try:
            return (await self.summarize(job)).strip()
        except Exception as exc:
            # Refused (too long after all, a parameter it does not take) or a reply not kept: the usual form
            # may do. Down or slow: it would fail the same way, so the job fails (and is retried once).
            refused = 400 <= (getattr(exc, "status", None) or 0) < 500
            if not (refused or getattr(exc, "rejected", None)):
                raise
            log.info("[compaction] in-place summary refused (%s); asking with the transcript", exc)
            return None

    def max_tokens(self, work: Work) -> int:
        # The note must fit the request's budget, and leave the summarizer's own window room to read.
        return min(max_summary_tokens(self.settings, work.budget), self.input_tokens // 4)

    def rolling_jobs(
        self, messages: list[Message], max_tokens: int, work: Work, *, previous: str | None
    ) -> list[SummaryJob]:
        """One request per chunk of the transcript; `previous` is filled in as the note grows (`ask`)."""
        draft = work.draft
        head = head_for_summarizer(work.conversation.messages[: draft.head_len])
        ledger = draft.ledger.render(LEDGER_CHARS) if draft.ledger else ""
        prompt = load_prompt(self.settings.prompt_file)
        context = self.count_text(prompt) + self.count_text(head) + self.count_text(ledger)
        chunks = self.chunks(messages, previous, max_tokens, context_tokens=context)
        sent = context + MESSAGE_OVERHEAD_TOKENS
        return [
            SummaryJob(None, chunk, max_tokens, head=head, ledger=ledger, prompt=prompt, input_tokens=sent + tokens)
            for chunk, tokens in ((chunk, self.count_text(chunk)) for chunk in chunks)
        ]

    def chunks(
        self, messages: list[Message], previous: str | None, max_tokens: int, *, context_tokens: int
    ) -> list[str]:
        """The transcript in pieces that each fit the summarizer's window with everything sent beside
        them (prompt, task, ledger, the note so far, the reply); the oldest go first if too many.
        A window too small for even that is not sent a request it would refuse."""
        note = max(self.count_text(previous) if previous else 0, max_tokens)  # the note so far, at most
        room = self.input_tokens - max_tokens - context_tokens - note - MESSAGE_OVERHEAD_TOKENS
        if room < MIN_ROOM_TOKENS:
            raise SummarizerTooSmall(
                f"the summarizer's window ({self.input_tokens:,} tokens) leaves {room:,} for the messages"
            )
        clip_chars = self.settings.clip_tool_output_chars
        while True:
            pieces = self.pack(render_transcript(messages, clip_tool_output=clip_chars), room)
            if len(pieces) <= MAX_SUMMARY_CHUNKS or clip_chars <= 200:
                break
            clip_chars //= 3
        if len(pieces) > MAX_SUMMARY_CHUNKS:
            dropped = sum(len(p) for p in pieces[:-MAX_SUMMARY_CHUNKS])
            pieces = pieces[-MAX_SUMMARY_CHUNKS:]
            pieces[0].insert(0, f"[{dropped} earlier messages omitted: too long to summarize]")
        return ["\n\n".join(piece) for piece in pieces if piece]

    def pack(self, blocks: list[str], room: int) -> list[list[str]]:
        """Blocks in order, as few pieces as fit `room` tokens each; a block larger than that is clipped."""
        pieces: list[list[str]] = [[]]
        used = 0
        for block in blocks:
            tokens = self.count_text(block)
            while tokens > room:  # a block bigger than a whole chunk: clipped (and counted again) until it fits
                block = clip(block, min(room * 3, len(block) // 2))
                tokens = self.count_text(block)
            if used + tokens > room and pieces[-1]:
                pieces.append([])
                used = 0
            pieces[-1].append(block)
            used += tokens
        return pieces
