"""The parts one request's compaction is built from: its model's settings, token counting, the summarizer.

The pipeline decides whether to compact and to what budget; these parts build the compactor it runs,
and the `SummaryAhead` for a background summary job, for that one request.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Protocol

from inflight.compaction import Budget, Compactor, Summarize, SummaryAhead, SummaryJob, build_compactor
from inflight.compaction.compactor import recent_of
from inflight.compaction.conversation import Message, observation_regex
from inflight.compaction.depth import Spacing
from inflight.compaction.handoff import without_tagged
from inflight.compaction.stages import SummarizeStage
from inflight.compaction.summary_job import SummaryBudgetSpent
from inflight.config import Compaction, Prices
from inflight.formats import WireFormat
from inflight.offload import on_home_loop
from inflight.pipeline.accounting import Accounting
from inflight.policy.tenants import SummaryBudget
from inflight.policy.windows import ContextRegistry
from inflight.tokens import TokenCounter
from inflight.tokens.text import counted_or_estimated
from inflight.upstream.headers import RawHeaders


class SummarizerFactory(Protocol):
    """Makes the summarizer for one request, from its model's compaction settings, its model, the client's key,
    and the wire format the request came in (which the upstream therefore speaks)."""

    def __call__(
        self, options: Compaction, *, model: str, client_credentials: RawHeaders, wire: WireFormat | None = None
    ) -> Summarize: ...

    async def window(self, options: Compaction, model: str) -> int | None:
        """The summarizer model's window as reported by its own endpoint (None: no separate endpoint, or it does
        not say)."""
        ...


async def summarizer_window(
    summarizers: SummarizerFactory | None, registry: ContextRegistry, settings: Compaction, model: str, *, ask: bool
) -> int:
    """The summarizer's window: as configured, else from its own endpoint when it has one (only if `ask`), else
    looked up like any model's. A summarizer is never sent more than this (`SummarizeStage.chunks`)."""
    model = settings.summarize.model or model
    if ask and summarizers is not None and settings.summarize.base_url:
        found = await summarizers.window(settings, model)
        if found is not None:
            return found
    return registry.resolve(model).context_window


@dataclass
class CompactionParts:
    """What one request's compaction is built from: its model's settings, token counting and the summarizer."""

    settings: Compaction
    accounting: Accounting
    counter: TokenCounter
    summarizers: SummarizerFactory | None
    client_credentials: RawHeaders  # the client's key headers, for the summarizer when no key is configured
    summarizer_input_tokens: int  # the summarizer's window, in our units
    wire: WireFormat | None = None  # the request's format, used to ask the upstream's own model for a summary
    budget: SummaryBudget | None = None  # the summarizer calls clients may cause (None: no limit)
    spender: str = ""  # whose budget this request's summaries spend, including background jobs'
    tenant: str = ""  # whose key the request came with: its summaries count in that client's usage
    prices: Prices | None = None  # the upstream's prices, when compactions are scheduled by cost
    instructions: str = ""  # the user's own instructions for the summary (an agent's `/compact <instructions>`)
    context_tag: str = ""  # the element an agent's own context comes in, left out of what the summarizer reads

    def spacing(self, *, summaries_ahead: bool) -> Spacing:
        """How far apart compactions are spaced, for both the compactor and the background job."""
        return Spacing(
            self.settings.summarize,
            self.settings.min_turns_between,
            summary_costs=self.summarizers is not None,
            summaries_ahead=summaries_ahead,
            prices=self.prices,
        )

    def summarize(self) -> Summarize | None:
        if self.summarizers is None:
            return None
        model = self.accounting.model
        made = self.summarizers(self.settings, model=model, client_credentials=self.client_credentials, wire=self.wire)
        if self.instructions:
            made = with_instructions(made, self.instructions)
        if self.context_tag:
            made = reading_without_context(made, self.context_tag)
        return on_home_loop(budgeted(made, self.budget, self.spender, self.tenant) if self.budget is not None else made)

    def count_message(self) -> Callable[[Message], int]:
        counter, encoding = self.counter, self.counter.encoding(self.accounting.encoding)
        return lambda message: counter.count_message(message, encoding)

    def estimate_message(self) -> Callable[[Message], int]:
        counter, encoding = self.counter, self.counter.encoding(self.accounting.encoding)
        return lambda message: counter.estimate_message(message, encoding)

    def count_text(self) -> Callable[[str], int]:
        encoding = self.counter.encoding(self.accounting.encoding)
        return lambda text: counted_or_estimated(encoding, text)

    def compactor(self, *, background: bool) -> Compactor:
        # The summarizer's reply is limited to max_summary_tokens, and the stages leave room for it.
        return build_compactor(
            self.settings,
            count_message=self.count_message(),
            count_text=self.count_text(),
            estimate_message=self.estimate_message(),
            summarize=None if background else self.summarize(),
            summarizer_input_tokens=self.summarizer_input_tokens,
            background=background,
            spacing=self.spacing(summaries_ahead=background),
        )

    def ahead(self, budget: Budget, start_at: int, tools: object) -> SummaryAhead | None:
        """What a background job needs to make a summary ahead for this conversation (None: no summarizer)."""
        summarize = self.summarize()
        if summarize is None:
            return None
        settings = self.settings.summarize
        stage = SummarizeStage(
            settings, summarize=summarize, count_text=self.count_text(), input_tokens=self.summarizer_input_tokens
        )
        in_place = self.wire is None or self.wire.spec.in_place_summaries
        own_model = settings.base_url is None and settings.model in (None, self.accounting.model) and in_place
        observation = observation_regex(self.settings.mask.observation_pattern)
        return SummaryAhead(
            start_at=start_at,
            wait_s=settings.wait_s,
            budget=budget,
            stage=stage,
            count_message=self.count_message(),
            observation=observation,
            in_place_model=self.accounting.model if own_model else None,
            tools=tools,
            spacing=self.spacing(summaries_ahead=True),
            tenant=self.spender,
            recent=recent_of(self.settings, observation),
        )


def with_instructions(summarize: Summarize, instructions: str) -> Summarize:
    """The summarizer, told the user's own instructions for the summary after its prompt."""

    async def instructed(job: SummaryJob) -> str:
        prompt = f"{job.prompt}\n\nThe user's own instructions for this summary (follow them): {instructions}"
        return await summarize(replace(job, prompt=prompt))

    return instructed


def reading_without_context(summarize: Summarize, tag: str) -> Summarize:
    """The summarizer, given the task and the messages without the agent's own context (the text of its `tag`
    elements, Claude Code's `<system-reminder>`s): the agent adds it again itself, so the summary need not say it."""

    async def read(job: SummaryJob) -> str:
        if job.in_place is not None:  # the conversation itself is the input: its bytes are the agent's
            return await summarize(job)
        return await summarize(
            replace(job, head=without_tagged(job.head, tag), transcript=without_tagged(job.transcript, tag))
        )

    return read


def budgeted(summarize: Summarize, budget: SummaryBudget, spender: str, tenant: str = "") -> Summarize:
    """`summarize`, with each call charged first to `spender`'s budget and the proxy's; if either is spent, the
    call is not made."""

    async def run(job: SummaryJob) -> str:
        if not budget.spend(spender, job.input_tokens, tenant=tenant):
            raise SummaryBudgetSpent(f"the summarizer budget of {spender[:40]} is spent")
        return await summarize(job)

    return run
