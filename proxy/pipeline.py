"""Everything between a parsed chat request and the bytes sent upstream: count, budget, compact.

The server's chat handler and the `inflight count` / `inflight compact` commands go through this
one object, so they cannot disagree. No HTTP here: model discovery and the summarizer are passed
in as callables.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Protocol

import orjson
from cachetools import LRUCache

from proxy.accounting import Accounting, Counted
from proxy.compaction import (
    Budget,
    Compactor,
    Conversation,
    ConversationCompactions,
    Outcome,
    Summarize,
    build_compactor,
    conversation_key,
    head_length,
    on_home_loop,
)
from proxy.config import Compaction, ModelSettings, Settings
from proxy.policy.calibration import Calibration
from proxy.policy.refusals import Refusal
from proxy.policy.retry import RetryAim, retry_limit
from proxy.policy.windows import ContextRegistry, FetchModels, budget_for
from proxy.state import open_record_store
from proxy.tokens import EncodingChoice, TokenCounter, choose_encoding
from proxy.tokens.text import counted_or_estimated

log = logging.getLogger("inflight")


class SummarizerFactory(Protocol):
    """The summarizer for one request: its model's compaction settings, its model, the client's key."""

    def __call__(self, options: Compaction, *, model: str, client_authorization: str | None) -> Summarize: ...

    async def window(self, options: Compaction, model: str) -> int | None:
        """The summarizer model's window as its own endpoint says (None: not a separate endpoint, or silent)."""
        ...


@dataclass(frozen=True)
class Options:
    """What the client asked of the proxy for this request (the `x-inflight-*` request headers)."""

    mode: str = ""  # "off": forward untouched, never retry; "force": compact even if it fits
    session: str | None = None
    authorization: str | None = None  # the client's, for the summarizer when no key is configured


@dataclass
class Prepared:
    """The body to send upstream and what the proxy says about it."""

    body: bytes
    rewritten: bool
    sent_tokens: int  # our uncalibrated count of what is sent, for calibration
    limit: int  # the budget it was prepared against
    headers: dict[str, str]
    fields: dict[str, object] = field(default_factory=dict)  # for the request's log line
    outcome: Outcome | None = None
    too_long: str | None = None  # why it cannot fit even compacted: the body is our best effort, sent anyway


class ChatPipeline:
    def __init__(
        self,
        settings: Settings,
        *,
        counter: TokenCounter,
        registry: ContextRegistry,
        calibration: Calibration,
        compactions: ConversationCompactions,
        summarizers: SummarizerFactory | None,
    ) -> None:
        self.settings = settings
        self.counter = counter
        self.registry = registry
        self.calibration = calibration
        self.compactions = compactions
        self.summarizers = summarizers
        self._models: LRUCache[str, ModelSettings] = LRUCache(maxsize=4096)

    def model_settings(self, model: str) -> ModelSettings:
        """The config for `model` (a glob walk, so cached: it is asked several times a request)."""
        found = self._models.get(model)
        if found is None:
            found = self._models[model] = self.settings.for_model(model)
        return found

    def count(self, raw: bytes, payload: dict[str, Any]) -> Counted | None:
        """The request counted, or None when it is no chat request we can count. CPU only: may run in a thread."""
        model = payload.get("model")
        messages = payload.get("messages")
        if not isinstance(model, str) or not is_message_list(messages):
            return None
        choice = self.encoding_for(model)
        try:
            return Counted(raw, payload, model, choice, self.counter.count_request(payload, choice.name))
        except Exception as exc:  # e.g. nested deeper than orjson writes (254) though it reads it (1024)
            log.warning(
                "[tokens] cannot count this %s request (%s: %s); forwarding it as sent", model, type(exc).__name__, exc
            )
            return None

    def encoding_for(self, model: str) -> EncodingChoice:
        return choose_encoding(model, self.model_settings(model).encoding)

    async def account(self, counted: Counted, fetch_models: FetchModels | None) -> Accounting:
        """The request's window, budget and calibration; `fetch_models` None: no discovery (offline)."""
        model = counted.model
        if fetch_models is None:
            limits = self.registry.resolve(model)
        else:
            limits = await self.registry.resolve_async(model, fetch_models)
        reserve_tokens = self.model_settings(model).compaction.reserve_tokens
        return Accounting(
            model=model,
            encoding=counted.encoding.name,
            exact=counted.encoding.exact,
            limits=limits,
            budget=budget_for(counted.payload, reserve_tokens=reserve_tokens, context_window=limits.context_window),
            raw_tokens=counted.count.total,
            ratio=1.0 if counted.encoding.exact else self.calibration.ratio(model),
            estimated=counted.count.estimated,
        )

    def compacts(self, model: str, options: Options) -> bool:
        """Whether this request may be rewritten and retried at all."""
        return self.model_settings(model).compaction.enabled and options.mode != "off"

    async def prepare(
        self,
        counted: Counted,
        accounting: Accounting,
        options: Options,
        *,
        retry: RetryAim | None = None,
    ) -> Prepared:
        """The client's bytes when the request fits; else the compacted body. Never fails for our own bugs.

        A `retry` aim replaces the accounted budget.
        """
        limit = retry.limit if retry is not None else accounting.budget
        untouched = as_sent(counted, accounting, limit=limit)
        if not self.compacts(counted.model, options):
            return untouched
        if accounting.budget <= 0:
            # max_tokens alone fills the window: not the prompt's fault. Forward it as sent; the upstream
            # answers (or clamps max_tokens) as it sees fit.
            untouched.fields["budget"] = "none"
            return untouched
        key = ""
        try:
            key = key_of(counted, options)
            outcome = await self.compact(counted, accounting, options, key=key, retry=retry)
        except Exception as exc:  # a bug of ours must not cost the user the request
            log.exception("[compaction] failed for %s; forwarding the request unchanged", accounting.model)
            untouched.fields["compaction_error"] = type(exc).__name__
            untouched.headers["x-inflight-actions"] = "error"
            return untouched
        if outcome is None or (outcome.actions == ["none"] and outcome.fits):  # nothing changed: the client's bytes
            return untouched
        return rewritten(counted, accounting, outcome, limit=limit, key=key)

    async def compact(
        self, counted: Counted, accounting: Accounting, options: Options, *, key: str, retry: RetryAim | None
    ) -> Outcome | None:
        settings = self.model_settings(accounting.model).compaction
        count = counted.count
        conversation = Conversation(counted.payload["messages"], count.messages, count.digests, count.fixed)
        own_units = int((retry.limit if retry else accounting.budget) / accounting.ratio)  # compaction's units
        budget = Budget.exactly(own_units) if retry and retry.blind else Budget.of(own_units, settings)
        force = options.mode == "force"  # a retry needs no push: what it retries is over its limit
        due = force or conversation.tokens > budget.prune_at  # else no summary can be due: no need to ask
        summary_window = await summarizer_window(self, settings, accounting.model, ask=due)

        def compactor() -> Compactor:
            summarize = None
            if self.summarizers is not None:
                authorization = options.authorization
                summarize = on_home_loop(
                    self.summarizers(settings, model=accounting.model, client_authorization=authorization)
                )
            # The summarizer's reply is bounded by max_summary_tokens, which the stages keep room for.
            encoding = self.counter.encoding(accounting.encoding)
            return build_compactor(
                settings,
                count_message=lambda message: self.counter.count_message(message, encoding),
                count_text=lambda text: counted_or_estimated(encoding, text),
                summarize=summarize,
                summarizer_input_tokens=int(summary_window / accounting.ratio),
            )

        return await self.compactions.compact(key, conversation, compactor=compactor, budget=budget, force=force)

    def learn(self, accounting: Accounting, refusal: Refusal, prepared: Prepared, payload: dict[str, Any]) -> RetryAim:
        """Record what the refusal says; the (calibrated) budget to compact the retry against."""
        learned_budget = None
        if refusal.context_window:
            self.registry.learn(accounting.model, refusal.context_window)
            reserve_tokens = self.model_settings(accounting.model).compaction.reserve_tokens
            learned_budget = budget_for(payload, reserve_tokens=reserve_tokens, context_window=refusal.context_window)
        if refusal.prompt_tokens and prepared.sent_tokens:
            self.calibration.record(accounting.model, estimate=prepared.sent_tokens, actual=refusal.prompt_tokens)
        previous = accounting.budget if not prepared.rewritten else prepared.limit
        return retry_limit(
            previous=previous,
            learned_budget=learned_budget,
            sent=accounting.calibrated(prepared.sent_tokens),
            upstream_prompt=refusal.prompt_tokens,
        )


async def summarizer_window(pipeline: ChatPipeline, settings: Compaction, model: str, *, ask: bool = True) -> int:
    """The summarizer's window: configured, else from its own endpoint when summaries go elsewhere (if
    `ask`), else as any model's. A summarizer is never sent more than this (`SummarizeStage.chunks`)."""
    model = settings.summarize.model or model
    if ask and pipeline.summarizers is not None and settings.summarize.base_url:
        found = await pipeline.summarizers.window(settings, model)
        if found is not None:
            return found
    return pipeline.registry.resolve(model).context_window


def is_message_list(messages: object) -> bool:
    return isinstance(messages, list) and all(isinstance(m, dict) for m in messages)


def as_sent(counted: Counted, accounting: Accounting, *, limit: int) -> Prepared:
    """The client's own bytes, with the headers that say nothing was done to them."""
    tokens = str(accounting.calibrated(counted.count.total))
    headers = accounting.headers() | {
        "x-inflight-tokens-before": tokens,
        "x-inflight-tokens-after": tokens,
        "x-inflight-actions": "none",
    }
    return Prepared(counted.raw, False, counted.count.total, limit, headers)


def rewritten(counted: Counted, accounting: Accounting, outcome: Outcome, *, limit: int, key: str) -> Prepared:
    """The compacted body, with the headers and log fields that say what was done to it."""
    before, after = accounting.calibrated(outcome.tokens_before), accounting.calibrated(outcome.tokens_after)
    actions = ",".join(outcome.actions)
    headers = accounting.headers() | {
        "x-inflight-tokens-before": str(before),
        "x-inflight-tokens-after": str(after),
        "x-inflight-actions": actions,
    }
    fields: dict[str, object] = {
        "actions": actions,
        "compacted": f"{before}->{after}/{limit}",
        "key": key[:48],
        "replaced": outcome.messages_replaced,
        "summarizer_calls": outcome.summarizer_calls,
        "summarizer_ms": f"{outcome.summarizer_ms:.0f}" if outcome.summarizer_ms is not None else "-",
    }
    fields |= outcome.notes
    too_long = None
    if not outcome.fits:
        too_long = (
            f"This request needs at least {after:,} prompt tokens after compaction (it had {before:,}), but "
            f"{accounting.model} allows {limit:,} ({accounting.limits.context_window:,}-token context window "
            "minus the tokens reserved for the reply). Shorten the system prompt, the tools or the last message."
        )
    body = orjson.dumps({**counted.payload, "messages": outcome.messages})
    return Prepared(body, True, outcome.tokens_after, limit, headers, fields, outcome, too_long)


def build_pipeline(settings: Settings, *, summarizers: SummarizerFactory | None) -> ChatPipeline:
    """A pipeline with fresh state (counts, windows, calibration, records): the server's, or a command's."""
    return ChatPipeline(
        settings,
        counter=TokenCounter(),
        registry=ContextRegistry(settings),
        calibration=Calibration(),
        compactions=ConversationCompactions(open_record_store(settings.compaction.cache)),
        summarizers=summarizers,
    )


def key_of(counted: Counted, options: Options) -> str:
    """The conversation's key: the client's session, else its model and head (system prompt and task)."""
    head = counted.count.digests[: head_length(counted.payload["messages"])]
    return conversation_key(session=options.session, model=counted.model, head_digests=head)
