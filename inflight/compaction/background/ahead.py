"""Plan and make the summary a conversation's next compaction will need, before the turn that needs it.

A job starts on a turn past `summarize.background_at`. The conversation will keep growing until it
passes `summarize_at`, so the job keeps a tail shorter than usual by that growth. On the turn that
passes the threshold, the kept tail plus the newer turns is about the usual length, and the request
ends near `target`, as if the summary had been made on that turn. The summary covers everything before
the cut, including the record's earlier summary, so it stays valid however the record changes
meanwhile (`Precomputed.usable`).
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Sequence

from inflight.compaction.background.scheduler import Final
from inflight.compaction.conversation import (
    Conversation,
    Message,
    describe_call,
    head_length,
    latest_request_index,
    text_of,
)
from inflight.compaction.depth import Spacing
from inflight.compaction.draft import Budget, Draft
from inflight.compaction.ledger import Ledger
from inflight.compaction.middle import Recent, choose_cut, depth_of, grown_ledger, kept_recent
from inflight.compaction.record import Precomputed, Record, prefix_hash
from inflight.compaction.stage import Outcome, Work
from inflight.compaction.stages.summarize import SummarizeStage, SummaryPlan
from inflight.compaction.summary_job import InPlace
from inflight.frozen import frozen

KEEP_FROM_CHARS = 80


class NothingToSummarize(Final):
    """There is no turn boundary to cut at: the conversation is only its head and one turn."""


@frozen
class SummaryAhead:
    """What a background job needs from the request that starts it (the pipeline builds one per request)."""

    start_at: int  # a request above this many tokens (our units) starts a job
    wait_s: float  # how long a turn that needs the summary now waits for a running job
    budget: Budget
    stage: SummarizeStage
    count_message: Callable[[Message], int]
    observation: re.Pattern[str] | None = None  # matches user messages that are observations, not requests
    in_place_model: str | None = None  # set when the summarizer is the upstream's own model: ask it in place
    tools: object = None  # the request's tools, sent with an in-place summary so its prefix is unchanged
    spacing: Spacing | None = None  # the cut leaves room for `min_turns_between` turns (`depth`; None: to target)
    tenant: str = ""  # whose share of the background slots the job takes (the budget's spender)
    recent: Recent | None = None  # the agent's recent work, which the summary never covers (None: the latest turn)

    @property
    def lease_s(self) -> float:
        """How long a job may hold its conversation's lease: four summarizer timeouts plus 30 seconds."""
        return 4 * self.stage.settings.timeout_s + 30

    def plan(
        self, conversation: Conversation, record: Record | None, sent: Sequence[Message], sent_tokens: int
    ) -> AheadPlan:
        """Work out where the next compaction will cut and what the summarizer will be asked, without calling it.

        This is CPU work only; the job runs it off the event loop when the conversation is big."""
        head_len = head_length(conversation.messages)
        draft = Draft.from_record(record, conversation) if record is not None else Draft(head_len, head_len)
        outcome = Outcome([], sent_tokens, sent_tokens, [], draft.freeze(conversation), fits=True)
        latest = latest_request_index(conversation.messages, self.observation, conversation.observations)
        work = Work(conversation, draft, self.budget, outcome, self.count_message, latest_request=latest)
        if self.recent is not None:
            work.recent_from = kept_recent(work, self.recent, self.stage.settings)
        work.depth = depth_of(work, self.spacing) if self.spacing is not None and self.budget.spaced else None
        growth = max(self.budget.summarize_at - sent_tokens, 0)
        cut = choose_cut(work, self.stage.settings, growth=growth)
        if cut is None:
            raise NothingToSummarize("no turn to cut at")
        in_place = None
        if self.in_place_model is not None:
            in_place = InPlace(self.in_place_model, sent, sent_tokens, self.tools, opening(conversation.messages[cut]))
        summary = self.stage.plan(work, cut, in_place=in_place)
        cut_hash = prefix_hash(conversation.matched[:cut])
        return AheadPlan(cut, cut_hash, draft.prefix_len, grown_ledger(work, cut), summary, work)

    async def ask(self, plan: AheadPlan) -> Precomputed:
        """Call the summarizer for the summary the plan describes, on the server's event loop."""
        started = time.perf_counter()
        text = await self.stage.ask(plan.summary, plan.work)
        if not text:
            raise ValueError("the summarizer returned an empty summary")
        made_ms = (time.perf_counter() - started) * 1000
        calls = plan.work.outcome.summarizer_calls
        return Precomputed(
            plan.cut, plan.cut_hash, text, base=plan.base, ledger=plan.ledger, calls=calls, made_ms=made_ms
        )


@frozen
class AheadPlan:
    cut: int
    cut_hash: bytes
    base: int  # the prefix_len of the record it extends
    ledger: Ledger
    summary: SummaryPlan
    work: Work


def opening(message: Message) -> str:
    """The start of the message (its text, else its first tool call), to show the summarizer where the tail begins."""
    text = text_of(message.get("content")).strip()
    calls = message.get("tool_calls") or []
    if not text and calls and isinstance(calls[0], dict) and isinstance(calls[0].get("function"), dict):
        text = f"(a call of {describe_call(calls[0]['function'])})"
    return text[:KEEP_FROM_CHARS]
