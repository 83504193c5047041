"""The parts one request's compaction is built from: its model's settings, counting, the summarizer.

The pipeline decides whether and against what budget to compact; these build the compactor it
runs, and the background job's `SummaryAhead`, for that one request.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from proxy.compaction import Budget, Compactor, Summarize, SummaryAhead, build_compactor, on_home_loop
from proxy.compaction.conversation import Message, observation_regex
from proxy.compaction.stages import SummarizeStage
from proxy.config import Compaction
from proxy.pipeline.accounting import Accounting
from proxy.tokens.text import counted_or_estimated

if TYPE_CHECKING:
    from proxy.pipeline.engine import ChatPipeline, Options


async def summarizer_window(pipeline: ChatPipeline, settings: Compaction, model: str, *, ask: bool = True) -> int:
    """The summarizer's window: configured, else from its own endpoint when summaries go elsewhere (if
    `ask`), else as any model's. A summarizer is never sent more than this (`SummarizeStage.chunks`)."""
    model = settings.summarize.model or model
    if ask and pipeline.summarizers is not None and settings.summarize.base_url:
        found = await pipeline.summarizers.window(settings, model)
        if found is not None:
            return found
    return pipeline.registry.resolve(model).context_window


@dataclass
class CompactionParts:
    """What one request's compaction is built from: its model's settings, counting and summarizer."""

    pipeline: ChatPipeline
    settings: Compaction
    accounting: Accounting
    options: Options
    summarizer_input_tokens: int  # the summarizer's window, in our units

    def summarize(self) -> Summarize | None:
        factory = self.pipeline.summarizers
        if factory is None:
            return None
        made = factory(self.settings, model=self.accounting.model, client_authorization=self.options.authorization)
        return on_home_loop(made)  # called from a worker thread's loop, it still runs on this one

    def count_message(self) -> Callable[[Message], int]:
        counter, encoding = self.pipeline.counter, self.pipeline.counter.encoding(self.accounting.encoding)
        return lambda message: counter.count_message(message, encoding)

    def count_text(self) -> Callable[[str], int]:
        encoding = self.pipeline.counter.encoding(self.accounting.encoding)
        return lambda text: counted_or_estimated(encoding, text)

    def compactor(self, *, background: bool) -> Compactor:
        # The summarizer's reply is bounded by max_summary_tokens, which the stages keep room for.
        return build_compactor(
            self.settings,
            count_message=self.count_message(),
            count_text=self.count_text(),
            summarize=None if background else self.summarize(),
            summarizer_input_tokens=self.summarizer_input_tokens,
            background=background,
        )

    def ahead(self, budget: Budget, start_at: int, tools: object) -> SummaryAhead | None:
        """What a background summary job of this conversation needs (None: no summarizer)."""
        summarize = self.summarize()
        if summarize is None:
            return None
        settings = self.settings.summarize
        stage = SummarizeStage(
            settings, summarize=summarize, count_text=self.count_text(), input_tokens=self.summarizer_input_tokens
        )
        own_model = settings.base_url is None and settings.model in (None, self.accounting.model)
        return SummaryAhead(
            start_at=start_at,
            wait_s=settings.wait_s,
            budget=budget,
            stage=stage,
            count_message=self.count_message(),
            observation=observation_regex(self.settings.mask.observation_pattern),
            in_place_model=self.accounting.model if own_model else None,
            tools=tools,
        )
