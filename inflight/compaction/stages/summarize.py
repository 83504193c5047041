"""Stage 3: an LLM summary of the middle, built chunk by chunk when the middle is long.

If the summarizer fails, the draft is left unchanged and the outcome says why; the digest stage
after it then replaces the same middle with a local digest.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable, Sequence

from inflight.compaction.actions import Action
from inflight.compaction.conversation import Message
from inflight.compaction.handoff import handed_over
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
from inflight.frozen import frozen

log = logging.getLogger("inflight")

MAX_SUMMARY_CHUNKS = 6
MESSAGE_OVERHEAD_TOKENS = 64  # the chat format around the two messages, and the tags around the transcript
MIN_ROOM_TOKENS = 256


class SummarizerTooSmall(ValueError):
    """The summarizer's window is too small for a useful piece of transcript plus what is sent with it."""

    # Trying again, or from the conversation's next turn, cannot help: the background jobs give it up (`lasting`).
    lasting = True


@frozen
class SummaryPlan:
    jobs: list[SummaryJob]  # one per chunk of the transcript, in order
    previous: str | None  # the record's earlier summary, which the first chunk's summary extends
    in_place: SummaryJob | None = None  # tried first, when planned
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
            if rejected:  # reported in x-inflight-actions: a reply came but was not good enough to keep
                work.outcome.actions.append(Action.rejected(rejected))
            if isinstance(exc, SummaryBudgetSpent):
                work.outcome.actions.append(exc.action)
            log.warning("[compaction] summarizer failed (%s: %s); using a local digest", type(exc).__name__, exc)
            return
        finally:
            work.outcome.summarizer_ms = (time.perf_counter() - started) * 1000
        replace_middle(work, cut, text, settings=self.settings, fallback=False, ledger=grown_ledger(work, cut))

    async def summary_for(self, work: Work, cut: int, *, in_place: InPlace | None = None) -> str:
        """Summarize the conversation up to `cut`, including the record's earlier summary."""
        return await self.ask(self.plan(work, cut, in_place=in_place), work)

    def plan(self, work: Work, cut: int, *, in_place: InPlace | None = None) -> SummaryPlan:
        """Prepare the summarizer requests without calling it: CPU work only (render, count, chunk).

        A background job can then do this off the event loop and await the calls on it. With `in_place`, the
        summarizer is first asked with the conversation as last sent (see `InPlace`) when that fits its window;
        the usual transcript chunks are prepared too, in case that fails."""
        draft = work.draft
        previous = without_notes(written_part(draft.summary)) if draft.summary else None
        head = work.conversation.messages[: draft.head_len]
        if not previous and (handed := handed_over(head)) is not None:  # the agent's head holds our earlier handoff
            head, previous = handed
        messages = span(work, cut)
        max_tokens = self.max_tokens(work)
        in_place_job = self.in_place_job(messages, in_place, max_tokens) if in_place is not None else None
        try:
            jobs = self.rolling_jobs(messages, max_tokens, work, head, previous=previous or None)
        except SummarizerTooSmall as exc:
            return SummaryPlan([], previous or None, in_place_job, exc)
        return SummaryPlan(jobs, previous or None, in_place_job)

    async def ask(self, plan: SummaryPlan, work: Work) -> str:
        """Get the summary: in place if planned and the reply is good, else chunk by chunk.

        Each chunk's call extends the summary so far with that chunk."""
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
        """The in-place request, if the conversation, the instruction and the reply fit the summarizer's window."""
        prompt = load_prompt(self.settings.prompt_file)
        sent = in_place.tokens + self.count_text(prompt) + MESSAGE_OVERHEAD_TOKENS
        if sent + max_tokens > self.input_tokens:
            return None
        clip_chars = self.settings.clip_tool_output_chars
        transcript = "\n\n".join(render_transcript(messages, clip_tool_output=clip_chars))  # used to check the reply
        return SummaryJob(None, transcript, max_tokens, prompt=prompt, in_place=in_place, input_tokens=sent)

    async def ask_in_place(self, job: SummaryJob, work: Work) -> str | None:
        """Send the in-place request; None if it is refused or its reply rejected, so the transcript form is tried.

        A model may carry on the conversation instead of summarizing it, which is why replies are checked."""
        work.outcome.summarizer_calls += 1
        try:
            return (await self.summarize(job)).strip()
        except Exception as exc:
            # Refused (too long after all, or a parameter it does not accept) or a rejected reply: the transcript
            # form may work. If the summarizer is down or slow, that would fail too, so the job fails (retried once).
            refused = 400 <= (getattr(exc, "status", None) or 0) < 500
            if not (refused or getattr(exc, "rejected", None)):
                raise
            log.info("[compaction] in-place summary refused (%s); asking with the transcript", exc)
            return None

    def max_tokens(self, work: Work) -> int:
        # The summary must fit the request's budget and leave room in the summarizer's window for its input.
        return min(max_summary_tokens(self.settings, work.budget), self.input_tokens // 4)

    def rolling_jobs(
        self,
        messages: list[Message],
        max_tokens: int,
        work: Work,
        head_messages: Sequence[Message],
        *,
        previous: str | None,
    ) -> list[SummaryJob]:
        """One request per chunk of the transcript; `ask` fills in `previous` with the summary so far."""
        draft = work.draft
        head = head_for_summarizer(head_messages)
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
        """Split the transcript into pieces that each fit the summarizer's window with everything sent alongside.

        That is the prompt, task, ledger, summary so far and reply. If there are too many pieces, the oldest are
        dropped. A window too small for even that raises `SummarizerTooSmall` rather than send a doomed request."""
        note = max(self.count_text(previous) if previous else 0, max_tokens)  # the largest the summary so far can be
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
        """Group blocks, in order, into as few pieces of at most `room` tokens as possible; clip any larger block."""
        pieces: list[list[str]] = [[]]
        used = 0
        for block in blocks:
            tokens = self.count_text(block)
            while tokens > room:  # a block bigger than a whole chunk is clipped and recounted until it fits
                block = clip(block, min(room * 3, len(block) // 2))
                tokens = self.count_text(block)
            if used + tokens > room and pieces[-1]:
                pieces.append([])
                used = 0
            pieces[-1].append(block)
            used += tokens
        return pieces
