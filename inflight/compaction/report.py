"""What one turn did, typed: the edge renders it into the `x-inflight-*` headers and the log line, and
the metrics and the archive read it as it is, so no reader parses a header back."""

from __future__ import annotations

from dataclasses import field, replace

from inflight.compaction.actions import NOT_COMPACTIONS, Action
from inflight.frozen import frozen


@frozen(slots=True)
class Window:
    """The request measured against its model's window: the prompt, the window, and the prompt's budget."""

    prompt_tokens: int
    context_window: int
    budget: int
    estimated: bool = False  # counted with a stand-in tokenizer: an estimate

    def headers(self) -> dict[str, str]:
        headers = {
            "x-inflight-prompt-tokens": str(self.prompt_tokens),
            "x-inflight-context-window": str(self.context_window),
            "x-inflight-budget": str(self.budget),
        }
        if self.estimated:
            headers["x-inflight-count"] = "estimate"
        return headers


@frozen(slots=True)
class Plan:
    """What a compaction did to a request (or, in shadow mode, would have done), in the upstream's tokens."""

    actions: tuple[Action, ...]
    tokens_before: int
    tokens_after: int
    compaction_id: str | None = None  # the archive's id of the compaction made or replayed

    @classmethod
    def untouched(cls, tokens: int) -> Plan:
        return cls((Action.NONE,), tokens, tokens)

    @property
    def compacted(self) -> bool:
        """Whether its tokens before and after are a compaction's (not only `none`, `retry` or `error`)."""
        return not NOT_COMPACTIONS.issuperset(self.actions)

    def with_action(self, action: Action) -> Plan:
        return replace(self, actions=(*self.actions, action))

    def said(self) -> str:
        return ",".join(self.actions)


@frozen(slots=True)
class CacheFigures:
    """What the upstream's prompt cache serves of the request, and what it costs (`inflight.compaction.prefix`)."""

    share: float  # the cached share of the prompt
    rewrite: bool  # the prompt's cached prefix was rewritten by a compaction
    cost: int | None = None  # in units of one uncached input token (None: no prices)
    cost_client: int | None = None  # the same for the client's own request, as if inflight were not there


@frozen(slots=True)
class TurnReport:
    """Everything a request's handling says about itself: in the headers, the log line, the metrics, the archive."""

    window: Window | None = None
    sent: Plan | None = None  # what was sent (None: nothing was counted)
    shadow: Plan | None = None  # shadow mode: what would have been sent instead
    shadow_mode: bool = False
    retried: bool = False
    degraded: bool = False  # the shared record store is failing: records are this process's own
    cache: CacheFigures | None = field(default=None, compare=False)  # known once the answer is out
    # `inflight_retrieve` calls the proxy answered for this turn: with an original, and "unavailable".
    retrieved: int = 0
    unavailable: int = 0

    def with_cache(self, cache: CacheFigures | None) -> TurnReport:
        """This report with the prompt cache's figures (built field by field: this runs once a request)."""
        return TurnReport(
            self.window,
            self.sent,
            self.shadow,
            self.shadow_mode,
            self.retried,
            self.degraded,
            cache,
            self.retrieved,
            self.unavailable,
        )

    def headers(self) -> dict[str, str]:
        """The `x-inflight-*` headers for the client."""
        headers = self.window.headers() if self.window is not None else {}
        if self.sent is not None:
            headers["x-inflight-tokens-before"] = str(self.sent.tokens_before)
            headers["x-inflight-tokens-after"] = str(self.sent.tokens_after)
            headers["x-inflight-actions"] = self.sent.said()
            if self.sent.compaction_id:
                headers["x-inflight-compaction-id"] = self.sent.compaction_id
        if self.shadow_mode:
            headers["x-inflight-compaction"] = "shadow"
        if self.shadow is not None:
            headers["x-inflight-shadow-actions"] = self.shadow.said()
            headers["x-inflight-shadow-tokens-after"] = str(self.shadow.tokens_after)
            if self.shadow.compaction_id:
                headers["x-inflight-shadow-compaction-id"] = self.shadow.compaction_id
        if self.degraded:
            headers["x-inflight-state"] = "degraded"
        if self.retried:
            headers["x-inflight-retried"] = "1"
        return headers

    def cache_fields(self) -> dict[str, object]:
        """The prompt cache's figures for the log line; in shadow mode those of the plan, said apart."""
        figures = self.cache
        if figures is None:
            return {}
        prefix = "shadow_" if self.shadow_mode else ""
        fields: dict[str, object] = {f"{prefix}cached": f"{figures.share:.2f}"}
        if figures.rewrite:
            fields[f"{prefix}rewrite"] = 1
        if figures.cost is not None:
            fields[f"{prefix}cost"] = figures.cost
            fields[f"{prefix}cost_client"] = figures.cost_client
        return fields

    def shadow_answered(self) -> TurnReport:
        """This shadow turn's report, saying that the agent's own compaction request would have been answered."""
        planned = self.shadow or self.sent
        if planned is None:
            return self
        actions = tuple(action for action in planned.actions if action != Action.NONE)
        return replace(self, shadow=replace(planned, actions=(Action.ANSWERED_COMPACTION, *actions)))

    def retried_as(self, context_window: int | None, limit: int) -> TurnReport:
        """This report (the retry's own) as the retry of a refused request: `retry` added to what was sent, and
        the window the refusal named (None: it named none) with the `limit` the retry was compacted to."""
        sent = self.sent.with_action(Action.RETRY) if self.sent is not None else None
        window = self.window
        if window is not None:
            window = replace(window, context_window=context_window or window.context_window, budget=limit)
        return replace(self, window=window, sent=sent, retried=True)
