"""What the pipeline gives the server: the body to send upstream, what was done to it, and its log fields."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import field, replace
from typing import Any

from inflight.compaction import Budget, Outcome
from inflight.compaction.actions import Action
from inflight.compaction.prefix import CacheTurn
from inflight.compaction.report import CacheFigures, Plan, TurnReport
from inflight.config import Prices
from inflight.frozen import frozen
from inflight.pipeline.accounting import Accounting, Counted

log = logging.getLogger("inflight")


class MeasuredOnce:
    """How much of a request the prompt cache serves, compared with the conversation's previous request
    (`inflight.compaction.prefix`).

    It is measured once, when first asked (after the answer, for the log line)."""

    def __init__(self, measure: Callable[[], CacheTurn] | None = None) -> None:
        self._measure = measure
        self._turn: CacheTurn | None = None

    def get(self) -> CacheTurn | None:
        """The figures, or None if not measured or if measuring failed.

        A bug of ours in measuring loses only the figures, not the log line or the archive's turn."""
        measure, self._measure = self._measure, None
        if measure is not None:
            try:
                self._turn = measure()
            except Exception:
                log.exception("[cache] the prompt cache's figures could not be worked out")
        return self._turn


@frozen(slots=True)
class Prepared:
    """The body to send upstream and what the proxy reports about it."""

    body: bytes
    rewritten: bool
    sent_tokens: int  # our uncalibrated count of what is sent, for calibration
    limit: int  # the budget it was prepared against
    plan: Plan  # what was done to it: its actions, tokens before and after
    fields: dict[str, object] = field(default_factory=dict)  # for the request's log line
    outcome: Outcome | None = None
    too_long: str | None = None  # why it cannot fit even compacted; the body is our best effort and is sent anyway
    key: str = ""  # the conversation key, set once compaction has looked at the request (the archive reuses it)
    # The context management inflight did for the upstream (Anthropic's `context_management.applied_edits`),
    # to be written into the answer.
    report: dict[str, Any] | None = None
    approximate: bool = False  # `sent_tokens` is partly estimated from samples (a huge request sent unchanged)
    sent_fixed: int = 0  # the fixed part of `sent_tokens` (tool definitions and reply priming), for calibration
    # Shadow mode: `body` is the client's own, and `outcome` is what compaction would have sent instead. That is
    # reported in the `x-inflight-shadow-*` headers, the log line, the metrics and the archive, but never sent.
    shadow: bool = False
    shadow_plan: Plan | None = None  # shadow mode: what compaction would have done
    degraded: bool = False  # the shared record store is failing
    measured: MeasuredOnce = field(default_factory=MeasuredOnce, repr=False, compare=False)
    prices: Prices | None = None  # what the upstream bills for it (`pricing:`), for the cost figures
    scheduled: Budget | None = None  # when scheduled by cost: the thresholds it was compared with (our units)
    retrieves: bool = False  # `inflight_retrieve` was added: the edge answers the model's calls to it

    @property
    def cache(self) -> CacheTurn | None:
        """The prompt cache's figures, measured on first use (None if not measured)."""
        return self.measured.get()

    def noted(self, **fields: object) -> Prepared:
        """A copy with more fields for the log line."""
        return replace(self, fields=self.fields | fields)

    def cache_figures(self) -> CacheFigures | None:
        """The prompt cache's figures for the report: the cached share, whether the proxy rewrote the history,
        and the cost of what was sent and of the client's own request."""
        turn = self.cache
        if turn is None:
            return None
        if self.prices is None:
            return CacheFigures(turn.share, turn.rewrite)
        # Estimated, in units of one uncached input token: what is sent, and what the client's request would cost.
        cost = round(turn.cost(self.prices))
        unchanged = turn.client_tokens == turn.tokens and turn.client_cached == turn.cached  # sent as it came
        client = cost if unchanged else round(turn.client_cost(self.prices))
        return CacheFigures(turn.share, turn.rewrite, cost=cost, cost_client=client)

    def turn_report(self, accounting: Accounting) -> TurnReport:
        """The turn's report for this body: its window, what was done to it, and in shadow mode the plan."""
        return TurnReport(
            window=accounting.window(),
            sent=self.plan,
            shadow=self.shadow_plan,
            shadow_mode=self.shadow,
            degraded=self.degraded,
        )

    def follows(self, refused: Prepared) -> None:
        """Mark this as the retry of `refused`, so what its compaction dropped is measured against the record
        from before both attempts."""
        if self.outcome is not None and refused.outcome is not None and refused.outcome.fresh:
            self.outcome.previous = refused.outcome.previous


def as_sent(
    counted: Counted,
    accounting: Accounting,
    *,
    limit: int,
    shadow: bool = False,
    key: str = "",
    measured: MeasuredOnce | None = None,
    prices: Prices | None = None,
    scheduled: Budget | None = None,
) -> Prepared:
    """The client's own bytes, reported as untouched (in shadow mode, with nothing planned yet), with how to
    measure the prompt cache's figures, the prices they are billed at and the thresholds compared, when known."""
    plan = Plan.untouched(accounting.calibrated(counted.count.total))
    total, fixed, approximate = counted.count.total, counted.count.fixed, bool(counted.count.approximated)
    fields: dict[str, object] = {"shadow": "none"} if shadow else {}
    return Prepared(
        counted.raw,
        False,
        total,
        limit,
        plan,
        fields,
        key=key,
        approximate=approximate,
        sent_fixed=fixed,
        shadow=shadow,
        measured=measured if measured is not None else MeasuredOnce(),
        prices=prices,
        scheduled=scheduled,
    )


def translated(counted: Counted, untouched: Prepared) -> Prepared:
    """Nothing was compacted, but the body holds inflight's own compaction items, which only inflight can read.

    The format rewrites those in a form the upstream reads, and leaves the rest as it came."""
    body = counted.wire.write(counted.payload, counted.request, counted.request.messages)
    plan = replace(untouched.plan, actions=(Action.EXPANDED,))
    return replace(untouched, body=body, rewritten=True, plan=plan, fields=untouched.fields | {"actions": "expanded"})


def unopened(counted: Counted, prepared: Prepared) -> Prepared:
    """What was sent, saying that some of inflight's own compaction items could not be opened (sealed with another
    key): their summaries are lost, and a note went upstream in their place."""
    if not counted.request.unopened or Action.ITEM_UNREADABLE in prepared.plan.actions:
        return prepared
    plan = prepared.plan.with_action(Action.ITEM_UNREADABLE)
    return replace(prepared, plan=plan, fields=prepared.fields | {"actions": plan.said()})


def rewritten(
    counted: Counted, accounting: Accounting, outcome: Outcome, *, limit: int, key: str, added: int = 0
) -> Prepared:
    """The compacted body, with the plan and log fields that describe what was done to it (`added`: the tokens of
    what inflight adds, its tool's definition, which the compaction counted but the client did not send)."""
    plan, fields = described(accounting, outcome, limit=limit, key=key, added=added)
    too_long = None
    if not outcome.fits:
        before, after = plan.tokens_before, plan.tokens_after
        too_long = (
            f"This request needs at least {after:,} prompt tokens after compaction (it had {before:,}), but "
            f"{accounting.model} allows {limit:,} ({accounting.limits.context_window:,}-token context window "
            "minus the tokens reserved for the reply). Shorten the system prompt, the tools or the last message."
        )
    body = counted.wire.write(counted.payload, counted.request, outcome.messages)
    fixed = counted.count.fixed  # compaction keeps the tools
    return Prepared(body, True, outcome.tokens_after, limit, plan, fields, outcome, too_long, key, sent_fixed=fixed)


def shadowed(untouched: Prepared, accounting: Accounting, outcome: Outcome) -> Prepared:
    """Shadow mode: the client's own bytes, sent and counted unchanged, plus what compaction would have sent.

    That is reported as the report's shadow plan and the log line's `shadow=` (its actions) and `compacted=`
    fields. No compacted body is written, since nobody would read it."""
    plan, fields = described(accounting, outcome, limit=untouched.limit, key=untouched.key)
    fields = {"shadow": fields.pop("actions")} | fields
    return replace(untouched, fields=untouched.fields | fields, outcome=outcome, shadow=True, shadow_plan=plan)


def described(
    accounting: Accounting, outcome: Outcome, *, limit: int, key: str, added: int = 0
) -> tuple[Plan, dict[str, object]]:
    """The plan and log fields that describe what a compaction did (or, in shadow mode, would have done). Before is
    what the client sent, without the `added` tokens of inflight's own; after is what went upstream."""
    before = accounting.calibrated(outcome.tokens_before - added)
    after = accounting.calibrated(outcome.tokens_after)
    # The id of this compaction, or of the one whose stored record this request replays (the archive's id).
    plan = Plan(tuple(outcome.actions), before, after, outcome.compaction_id or None)
    fields: dict[str, object] = {
        "actions": plan.said(),
        "compaction": outcome.compaction_id or "-",
        "compacted": f"{before}->{after}/{limit}",
        "key": key[:48],
        "replaced": outcome.messages_replaced,
        "summarizer_calls": outcome.summarizer_calls,
        "summarizer_ms": f"{outcome.summarizer_ms:.0f}" if outcome.summarizer_ms is not None else "-",
    }
    return plan, fields | outcome.notes
