"""Rewrite a conversation so it fits: re-apply its record, then run the stages in order.

Messages go in and messages come out. Counting and summarizing are passed in as callables, so this module does no
HTTP. Token figures are in our own uncalibrated units; the caller converts the budget into them.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import replace

from inflight.compaction.actions import Action
from inflight.compaction.conversation import (
    Conversation,
    Message,
    head_length,
    latest_request_index,
    observation_regex,
)
from inflight.compaction.depth import Depth, Spacing
from inflight.compaction.draft import Budget, Draft
from inflight.compaction.middle import Recent, depth_of, kept_recent
from inflight.compaction.record import Record, Replacement
from inflight.compaction.stage import Outcome, Stage, Work
from inflight.compaction.stages import build_stages
from inflight.compaction.summary_job import Summarize
from inflight.config import Compaction


class Compactor:
    """Runs an ordered list of stages over a conversation, starting from its record if it has one."""

    def __init__(
        self,
        stages: Sequence[Stage],
        *,
        count_message: Callable[[Message], int],
        estimate_message: Callable[[Message], int] | None = None,
        observation: re.Pattern[str] | None = None,
        spacing: Spacing | None = None,
        handles: bool = False,
        recent: Recent | None = None,
    ) -> None:
        self.stages = list(stages)
        self.recent = recent  # the agent's recent work, sent verbatim whenever it fits (None: the latest turn only)
        self.handles = handles  # placeholders name handles (`inflight.compaction.retrieval`)
        self.spacing = spacing  # decides how deep a compaction goes (`inflight.compaction.depth`); None: to target
        self.count_message = count_message
        self.estimate_message = estimate_message  # cheap estimate for big text a stage may drop; None: count it
        self.observation = observation  # matches user messages that carry tool output rather than a request

    async def run(
        self, conversation: Conversation, *, budget: Budget, record: Record | None, force: bool = False
    ) -> Outcome | None:
        """Return the rewritten conversation, or None when it can go upstream unchanged."""
        before = conversation.tokens
        if record is None and before <= budget.first_at and not force:
            return None
        head_len = head_length(conversation.messages)
        draft = Draft.from_record(record, conversation) if record else Draft(head_len, head_len)
        actions: list[Action] = []
        if record is not None:
            actions += [Action.SUMMARY_CACHED] if record.summary is not None else []
            actions += sorted({Action(r.kind) for r in draft.replaced.values()})
        outcome = Outcome([], before, before, actions, record or draft.freeze(conversation), fits=True)
        latest = latest_request_index(conversation.messages, self.observation, conversation.observations)
        work = Work(
            conversation,
            draft,
            budget,
            outcome,
            self.count_message,
            estimate_message=self.estimate_message,
            force=force,
            latest_request=latest,
            handles=self.handles,
        )
        self.plan(work, record)
        budget = work.budget
        for stage in self.stages:
            await stage.run(work)
        if count_exactly(work) and work.tokens > budget.limit:  # the estimates were too low: run again on exact counts
            for stage in self.stages:
                await stage.run(work)
            count_exactly(work)
        conversation = work.conversation
        total = work.tokens
        view = draft.view(conversation)
        outcome.messages = [message for message, _, _ in view]
        outcome.sent_counts = [tokens for _, tokens, _ in view]
        outcome.sent_origins = [origin for _, _, origin in view]
        outcome.tokens_after = total
        outcome.record = draft.freeze(conversation)
        outcome.fits = total <= budget.limit
        if work.depth is not None and work.depth.schedule is not None:
            outcome.scheduled = schedule_by_cost(budget, work.depth, outcome.record)  # when the next one is due
        # Only a new compaction (this run removed something and did not just replay the record) can churn.
        changed = bool(outcome.actions) and (record is None or outcome.record != record)
        if changed and work.depth is not None and work.depth.churns(total):
            say_churn(outcome, work.depth, total)
        outcome.actions = list(dict.fromkeys(outcome.actions)) or [Action.NONE]
        return outcome

    def plan(self, work: Work, record: Record | None) -> None:
        """Decide whether truncate and mask are due, what recent work is kept whole, and how deep this goes."""
        budget, force = work.budget, work.force
        work.prune = force or work.tokens > recompact_at(budget, record)
        if self.recent is not None and not force:  # a forced compaction (one the client asked for) folds it all
            work.recent_from = kept_recent(work, self.recent, self.spacing.summarize if self.spacing else None)
        weighed = work.prune or work.draft.fallback or budget.earliest is not None
        if self.spacing is not None and budget.spaced and weighed:  # a compaction may run
            work.depth = depth_of(work, self.spacing)
            if work.depth.schedule is not None:
                work.budget = budget = schedule_by_cost(budget, work.depth, record)
                work.prune = force or work.tokens > recompact_at(budget, record)


def count_exactly(work: Work) -> bool:
    """Replace estimates with exact counts for the messages that will be sent (truncated outputs, old messages).

    This way every figure a record keeps and a request reports is an exact count. Returns True when any changed."""
    draft, conversation = work.draft, work.conversation
    changed = False
    for index in work.estimated:
        current = draft.replaced.get(index)
        if current is not None and current.kind == "truncate":
            tokens = work.count_message(current.message)
            draft.replaced[index] = Replacement(current.digest, current.message, tokens, "truncate")
            changed = True
    work.estimated.clear()
    kept = {origin for _, _, origin in draft.view(conversation) if origin is not None and origin not in draft.replaced}
    approximated = kept & conversation.approximated
    if approximated:
        counts = list(conversation.counts)
        for index in approximated:
            counts[index] = work.count_message(conversation.messages[index])
        work.conversation = replace(conversation, counts=counts, approximated=conversation.approximated - approximated)
        changed = True
    return changed


def say_churn(outcome: Outcome, depth: Depth, tokens: int) -> None:
    """Report that turns are too big for the window, so the next compaction comes sooner than configured.

    It appears in `x-inflight-actions` and on the request's log line, with the growth, turns left and floor."""
    outcome.actions.append(Action.CHURN)
    outcome.notes["growth"] = str(depth.growth)
    outcome.notes["turns_left"] = f"{depth.turns_left(tokens):.1f}"
    outcome.notes["floor"] = str(depth.floor)


def schedule_by_cost(budget: Budget, depth: Depth, record: Record | None) -> Budget:
    """Move the budget's thresholds to the point where compacting costs least per turn (`Depth.plan`).

    With `goal: fit`, a request below that point is sent with its record replayed, even if it is past `prune_at` or
    `summarize_at`. With `goal: cost`, it may come before them, and they are the latest it may come."""
    trigger = min(depth.trigger, budget.limit)
    if budget.earliest is not None:
        return replace(budget, prune_at=min(budget.prune_at, trigger), summarize_at=min(budget.summarize_at, trigger))
    if record is None or record.bare:  # the first compaction happens no earlier than prune_at
        return replace(budget, prune_at=max(budget.prune_at, trigger), summarize_at=max(budget.summarize_at, trigger))
    return replace(budget, summarize_at=max(budget.summarize_at, trigger))


def recompact_at(budget: Budget, record: Record | None) -> int:
    """Return the token count above which truncate and mask run again: prune_at without a record, else summarize_at.

    With a record, masking one more result each turn between the two thresholds would change last turn's
    request every turn and break the upstream's prompt cache, to save a few hundred tokens the request can afford.
    """
    return budget.prune_at if record is None or record.bare else budget.summarize_at


def build_compactor(
    settings: Compaction,
    *,
    count_message: Callable[[Message], int],
    count_text: Callable[[str], int],
    estimate_message: Callable[[Message], int] | None = None,
    summarize: Summarize | None,
    summarizer_input_tokens: int,
    background: bool = False,
    spacing: Spacing | None = None,
) -> Compactor:
    """Build a compactor with the stages a model's `compaction:` settings ask for.

    `spacing` sets how far apart compactions are and what a summary costs. When None, it is derived from the
    settings, and a summary counts as a summarizer call when `summarize` is given."""
    stages = build_stages(
        settings,
        summarize=summarize,
        count_text=count_text,
        summarizer_input_tokens=summarizer_input_tokens,
        background=background,
    )
    observation = observation_regex(settings.mask.observation_pattern)
    if spacing is None:
        spacing = Spacing(
            settings.summarize,
            settings.min_turns_between,
            summary_costs=summarize is not None,
            summaries_ahead=background,
        )
    return Compactor(
        stages,
        count_message=count_message,
        estimate_message=estimate_message,
        observation=observation,
        spacing=spacing,
        handles=settings.retrieval.mode != "off",
        recent=recent_of(settings, observation),
    )


def recent_of(settings: Compaction, observation: re.Pattern[str] | None) -> Recent:
    """The agent's recent work a model's `compaction:` settings keep whole (`observation`: their compiled
    `mask.observation_pattern`)."""
    mask = settings.mask
    return Recent(
        settings.summarize.keep_recent_tokens, mask.keep_tool_results, observation, mask.keep_tool_results_min
    )
