"""Everything between a parsed request and the bytes sent upstream: count, budget, compact, learn.

The server's handler and the `inflight count` / `inflight compact` / `inflight eval` commands go
through this one object, so they cannot disagree. It reads a request through its wire format
(`inflight.formats`) and hands the core only the core's conversation. It makes no HTTP request of
its own: model discovery and the summarizer (`pipeline/summarizer.py`) are passed in as callables.
"""

from __future__ import annotations

import functools
import logging
from dataclasses import dataclass, field, replace
from typing import Any

import orjson
import xxhash
from cachetools import LRUCache

from inflight.compaction import Budget, Conversation, ConversationCompactions, Outcome, conversation_key, head_length
from inflight.compaction.background.scheduler import BackgroundSummaries
from inflight.compaction.prefix import CacheTurn, PrefixTracker, SentRequest, view_ids
from inflight.compaction.record import shadow_key
from inflight.config import Compaction, ModelSettings, Prices, Settings
from inflight.formats import WireFormat
from inflight.metrics.observer import NO_OBSERVER, Observer
from inflight.offload import call_sized
from inflight.pipeline.accounting import Accounting, Counted
from inflight.pipeline.outgoing import Prepared, as_sent, rewritten, shadowed, translated
from inflight.pipeline.parts import CompactionParts, SummarizerFactory, summarizer_window
from inflight.policy.bracket import WindowBrackets
from inflight.policy.calibration import Calibration, Ratios
from inflight.policy.refusals import Refusal
from inflight.policy.reserve import OutputSizes
from inflight.policy.retry import RetryAim, retry_limit
from inflight.policy.tenants import BUDGET_ACTION, SummaryBudget, bounded_key, tenant_of
from inflight.policy.windows import ContextRegistry, FetchModels, budget_for, reserve_for
from inflight.records import open_record_store
from inflight.tokens import EncodingChoice, TokenCounter, choose_encoding
from inflight.tokens.text import counted_or_estimated
from inflight.upstream.headers import RawHeaders

log = logging.getLogger("inflight")
EXACT_MARGIN = 1.25  # counted exactly: this much more than the window (a calibration ratio below 1 needs more)


@dataclass(frozen=True)
class Options:
    """What the client asked of the proxy for this request (the `x-inflight-*` request headers)."""

    # "off": forward untouched, never retry; "force": compact even if it fits; "shadow": forward untouched,
    # never retry, and plan the compaction only to say what it would have sent (`compaction.mode: shadow`);
    # "active" (never from a client: `CLIENT_MODES`): compact as configured, even under a shadow config
    mode: str = ""
    session: str | None = None  # `x-inflight-session`: before any the body names
    session_hint: str | None = None  # the wire format's own session header: after the body's
    # The client's `Authorization` and `x-api-key`, for the summarizer when no key is configured; and who it is.
    credentials: RawHeaders = field(default_factory=list)
    client: str = ""  # the client's address: whose summarizer budget it spends when it presents no key

    @functools.cached_property
    def tenant(self) -> str:
        """The digest of the client's key ("": it presents none): its conversations and calibration are its own.
        Asked by every step of a request (key, budget, calibration): hashed once."""
        return tenant_of(self.credentials)


# What overrules a shadow config: a client's `off` (less than shadow: nothing planned), and `active`, which only
# `inflight eval` asks (it measures what compaction sends). A client's `force` does not: the operator chose shadow
# mode so that no byte changes.
OVERRULE_SHADOW = frozenset({"off", "active"})
CLIENT_MODES = frozenset({"off", "force", "shadow"})  # what a client may ask (`x-inflight-compaction`)
PREFIX_SHARE = 4  # the requests sent last (`compaction.prefix`) may hold a quarter of the records' bytes


class Pipeline:
    """One process's counting, windows, calibration and compaction records, and the steps that use them.

    It owns that state: others ask it (`stats()`, `degraded`, `record_usage()`, `aclose()`)."""

    def __init__(
        self,
        settings: Settings,
        *,
        counter: TokenCounter,
        registry: ContextRegistry,
        calibration: Calibration,
        compactions: ConversationCompactions,
        summarizers: SummarizerFactory | None,
        budget: SummaryBudget | None = None,
    ) -> None:
        self.settings = settings
        self._max_key_chars = settings.limits.max_key_chars  # a model name longer keys a map clipped and hashed
        self._counter = counter
        self._registry = registry
        self._calibration = calibration
        self._compactions = compactions
        self._summarizers = summarizers
        self._budget = budget  # the summarizer calls each client may cause (None: no bound)
        self._models: LRUCache[str, ModelSettings] = LRUCache(maxsize=4096)
        self._last_model: tuple[str, ModelSettings] | None = None  # the model asked last, and its config
        self._last_prices: tuple[str, str, Prices] | None = None  # the format and model asked last, and their prices
        self._servers_lacking: LRUCache[str, bool] = LRUCache(maxsize=4096)  # models without server compaction
        # Models whose upstream refused a prompt for leaving the reply less than its `max_tokens`.
        self._output_counted: LRUCache[str, bool] = LRUCache(maxsize=4096)
        # Each conversation's request sent last, to tell what the next one's prompt cache serves.
        self._prefixes = PrefixTracker(settings.compaction.cache.max_bytes // PREFIX_SHARE)
        # The largest prompt each model answered and the smallest it refused without numbers, per client.
        self._brackets = WindowBrackets(self._max_key_chars)
        # The output tokens of each model's recent answers, per client: the reply's reserve where it is not binding.
        self._outputs = OutputSizes(self._max_key_chars)

    def model_settings(self, model: str) -> ModelSettings:
        """The config for `model` (a glob walk, so cached: it is asked several times a request, the same model each
        time, so the one asked last is kept apart from the cache's bookkeeping)."""
        last = self._last_model
        if last is not None and last[0] == model:
            return last[1]
        key = bounded_key(model, self._max_key_chars)
        found = self._models.get(key)
        if found is None:
            found = self._models[key] = self.settings.for_model(model)
        self._last_model = (model, found)
        return found

    @property
    def degraded(self) -> bool:
        """The shared record store failed: records are this process's alone until it is back."""
        return self._compactions.degraded

    def stats(self) -> dict[str, object]:
        """What this process has learned (calibration, windows) and its background summaries' queue."""
        return {
            "calibration": self._calibration.report(),
            "learned_windows": self._registry.learned(),
            "window_brackets": self._brackets.report(),
            "summary_jobs": self._compactions.job_stats(),
        }

    def record_usage(
        self,
        model: str,
        *,
        estimate: int,
        actual: int,
        fixed: int = 0,
        tenant: str = "",
        output: int | None = None,
    ) -> None:
        """The upstream answered: it counted `actual` prompt tokens where we counted `estimate` (`fixed` of it tool
        definitions and reply priming, `Prepared.sent_fixed`), and wrote `output` tokens. Calibrates `model` for the
        client's `tenant` (`Options.tenant`), and says the window holds at least that prompt and the reply
        needs about that room."""
        self._calibration.record(model, estimate=estimate, actual=actual, fixed=fixed, tenant=tenant)
        self._brackets.accepted(model, actual, tenant=tenant)
        if output is not None:
            self._outputs.record(model, output, tenant=tenant)

    async def aclose(self) -> None:
        """Stop the background summaries and close the record store."""
        await self._compactions.aclose()

    async def summarizer_window(self, settings: Compaction, model: str, *, ask: bool = True) -> int:
        """The window of the model that summarizes `model`'s conversations (see `parts.summarizer_window`)."""
        return await summarizer_window(self._summarizers, self._registry, settings, model, ask=ask)

    def scheduled_by_cost(self, counted: Counted, settings: Compaction) -> bool:
        """Whether this request's compactions come when they cost least: by its config, unless the client named
        its own compaction point, which is where inflight summarizes."""
        return settings.schedule == "cost" and self.client_compact_at(counted) is None

    def client_compact_at(self, counted: Counted) -> int | None:
        """The compaction point the client named (`context_management`'s `compact_threshold`), when inflight
        takes its context management over (None: it named none, or the upstream does it)."""
        return counted.request.compact_at if self.takes_over_server_compaction(counted) else None

    def prices(self, counted: Counted) -> Prices:
        """What the upstream bills for this request's prompt tokens (`pricing:`, by its format and model); the
        prices asked last are kept, as it is asked twice a request."""
        wire, model = counted.wire.name, counted.model
        last = self._last_prices
        if last is not None and last[0] == wire and last[1] == model:
            return last[2]
        prices = self.settings.pricing.for_request(wire, model)
        self._last_prices = (wire, model, prices)
        return prices

    def text_tokens(self, model: str, text: str) -> int:
        """`text` counted with `model`'s encoding (estimated from its size where the tokenizer fails)."""
        return counted_or_estimated(self._counter.encoding(self.encoding_for(model).name), text)

    def count(self, raw: bytes, payload: dict[str, Any], wire: WireFormat, *, exact: bool = False) -> Counted | None:
        """The request counted, or None when it is none `wire` can count. CPU only: may run in a thread.
        Only the newest window's worth is counted exactly (`exact_tokens`) unless `exact` (`inflight count`)."""
        request = wire.read(payload)
        if request is None:
            return None
        choice = self.encoding_for(request.model)
        try:
            exact_tokens = None if exact else self.exact_tokens(request.model)
            count = self._counter.count_request(request.view, choice.name, exact_tokens=exact_tokens)
        except Exception as exc:  # e.g. nested deeper than orjson writes (254) though it reads it (1024)
            log.warning(
                "[tokens] cannot count this %s request (%s: %s); forwarding it as sent",
                self._model_key(request.model),
                type(exc).__name__,
                exc,
            )
            return None
        return Counted(raw, payload, wire, request, choice, count)

    def exact_tokens(self, model: str) -> int:
        """How many of a request's newest tokens to count exactly: more than its model's window as known now
        (without discovery), by EXACT_MARGIN. What is older is dropped by any compaction, so it is estimated;
        should the window turn out bigger, the compaction counts what it keeps of it (`Compactor`)."""
        return int(self._registry.resolve(model).context_window * EXACT_MARGIN)

    def encoding_for(self, model: str) -> EncodingChoice:
        return choose_encoding(model, self.model_settings(model).encoding)

    async def account(self, counted: Counted, fetch_models: FetchModels | None, *, tenant: str = "") -> Accounting:
        """The request's window, budget and calibration (the client `tenant`'s own); `fetch_models` None: no
        discovery (offline)."""
        model = counted.model
        if fetch_models is None:
            limits = self._registry.resolve(model)
        else:
            limits = await self._registry.resolve_async(model, fetch_models)
        settings = self.model_settings(model).compaction
        budget = self.budget(counted, limits.context_window, tenant=tenant)
        ratios = Ratios() if counted.encoding.exact else self._calibration.ratios(model, tenant=tenant)
        compact_at = self.client_compact_at(counted)
        if compact_at is not None:  # where the client wants its context compacted: where inflight summarizes
            budget = min(budget, int(compact_at / settings.summarize_at))
        return Accounting(
            model=model,
            encoding=counted.encoding.name,
            exact=counted.encoding.exact,
            limits=limits,
            budget=budget,
            raw_tokens=counted.count.total,
            ratio=ratios.text,
            estimated=counted.count.estimated,
            approximated=len(counted.count.approximated),
            fixed_tokens=counted.count.fixed,
            fixed_ratio=ratios.fixed,
        )

    def budget(self, counted: Counted, context_window: int, *, tenant: str = "") -> int:
        """The prompt's budget in `context_window`: the window less the reply's reserve, and no more than the
        largest prompt answered below a refusal without numbers (`inflight.policy.bracket`). The reserve is what
        the request asks when the upstream counts it against the window; else (it asks none, or the upstream
        stops the reply at the window) what this client's answers from the model have needed (`OutputSizes`),
        at most the configured reserve."""
        reserve_tokens = self.model_settings(counted.model).compaction.reserve_tokens
        asked = counted.request.output_limit
        binding = counted.request.output_limit_binding or self._model_key(counted.model) in self._output_counted
        if asked is None or not binding:  # the reply's room is ours to guess: the configured one, or what was needed
            reserve = reserve_for(None, reserve_tokens=reserve_tokens, context_window=context_window)
            needed = self._outputs.reserve(counted.model, tenant=tenant)
            asked = min(asked or reserve, reserve if needed is None else min(needed, reserve))
        budget = budget_for(asked, reserve_tokens=reserve_tokens, context_window=context_window)
        ceiling = self._brackets.ceiling(counted.model, tenant=tenant)
        return budget if ceiling is None else min(budget, ceiling)

    def asks_exact_count(self, counted: Counted, accounting: Accounting, options: Options) -> bool:
        """Whether to ask the upstream's exact count (`messages.count_tokens: near`): the format has one,
        and our estimate is within `count_tokens_band` of the budget of a threshold it decides on. Never in
        shadow mode: that would be a call on the client's key, and a wait, that the client did not make."""
        config = self.settings.messages
        if counted.wire.count_path is None or config.count_tokens != "near" or accounting.exact:
            return False
        if self.shadows(counted, options):
            return False
        settings = self.model_settings(counted.model).compaction
        points = [settings.prune_at, settings.summarize_at, 1.0, settings.summarize.background_at]
        band = config.count_tokens_band * accounting.budget
        estimate = accounting.prompt_tokens
        return any(abs(estimate - share * accounting.budget) <= band for share in points if share is not None)

    def with_exact_count(self, accounting: Accounting, tokens: int, *, tenant: str = "") -> Accounting:
        """The request as the upstream counted it (`tokens`): this request's ratio, and the client `tenant`'s
        calibration learns it."""
        if accounting.raw_tokens <= 0 or tokens <= 0:
            return accounting
        estimate, fixed = accounting.raw_tokens, accounting.fixed_tokens
        self._calibration.record(accounting.model, estimate=estimate, actual=tokens, fixed=fixed, tenant=tenant)
        return accounting.counted_as(tokens)

    def spender_of(self, options: Options) -> str:
        """Whose summarizer budget a request spends: the key it presents when that key is one the proxy
        checks (`access.keys`) or the one that pays upstream (the proxy holds none); a key nobody checks
        while the operator's goes upstream could be made up anew each request: then its address."""
        tenant = options.tenant
        if tenant and (self.settings.access.keys or not self.settings.holds_upstream_key):
            return f"key:{tenant}"
        return f"address:{options.client}"

    def takes_over_server_compaction(self, counted: Counted) -> bool:
        """The request asks the upstream to compact or edit its context, and inflight does it instead: the
        config says so (`responses.context_management`, `messages.context_management`: inflight), or this
        model's upstream refused the field."""
        if not counted.request.server_managed:
            return False
        lacking = self._model_key(counted.model) in self._servers_lacking
        return self.settings.manages_context(counted.wire.name) or lacking

    async def take_over(self, counted: Counted, accounting: Accounting) -> tuple[Counted, dict[str, Any] | None]:
        """What the request asks of the upstream's context management, done here (the format's own edits),
        the request removed; counted again when the edits changed the conversation."""

        def count(text: str) -> int:
            return accounting.calibrated_text(self.text_tokens(counted.model, text))

        wire = counted.wire
        try:
            taken = wire.take_over(counted.payload, prompt_tokens=accounting.prompt_tokens, count=count)
        except Exception:  # a bug of ours: the request goes on as the client sent it, and the upstream answers
            model = self._model_key(counted.model)
            log.exception("[context_management] could not take it over for %s; sent as it came", model)
            return counted, None
        if not taken.edited:  # the view still holds, less the field
            return replace(counted, payload=taken.payload), taken.report
        raw = orjson.dumps(taken.payload)
        recounted = await call_sized(lambda: self.count(raw, taken.payload, wire), counted.count.total)
        return (recounted or replace(counted, payload=taken.payload)), taken.report

    def learn_no_server_compaction(self, model: str) -> None:
        """`model`'s upstream refused a request for server-side compaction: inflight takes them over."""
        self._servers_lacking[self._model_key(model)] = True

    def keepalive_after(self, model: str) -> float | None:
        """`summarize.keepalive_after_s` of `model`: how long a streaming request may wait silently."""
        return self.model_settings(model).compaction.summarize.keepalive_after_s

    def compacts(self, counted: Counted, options: Options) -> bool:
        """Whether this request may be rewritten and retried at all."""
        return self.plans(counted, options) and not self.shadows(counted, options)

    def plans(self, counted: Counted, options: Options) -> bool:
        """Whether this request's compaction is planned: to be sent, or only said (`shadows`)."""
        enabled = self.model_settings(counted.model).compaction.enabled
        return enabled and options.mode != "off" and counted.request.compactable

    def shadows(self, counted: Counted, options: Options) -> bool:
        """Whether this request's compaction is planned and recorded but not sent: the client asks it of this
        request (`x-inflight-compaction: shadow`), or its model's config does (`compaction.mode: shadow`) and
        the client asks nothing else of it (`force`, `off`, and the compact endpoint's own, still win)."""
        if options.mode == "shadow":
            return True
        return options.mode not in OVERRULE_SHADOW and self.model_settings(counted.model).compaction.mode == "shadow"

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
        # In shadow mode the request's own context management goes to the upstream as the client sent it.
        taken_over = self.takes_over_server_compaction(counted) and not self.shadows(counted, options)
        report = None
        if taken_over:  # the upstream must not see the request it cannot serve: compaction writes without it
            counted, report = await self.take_over(counted, accounting)
        prepared = await self._prepare(counted, accounting, options, retry=retry)
        prepared.report = report
        if counted.request.expanded and not prepared.rewritten:
            prepared = translated(counted, prepared)  # the upstream cannot read what the format expanded
        if taken_over:
            if not prepared.rewritten:  # nothing compacted: the client's body less the field
                prepared.body, prepared.rewritten = orjson.dumps(counted.payload), True
            prepared.fields["context_management"] = "inflight"
        if self.degraded and self.compacts(counted, options):
            prepared.headers["x-inflight-state"] = "degraded"
            prepared.fields["state"] = "degraded"
        return prepared

    async def _prepare(
        self, counted: Counted, accounting: Accounting, options: Options, *, retry: RetryAim | None
    ) -> Prepared:
        limit = retry.limit if retry is not None else accounting.budget
        untouched = as_sent(counted, accounting, limit=limit)
        shadow = self.shadows(counted, options)
        if shadow:
            untouched.shadow = True
            untouched.headers["x-inflight-compaction"] = "shadow"
            untouched.fields["shadow"] = "none"
        if not self.plans(counted, options):
            return untouched
        if accounting.budget <= 0:
            # max_tokens alone fills the window: not the prompt's fault. Forward it as sent; the upstream
            # answers (or clamps max_tokens) as it sees fit.
            untouched.fields["budget"] = "none"
            return untouched
        try:
            key = untouched.key = key_of(counted, options, max_chars=self._max_key_chars)
            plan_key = shadow_key(key) if shadow else key  # the archive keeps the conversation's own key
            outcome = await self.compact(counted, accounting, options, key=plan_key, retry=retry, shadow=shadow)
        except Exception as exc:  # a bug of ours must not cost the user the request
            model = self._model_key(accounting.model)
            log.exception("[compaction] failed for %s; forwarding the request unchanged", model)
            untouched.fields["compaction_error"] = type(exc).__name__
            if shadow:
                untouched.fields["shadow"] = untouched.headers["x-inflight-shadow-actions"] = "error"
            else:
                untouched.headers["x-inflight-actions"] = "error"
            return untouched
        untouched.scheduled = outcome.scheduled if outcome is not None else None
        if outcome is None or (outcome.actions == ["none"] and outcome.fits):  # nothing changed: the client's bytes
            return self.cache_figures(untouched, counted, None, key=plan_key)
        if shadow:  # the client's bytes go; what would have gone instead is said, and measured for the cache
            return self.cache_figures(shadowed(untouched, accounting, outcome), counted, outcome, key=plan_key)
        # Its body is written from what was kept: megabytes, when the compaction could not make it fit.
        prepared = await call_sized(
            lambda: rewritten(counted, accounting, outcome, limit=limit, key=key), outcome.tokens_after
        )
        prepared.scheduled = outcome.scheduled
        return self.cache_figures(prepared, counted, outcome, key=key)

    def cache_figures(self, prepared: Prepared, counted: Counted, outcome: Outcome | None, *, key: str) -> Prepared:
        """`prepared`, able to say what the upstream's prompt cache can serve of it against the conversation's
        previous request (`inflight.compaction.prefix`; shadow mode's plans against its previous plan, under their own
        `key`): worked out when first asked, after the answer."""
        prefixes = self._prefixes

        def measure() -> CacheTurn:
            client = sent_request(counted, None)
            if outcome is None:
                return prefixes.observe(key, client)
            return prefixes.observe(key, sent_request(counted, outcome), client)

        prepared.measure_cache = measure
        prepared.prices = self.prices(counted)
        return prepared

    async def compact(
        self,
        counted: Counted,
        accounting: Accounting,
        options: Options,
        *,
        key: str,
        retry: RetryAim | None,
        shadow: bool = False,
    ) -> Outcome | None:
        """The request's compaction. In `shadow`, no summary is asked unless `compaction.shadow_summaries`, and
        then only of a background job that no turn waits for: planning must cost the client no time."""
        settings = self.model_settings(accounting.model).compaction
        count = counted.count
        request = counted.request
        conversation = Conversation(
            request.messages,
            count.messages,
            count.digests,
            count.fixed,
            request.opaque,
            request.observations,
            count.approximated,
        )
        own_units = accounting.own_units(retry.limit if retry else accounting.budget)  # compaction's units
        budget = Budget.exactly(own_units) if retry and retry.blind else Budget.of(own_units, settings)
        force = options.mode == "force"  # a retry needs no push: what it retries is over its limit
        summarizers = None if shadow and not settings.shadow_summaries else self._summarizers
        background = self._compactions.background and summarizers is not None
        background_at = settings.summarize.background_at
        background = background and (background_at is not None or shadow)  # shadow mode never waits for a summary
        start_at = int(budget.limit * background_at) if background and background_at is not None else budget.prune_at
        due = force or conversation.tokens > min(budget.prune_at, start_at)  # else no summary is near: no need to ask
        if not due and not self._compactions.recorded(key):  # what `ConversationCompactions.compact` would answer
            return None
        # Shadow mode asks nothing of the summarizer's endpoint on a client's turn, not even its window.
        summary_window = await self.summarizer_window(settings, accounting.model, ask=due and not shadow)
        # A client past its summarizer budget (or the proxy past its own) is not summarized: the ledger stands in.
        spent = self._budget is not None and due and not self._budget.allows(self.spender_of(options))
        parts = CompactionParts(
            settings=settings,
            accounting=accounting,
            counter=self._counter,
            summarizers=None if spent else summarizers,
            client_credentials=options.credentials,
            summarizer_input_tokens=int(summary_window / accounting.ratio),
            wire=counted.wire,
            budget=self._budget,
            spender=self.spender_of(options),
            prices=self.prices(counted) if self.scheduled_by_cost(counted, settings) else None,
        )
        # No job for a retry (the turn it retries saw to that), nor for a request under every threshold.
        wanted = background and due and not retry
        ahead = parts.ahead(budget, start_at, counted.request.view.get("tools")) if wanted else None
        if shadow and ahead is not None:
            ahead = replace(ahead, wait_s=0)
        compactor = functools.partial(parts.compactor, background=background)
        outcome = await self._compactions.compact(
            key, conversation, compactor=compactor, budget=budget, force=force, ahead=ahead
        )
        if spent and outcome is not None and "fallback" in outcome.actions and BUDGET_ACTION not in outcome.actions:
            outcome.actions.append(BUDGET_ACTION)
        return outcome

    def learn(
        self, counted: Counted, accounting: Accounting, refusal: Refusal, prepared: Prepared, *, tenant: str = ""
    ) -> RetryAim:
        """Record what the refusal says (its count calibrates the client `tenant`'s ratio); the (calibrated)
        budget to compact the retry against."""
        learned_budget = None
        sent = accounting.calibrated(prepared.sent_tokens)
        if refusal.counts_output:  # this upstream wants the reply's whole room: from now on, it gets it
            self._output_counted[self._model_key(accounting.model)] = True
        if refusal.context_window:
            self._registry.learn(accounting.model, refusal.context_window)
            learned_budget = self.budget(counted, refusal.context_window, tenant=tenant)
        elif not refusal.prompt_tokens and sent:  # no numbers: what was sent and what was answered bracket the window
            self._brackets.refused(accounting.model, sent, tenant=tenant)
        if refusal.prompt_tokens and prepared.sent_tokens and not prepared.approximate:  # a count, not samples
            estimate, fixed, actual = prepared.sent_tokens, prepared.sent_fixed, refusal.prompt_tokens
            self._calibration.record(accounting.model, estimate=estimate, actual=actual, fixed=fixed, tenant=tenant)
        previous = accounting.budget if not prepared.rewritten else prepared.limit
        aim = retry_limit(
            previous=previous, learned_budget=learned_budget, sent=sent, upstream_prompt=refusal.prompt_tokens
        )
        answered = self._brackets.ceiling(accounting.model, tenant=tenant)
        if aim.blind and answered is not None and aim.limit < answered < sent:  # a larger prompt was answered
            return RetryAim(answered, blind=True)
        return aim

    def _model_key(self, model: str) -> str:
        return bounded_key(model, self._max_key_chars)


def build_pipeline(
    settings: Settings,
    *,
    summarizers: SummarizerFactory | None,
    background: bool = False,
    budgeted: bool | None = None,
    observer: Observer = NO_OBSERVER,
) -> Pipeline:
    """A pipeline with fresh state (counts, windows, calibration, records): the server's, or a command's.

    `background`: summaries are made by background jobs (the server); a command makes them in line.
    `budgeted`: clients' summarizer calls are bounded (`limits.summarizer`); by default the server's are,
    not a command's (`inflight eval` may make many, on the operator's own behalf).
    `observer`: told record lookups, job counts and store errors (the server's metrics)."""
    jobs = None
    if background:
        summarize = settings.compaction.summarize
        idle_s = settings.compaction.cache.ttl_s
        jobs = BackgroundSummaries(max_running=summarize.max_concurrent_jobs, idle_s=idle_s, observer=observer)
    records = open_record_store(settings.state, settings.compaction.cache, observer=observer)
    return Pipeline(
        settings,
        counter=TokenCounter(),
        registry=ContextRegistry(settings),
        calibration=Calibration(max_key_chars=settings.limits.max_key_chars),
        compactions=ConversationCompactions(records, jobs, observer=observer),
        summarizers=summarizers,
        budget=SummaryBudget(settings.limits.summarizer) if (background if budgeted is None else budgeted) else None,
    )


def sent_request(counted: Counted, outcome: Outcome | None) -> SentRequest:
    """What the request sends, as the prompt cache sees it: the client's messages, or the compacted ones."""
    count = counted.count
    if outcome is None:
        return SentRequest.of(b"".join(count.digests), count.messages, fixed=count.fixed, client=count.digests)
    view = zip(outcome.messages, outcome.sent_counts, outcome.sent_origins, strict=True)
    ids = view_ids(view, count.digests, outcome.record.replaced)
    return SentRequest.of(ids, outcome.sent_counts, fixed=count.fixed, client=count.digests)


def key_of(counted: Counted, options: Options, *, max_chars: int = 256) -> str:
    """The conversation's key: the client's session (its header, else the body's), else its model and head;
    the client's tenant and the request's tools in its scope (`conversation_key`). A session or a model
    longer than `max_chars` (`limits.max_key_chars`) is clipped, with a digest of the whole."""
    head = counted.count.digests[: head_length(counted.request.messages)]
    request, hint = counted.request, options.session_hint
    session = options.session or (hint if counted.wire.session_header_first else None) or request.session or hint
    return conversation_key(
        session=bounded_key(session, max_chars) if session else None,
        model=bounded_key(counted.model, max_chars),
        head_digests=head,
        tenant=options.tenant,
        # Only a summary asked in place is sent with the tools (Chat Completions'): a change of tools elsewhere
        # (an MCP server connecting, Claude Code's deferred tools) keeps the conversation.
        sent_with=tools_digest(request.view.get("tools")) if counted.wire.in_place_summaries else "",
    )


def tools_digest(tools: object) -> str:
    """A digest of the request's tools, which an in-place summary is sent with ("": none)."""
    if not tools:
        return ""
    try:
        canonical = orjson.dumps(tools, option=orjson.OPT_SORT_KEYS)
    except TypeError:  # nested deeper than orjson writes: its text will do
        canonical = repr(tools).encode("utf-8", "surrogatepass")
    return xxhash.xxh3_64_hexdigest(canonical)
