"""Everything between a parsed request and the bytes sent upstream: count, budget, compact, learn.

The server's handler and the `inflight count` / `inflight compact` / `inflight eval` commands all use
this one object, so they cannot disagree. It reads a request through its wire format (`inflight.formats`)
and passes the core only the format-neutral conversation. It makes no HTTP requests itself: model
discovery and the summarizer (`pipeline/summarizer.py`) are passed in as callables.
"""

from __future__ import annotations

import functools
import logging
from dataclasses import field, replace
from enum import StrEnum
from typing import Any

import orjson
from cachetools import LRUCache

from inflight.compaction import Budget, Conversation, ConversationCompactions, Outcome, conversation_key, head_length
from inflight.compaction.actions import Action
from inflight.compaction.background.scheduler import BackgroundSummaries
from inflight.compaction.conversation import identities_of
from inflight.compaction.prefix import CacheTurn, PrefixTracker, SentRequest, view_ids
from inflight.compaction.record import Precomputed, shadow_key
from inflight.compaction.retrieval import read_back
from inflight.config import Compaction, ModelSettings, Prices, Settings
from inflight.errors import ProxyError
from inflight.formats import UNROUTED, Target, WireFormat
from inflight.formats.retrieve_tool import shape_of
from inflight.formats.seam import TakenOver
from inflight.frozen import frozen
from inflight.metrics.observer import NO_OBSERVER, Observer
from inflight.offload import call_sized
from inflight.pipeline.accounting import Accounting, Counted
from inflight.pipeline.outgoing import MeasuredOnce, Prepared, as_sent, rewritten, shadowed, translated, unopened
from inflight.pipeline.parts import CompactionParts, SummarizerFactory, summarizer_window
from inflight.pipeline.retrieval import Originals, definition_tokens, may_offer
from inflight.policy.bracket import WindowBrackets
from inflight.policy.calibration import Calibration, Ratios
from inflight.policy.refusals import Refusal, agrees
from inflight.policy.reserve import OutputSizes
from inflight.policy.retry import RetryAim, retry_limit
from inflight.policy.tenants import BUDGET_ACTION, SummaryBudget, bounded_key, tenant_model_key, tenant_of
from inflight.policy.windows import ContextRegistry, FetchModels, budget_for, reserve_for
from inflight.records import open_record_store
from inflight.tokens import EncodingChoice, TokenCounter, choose_encoding
from inflight.tokens.text import counted_or_estimated
from inflight.upstream.headers import RawHeaders

log = logging.getLogger("inflight")
# How many tokens to count exactly, as a multiple of the window; more than 1 because a calibration ratio below 1
# lets more of our tokens fit.
EXACT_MARGIN = 1.25


class Mode(StrEnum):
    """How a request asks compaction to behave, overriding the config."""

    CONFIGURED = ""  # as the config says
    OFF = "off"  # forward untouched, never retry
    FORCE = "force"  # compact even if it fits
    SHADOW = "shadow"  # forward untouched, never retry; plan the compaction only to report what it would have sent
    ACTIVE = "active"  # compact as configured even if the config says shadow (`inflight eval` only, never a client)

    @classmethod
    def asked(cls, header: str) -> Mode:
        """The mode a client's `x-inflight-compaction` header asks for: `off`, `force` or `shadow`; any other value
        means the configured mode."""
        mode = header.strip().lower()
        return cls(mode) if mode in CLIENT_MODES else cls.CONFIGURED


@frozen
class Options:
    """What the client asked of the proxy for this request (the `x-inflight-*` request headers)."""

    mode: Mode = Mode.CONFIGURED
    session: str | None = None  # `x-inflight-session`: takes precedence over a session the body names
    session_hint: str | None = None  # the wire format's own session header: used only if the body names none
    # The client's `Authorization` and `x-api-key`: used by the summarizer when no key is configured, and to
    # identify the client (its tenant).
    credentials: RawHeaders = field(default_factory=list)
    client: str = ""  # the client's address: identifies its summarizer budget when it presents no key
    # The agent asked for its own compaction (`inflight.pipeline.handoff`): a turn waits for the summary it needs
    # as long as the summarizer may take, and the summarizer is given the user's own instructions for it, and not
    # the agent's own context (the text of its `context_tag` elements), which it adds again itself.
    agent_compaction: bool = False
    summary_instructions: str = ""
    context_tag: str = ""
    retrieval: str = ""  # `x-inflight-retrieval`: `off` or `tool` overrides `compaction.retrieval.mode` here
    goal: str = ""  # `x-inflight-goal`: `cost` or `fit` overrides `compaction.goal` here
    # The client's tenant: a digest of its key ("" if it presents none). Every step of a request (key, budget,
    # calibration) needs it, so it is hashed once, when the options are made.
    tenant: str = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "tenant", tenant_of(self.credentials))


# The modes that override a shadow config: a client's `off` (which does even less: nothing is planned), and
# `active`, which only `inflight eval` uses to measure what compaction would send. A client's `force` does not
# override it, because the operator chose shadow mode so that no byte changes.
OVERRULE_SHADOW = frozenset({Mode.OFF, Mode.ACTIVE})
CLIENT_MODES = frozenset({"off", "force", "shadow"})  # what a client may ask (`x-inflight-compaction`)
PREFIX_SHARE = 4  # the last request per conversation (`compaction.prefix`) may use a quarter of the records' bytes


class Pipeline:
    """One process's token counting, context windows, calibration and compaction records, and the steps using them.

    It owns that state; other code asks it through `stats()`, `degraded`, `record_usage()` and `aclose()`."""

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
        self._max_key_chars = settings.limits.max_key_chars  # longer model names are clipped and hashed as map keys
        self._counter = counter
        self._registry = registry
        self._calibration = calibration
        self._compactions = compactions
        self._summarizers = summarizers
        self._budget = budget  # the summarizer calls each client may cause (None: no bound)
        self._models: LRUCache[str, ModelSettings] = LRUCache(maxsize=4096)
        self._last_model: tuple[str, ModelSettings] | None = None  # the model asked last, and its config
        self._last_prices: tuple[str, str, Prices] | None = None  # the format and model asked last, and their prices
        # Per client and model: the upstream refused the request's own context management field.
        self._servers_lacking: LRUCache[str, bool] = LRUCache(maxsize=4096)
        # Per client and model: the upstream refused a prompt for leaving the reply less than its `max_tokens`.
        self._output_counted: LRUCache[str, bool] = LRUCache(maxsize=4096)
        # Each conversation's request sent last, to tell what the next one's prompt cache serves.
        self._prefixes = PrefixTracker(settings.compaction.cache.max_bytes // PREFIX_SHARE)
        # The largest prompt each model answered and the smallest it refused without numbers, per client.
        self._brackets = WindowBrackets(self._max_key_chars)
        # The output tokens of each model's recent answers, per client: used as the reply's reserve when the
        # request's own output limit does not count against the window.
        self._outputs = OutputSizes(self._max_key_chars)
        # What compaction took out, per tenant, for the model to read back (`inflight_retrieve`).
        self._originals = Originals(settings.compaction.retrieval)

    def model_settings(self, model: str) -> ModelSettings:
        """The config for `model`; cached because matching the globs is slow and it is asked several times a request.
        The model asked last is kept apart from the cache's bookkeeping: a request asks the same one each time."""
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
        """Whether the shared record store has failed, so records are kept in this process only until it recovers."""
        return self._compactions.degraded

    def stats(self) -> dict[str, object]:
        """What this process has learned (calibration, windows) and its background summaries' queue."""
        return {
            "calibration": self._calibration.report(),
            "learned_windows": self._registry.learned(),
            "window_brackets": self._brackets.report(),
            "summary_jobs": self._compactions.job_stats(),
            "retrieval": self._originals.stats(),
            "rewrites": self._prefixes.rewrites(),
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
        """Learn from an answer: the upstream counted `actual` prompt tokens where we counted `estimate`, and wrote
        `output` tokens.

        `fixed` is the fixed part of the estimate (`Prepared.sent_fixed`). This calibrates `model` for the client's
        `tenant` (`Options.tenant`), records that the window holds at least that prompt, and that a reply needs
        about that much room."""
        self._calibration.record(model, estimate=estimate, actual=actual, fixed=fixed, tenant=tenant)
        self._brackets.accepted(model, actual, tenant=tenant)
        if output is not None:
            self._outputs.record(model, output, tenant=tenant)

    def retrieves(self, counted: Counted, options: Options) -> bool:
        """Whether this request, if compacted, offers `inflight_retrieve` (`compaction.retrieval`): never in shadow
        mode, nor when the client's header turns it off or the request offers no tools."""
        settings = self.model_settings(counted.model).compaction.retrieval
        offers = may_offer(counted, settings, asked=options.retrieval)
        return offers and not self._shadows(counted, options)

    def read_back(self, arguments: str, *, model: str, tenant: str, room: int | None = None) -> str:
        """What one `inflight_retrieve` call of the client `tenant`'s conversation is answered with (never raises),
        within `room` tokens of ours (None: only `compaction.retrieval.max_chars` bounds it)."""
        settings = self.model_settings(model).compaction.retrieval
        count = functools.partial(self.text_tokens, model)
        try:
            return self._originals.answer(
                arguments, tenant=tenant, max_chars=settings.max_chars, room=room, count=count
            )
        except Exception:  # a bug of ours: the model is told, and the request goes on
            log.exception("[retrieval] a call could not be answered")
            return read_back(None, arguments, max_chars=settings.max_chars)

    def room_left(
        self, payload: dict[str, Any], *, counted: Counted, accounting: Accounting, limit: int, tenant: str
    ) -> int | None:
        """The tokens of ours a continuation `payload` of the request `counted` leaves within `limit` (the upstream's
        units); None when it cannot be counted."""
        again = self.count(b"", payload, counted.wire, tenant=tenant)
        return None if again is None else accounting.own_units(limit) - again.count.total

    def retrieve_tool_tokens(self, counted: Counted, options: Options) -> int:
        """What `inflight_retrieve`'s definition adds to this request once compacted (0: it is not offered)."""
        return definition_tokens(counted, self._counter) if self.retrieves(counted, options) else 0

    def retrieval_rounds(self, model: str) -> int:
        """How many rounds of calls one turn may answer (`compaction.retrieval.max_rounds`)."""
        return self.model_settings(model).compaction.retrieval.max_rounds

    def retrieval_calls(self, model: str) -> int:
        """How many calls of one round are read back (`compaction.retrieval.max_calls`)."""
        return self.model_settings(model).compaction.retrieval.max_calls

    async def aclose(self) -> None:
        """Stop the background summaries and close the record store."""
        await self._compactions.aclose()

    async def summarizer_window(self, settings: Compaction, model: str, *, ask: bool = True) -> int:
        """The window of the model that summarizes `model`'s conversations (see `parts.summarizer_window`)."""
        return await summarizer_window(self._summarizers, self._registry, settings, model, ask=ask)

    def _scheduled_by_cost(self, counted: Counted, settings: Compaction, *, tenant: str) -> bool:
        """Whether this request's compactions are scheduled by cost (`compaction.schedule: cost`).

        Not when the client named its own compaction point: inflight then summarizes there."""
        return settings.schedule == "cost" and self._client_compact_at(counted, tenant=tenant) is None

    def _client_compact_at(self, counted: Counted, *, tenant: str) -> int | None:
        """The compaction point the client named (`context_management`'s `compact_threshold`), if inflight does
        the client's context management instead of the upstream; else None."""
        return counted.request.compact_at if self.takes_over_server_compaction(counted, tenant=tenant) else None

    def _prices(self, counted: Counted) -> Prices:
        """What the upstream bills for this request's prompt tokens (`pricing:`, by its format and model); the
        prices asked last are kept, as they are asked twice a request."""
        wire, model = counted.wire.spec.name, counted.model
        last = self._last_prices
        if last is not None and last[0] == wire and last[1] == model:
            return last[2]
        prices = self.settings.pricing.for_request(wire, model)
        self._last_prices = (wire, model, prices)
        return prices

    def text_tokens(self, model: str, text: str) -> int:
        """`text` counted with `model`'s encoding (estimated from its length if the tokenizer fails)."""
        return counted_or_estimated(self._counter.encoding(self.encoding_for(model).name), text)

    def count(
        self,
        raw: bytes,
        payload: dict[str, Any],
        wire: WireFormat,
        *,
        target: Target = UNROUTED,
        tenant: str = "",
        exact: bool = False,
    ) -> Counted | None:
        """Count the request of the client `tenant`; None if `wire` cannot read it. `target` is what its path says.

        CPU only, so it may run in a thread. Only the newest window's worth of tokens is counted exactly
        (`exact_tokens`), unless `exact` is set (`inflight count`)."""
        request = wire.read(payload, target, tenant=tenant)
        if request is None:
            return None
        choice = self.encoding_for(request.model)
        try:
            exact_tokens = None if exact else self._exact_tokens(request.model)
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

    def _exact_tokens(self, model: str) -> int:
        """How many of a request's newest tokens to count exactly: the model's currently known window (without
        discovery) times EXACT_MARGIN.

        Any compaction drops the older tokens, so estimating them is enough. If the window turns out larger,
        the compaction counts exactly what it keeps of them (`Compactor`)."""
        return int(self._registry.resolve(model).context_window * EXACT_MARGIN)

    def encoding_for(self, model: str) -> EncodingChoice:
        return choose_encoding(model, self.model_settings(model).encoding)

    def discovers(self, counted: Counted, options: Options) -> bool:
        """Whether to look up the model's window in the upstream's model list before accounting this request.

        Never for a request that is only shadowed or not compacted: the call would go with the client's key
        though nothing it was sent for needs the window (the report then uses `models:` or the default); nor for a
        format whose upstream has no `/v1/models` list (Gemini's)."""
        if not counted.wire.spec.model_list:
            return False
        return self.compacts(counted, options) and self._registry.discovers(counted.model)

    async def discover(self, fetch_models: FetchModels) -> None:
        """Read the models' windows from the upstream's model list (once per process; retried a minute after a
        failure)."""
        await self._registry.discover(fetch_models)

    def account(self, counted: Counted, *, tenant: str = "") -> Accounting:
        """The request's window, budget and calibration (the client `tenant`'s own), from what is known so far."""
        model = counted.model
        limits = self._registry.resolve(model, tenant=tenant)
        settings = self.model_settings(model).compaction
        budget = self._prompt_budget(counted, limits.context_window, tenant=tenant)
        ratios = Ratios() if counted.encoding.exact else self._calibration.ratios(model, tenant=tenant)
        compact_at = self._client_compact_at(counted, tenant=tenant)
        if compact_at is not None:  # inflight summarizes where the client wants its context compacted
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

    def _prompt_budget(self, counted: Counted, context_window: int, *, tenant: str = "") -> int:
        """The prompt's budget in `context_window`: the window minus the reply's reserve.

        It is capped at the largest prompt answered when a refusal gave no numbers (`inflight.policy.bracket`).
        The reserve is the request's output limit if the upstream counts it against the window. Otherwise (no
        limit given, or the upstream just stops the reply at the window) it is what this client's replies from
        the model have needed (`OutputSizes`), at most the configured reserve."""
        reserve_tokens = self.model_settings(counted.model).compaction.reserve_tokens
        asked = counted.request.output_limit
        counted_output = self._tenant_key(counted.model, tenant) in self._output_counted
        binding = counted.request.output_limit_binding or counted_output
        if asked is None or not binding:  # we choose the reply's room: the configured reserve, or what was needed
            reserve = reserve_for(None, reserve_tokens=reserve_tokens, context_window=context_window)
            needed = self._outputs.reserve(counted.model, tenant=tenant)
            asked = min(asked or reserve, reserve if needed is None else min(needed, reserve))
        budget = budget_for(asked, reserve_tokens=reserve_tokens, context_window=context_window)
        ceiling = self._brackets.ceiling(counted.model, tenant=tenant)
        return budget if ceiling is None else min(budget, ceiling)

    def asks_exact_count(self, counted: Counted, accounting: Accounting, options: Options) -> bool:
        """Whether to ask the upstream for an exact count (`messages.count_tokens: near`, `gemini.count_tokens`).

        Only if the format offers one and our estimate is within `count_tokens_band` of the budget from a
        compaction threshold. Never in shadow mode: the call would use the client's key and add a wait the
        client did not ask for."""
        config = self.settings.exact_counts(counted.wire.spec.name)
        if counted.wire.spec.exact_count is None or config.count_tokens != "near" or accounting.exact:
            return False
        if self._shadows(counted, options):
            return False
        settings = self.model_settings(counted.model).compaction
        points = [settings.prune_at, settings.summarize_at, 1.0, settings.summarize.background_at]
        band = config.count_tokens_band * accounting.budget
        estimate = accounting.prompt_tokens
        return any(abs(estimate - share * accounting.budget) <= band for share in points if share is not None)

    def with_exact_count(self, accounting: Accounting, tokens: int, *, tenant: str = "") -> Accounting:
        """The accounting redone with the upstream's count (`tokens`), which also calibrates the client `tenant`."""
        if accounting.raw_tokens <= 0 or tokens <= 0:
            return accounting
        estimate, fixed = accounting.raw_tokens, accounting.fixed_tokens
        self._calibration.record(accounting.model, estimate=estimate, actual=tokens, fixed=fixed, tenant=tenant)
        return accounting.counted_as(tokens)

    def _spender_of(self, options: Options, settings: Compaction) -> str:
        """Whose summarizer budget a request spends: its key, or its address.

        The key counts only if the proxy checks it (`access.keys`) or it pays for the summaries (the proxy holds no
        key, and the summarizer is the upstream, which gets the client's key). Otherwise a client could invent a new
        key for each request, so its address is used instead."""
        tenant = options.tenant
        pays = not self.settings.holds_key and settings.summarize.base_url is None
        if tenant and (self.settings.access.keys or pays):
            return f"key:{tenant}"
        return f"address:{options.client}"

    def takes_over_server_compaction(self, counted: Counted, *, tenant: str) -> bool:
        """Whether the request asks the upstream to compact or edit its context and inflight does it instead.

        It does when the config says so (`responses.context_management` or `messages.context_management` set to
        `inflight`), or when this model's upstream has refused the field to this client `tenant`."""
        if not counted.request.server_managed:
            return False
        lacking = self._tenant_key(counted.model, tenant) in self._servers_lacking
        return self.settings.manages_context(counted.wire.spec.name) or lacking

    async def _take_over(
        self, counted: Counted, accounting: Accounting, *, tenant: str
    ) -> tuple[Counted, dict[str, Any] | None]:
        """Do here what the request asks of the upstream's context management (the format's own edits), and remove
        that field from the request.

        The request is counted again (for the client `tenant`) if the edits changed the conversation."""

        def count(text: str) -> int:
            return accounting.calibrated_text(self.text_tokens(counted.model, text))

        wire = counted.wire

        def take_over() -> tuple[TakenOver, Counted | None]:
            taken = wire.take_over(counted.payload, prompt_tokens=accounting.prompt_tokens, count=count)
            if not taken.edited:  # the parsed conversation is still valid; only the field is gone
                return taken, None
            return taken, self.count(orjson.dumps(taken.payload), taken.payload, wire, tenant=tenant)

        try:  # edits walk the whole conversation: off the loop for a big one
            taken, recounted = await call_sized(take_over, counted.count.total)
        except ProxyError:  # the request asks what inflight does not do (too many edits): the client is told
            raise
        except Exception:  # a bug of ours: send the request as the client sent it, and let the upstream answer
            model = self._model_key(counted.model)
            log.exception("[context_management] could not take it over for %s; sent as it came", model)
            return counted, None
        return (recounted or replace(counted, payload=taken.payload)), taken.report

    def learn_no_server_compaction(self, model: str, *, tenant: str) -> None:
        """Note that `model`'s upstream refused server-side compaction to the client `tenant`, so inflight does that
        client's from now on."""
        self._servers_lacking[self._tenant_key(model, tenant)] = True

    def keepalive_after(self, model: str) -> float | None:
        """`model`'s `summarize.keepalive_after_s`: how long a streaming request may wait without sending anything."""
        return self.model_settings(model).compaction.summarize.keepalive_after_s

    def compacts(self, counted: Counted, options: Options) -> bool:
        """Whether this request may be rewritten and retried."""
        return self._plans(counted, options) and not self._shadows(counted, options)

    async def summary_ready(self, counted: Counted, options: Options) -> bool:
        """Whether a summary made ahead for this request's conversation is ready to use (never in shadow mode)."""
        return await self.summary_ahead(counted, options) is not None

    async def summary_ahead(self, counted: Counted, options: Options) -> Precomputed | None:
        """The summary made ahead for this request's conversation, if one is ready (never in shadow mode)."""
        if not self.compacts(counted, options):
            return None
        key = key_of(counted, options, max_chars=self._max_key_chars)
        return await self._compactions.summary_ahead(
            key, identities_of(counted.request.messages, counted.count.digests)
        )

    def plans(self, counted: Counted, options: Options) -> bool:
        """Whether this request's compaction is planned, either to be sent or, in shadow mode, only reported."""
        return self._plans(counted, options)

    def _plans(self, counted: Counted, options: Options) -> bool:
        """Whether this request's compaction is planned, either to be sent or only reported (`shadows`)."""
        enabled = self.model_settings(counted.model).compaction.enabled
        return enabled and options.mode != Mode.OFF and counted.request.compactable

    def reads_body(self, model: str | None, options: Options) -> bool:
        """Whether serving a request needs its body read: not when it is only shadowed or not compacted at all
        (`off`, compaction disabled), so a body inflight cannot read is then forwarded as sent. With no model
        (the body could not be parsed) the top-level `compaction:` decides."""
        if options.mode in (Mode.OFF, Mode.SHADOW):
            return False
        config = self.settings.compaction if model is None else self.model_settings(model).compaction
        return config.enabled and (options.mode in OVERRULE_SHADOW or config.mode != "shadow")

    def _shadows(self, counted: Counted, options: Options) -> bool:
        """Whether this request's compaction is planned and recorded but not sent.

        True if the client asks for it (`x-inflight-compaction: shadow`), or if the model's config does
        (`compaction.mode: shadow`) and the request asks for neither `off` nor `active` (`inflight eval`),
        which override it."""
        if options.mode == Mode.SHADOW:
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
        """The client's bytes if the request fits, else the compacted body; a bug of ours never fails the request.

        A `retry` aim replaces the accounted budget.
        """
        # In shadow mode the request's own context management field goes upstream as the client sent it.
        taken_over = self.takes_over_server_compaction(counted, tenant=options.tenant) and not self._shadows(
            counted, options
        )
        report = None
        if taken_over:  # the upstream must not see a field it cannot serve: compaction writes the body without it
            counted, report = await self._take_over(counted, accounting, tenant=options.tenant)
        prepared = await self._prepare(counted, accounting, options, retry=retry)
        if counted.request.expanded and not prepared.rewritten:
            prepared = translated(counted, prepared)  # the upstream cannot read the format's expanded form
        prepared = unopened(counted, prepared)
        if taken_over:
            if not prepared.rewritten:  # nothing compacted: send the client's body without the field
                prepared = replace(prepared, body=orjson.dumps(counted.payload), rewritten=True)
            prepared = replace(prepared, report=report).noted(context_management="inflight")
        if self.degraded and self.compacts(counted, options):
            prepared = replace(prepared, degraded=True).noted(state="degraded")
        return prepared

    async def _prepare(
        self, counted: Counted, accounting: Accounting, options: Options, *, retry: RetryAim | None
    ) -> Prepared:
        limit = retry.limit if retry is not None else accounting.budget
        shadow = self._shadows(counted, options)
        planned = self._plans(counted, options)
        if not planned or accounting.budget <= 0:
            untouched = as_sent(counted, accounting, limit=limit, shadow=shadow)
            # Where the budget is nothing, max_tokens alone fills the window, which compacting the prompt cannot
            # fix: forward it as sent, and let the upstream answer (or clamp max_tokens) as it sees fit.
            return untouched.noted(budget="none") if planned else untouched
        try:
            key = key_of(counted, options, max_chars=self._max_key_chars)
        except Exception as exc:  # a bug of ours must not cost the user the request
            return self._failed(as_sent(counted, accounting, limit=limit, shadow=shadow), exc, accounting.model)
        unchanged = functools.partial(as_sent, counted, accounting, limit=limit, shadow=shadow, key=key)  # as it came
        # Shadow plans are recorded under a key of their own; the archive keeps the conversation's key.
        plan_key = shadow_key(key) if shadow else key
        try:
            outcome = await self._compact(counted, accounting, options, key=plan_key, retry=retry, shadow=shadow)
        except Exception as exc:  # a bug of ours must not cost the user the request
            return self._failed(unchanged(), exc, accounting.model)
        scheduled = outcome.scheduled if outcome is not None else None
        if outcome is None or (outcome.actions == [Action.NONE] and outcome.fits):  # nothing changed
            measured = self._measured(counted, None, key=plan_key)
            return unchanged(measured=measured, prices=self._prices(counted), scheduled=scheduled)
        if shadow:  # send the client's bytes; report what would have been sent, and measure it for the cache
            plan = shadowed(unchanged(), accounting, outcome)
            return self._cache_figures(plan, counted, outcome, key=plan_key, scheduled=scheduled)
        retrieves = self.retrieves(counted, options)
        added = self.retrieve_tool_tokens(counted, options)  # counted by the compaction, never sent by the client
        sent = counted
        if retrieves:
            retrieves = self._keep_originals(counted, outcome, tenant=options.tenant)
            shape = shape_of(counted.wire)
            if retrieves and shape is not None:  # added on every compacted turn, the same bytes each time
                sent = replace(counted, payload=shape.with_tool(counted.payload))
        # The body is written from what was kept, which may be megabytes if compaction could not make it fit.
        prepared = await call_sized(
            lambda: rewritten(sent, accounting, outcome, limit=limit, key=key, added=added), outcome.tokens_after
        )
        if retrieves:  # compaction counted the tool's definition in the fixed part; so does calibration
            fixed = prepared.sent_fixed + added
            prepared = replace(prepared, retrieves=True, sent_fixed=fixed).noted(retrieval="offered")
        return self._cache_figures(prepared, counted, outcome, key=key, scheduled=scheduled)

    def _keep_originals(self, counted: Counted, outcome: Outcome, *, tenant: str) -> bool:
        """Keep what this compaction's placeholders name; False (no tool offered) if that fails."""
        try:
            self._originals.keep(counted, outcome, tenant=tenant)
        except Exception:  # a bug of ours: the request goes without the tool
            log.exception("[retrieval] the originals could not be kept; the request goes without the tool")
            return False
        return True

    def _failed(self, untouched: Prepared, exc: Exception, model: str) -> Prepared:
        """The client's bytes, sent as they came because compaction failed: logged, and said as `error`."""
        log.exception("[compaction] failed for %s; forwarding the request unchanged", self._model_key(model))
        failed = replace(untouched.plan, actions=(Action.ERROR,))
        untouched = untouched.noted(compaction_error=type(exc).__name__)
        if untouched.shadow:
            return replace(untouched, shadow_plan=failed).noted(shadow=Action.ERROR)
        return replace(untouched, plan=failed)

    def _cache_figures(
        self, prepared: Prepared, counted: Counted, outcome: Outcome | None, *, key: str, scheduled: Budget | None
    ) -> Prepared:
        """`prepared`, with a way to measure how much of it the upstream's prompt cache can serve.

        It is compared with the conversation's previous request (`inflight.compaction.prefix`); in shadow mode, with
        the previous plan, under its own `key`. The measurement is made when first asked, after the answer."""
        measured = self._measured(counted, outcome, key=key)
        return replace(prepared, measured=measured, prices=self._prices(counted), scheduled=scheduled)

    def _measured(self, counted: Counted, outcome: Outcome | None, *, key: str) -> MeasuredOnce:
        """How much of what is sent (the client's request, or `outcome`) the prompt cache serves, measured when
        first asked."""
        prefixes = self._prefixes

        def measure() -> CacheTurn:
            client = sent_request(counted, None)
            if outcome is None:
                return prefixes.observe(key, client)
            return prefixes.observe(key, sent_request(counted, outcome), client)

        return MeasuredOnce(measure)

    async def _compact(
        self,
        counted: Counted,
        accounting: Accounting,
        options: Options,
        *,
        key: str,
        retry: RetryAim | None,
        shadow: bool = False,
    ) -> Outcome | None:
        """Compact the request.

        In `shadow` mode no summary is requested unless `compaction.shadow_summaries` is set, and then only from a
        background job that no turn waits for, because planning must cost the client no time."""
        settings = self.model_settings(accounting.model).compaction
        count = counted.count
        request = counted.request
        conversation = Conversation(
            request.messages,
            count.messages,
            count.digests,
            count.fixed + self.retrieve_tool_tokens(counted, options),  # the tool a compacted request offers is fixed
            request.opaque,
            request.observations,
            count.approximated,
        )
        own_units = accounting.own_units(retry.limit if retry else accounting.budget)  # in our own token units
        by_cost = self._scheduled_by_cost(counted, settings, tenant=options.tenant)
        goal = (options.goal or settings.goal) if by_cost else "fit"  # compacting early needs the cost model
        if goal != settings.goal:
            settings = settings.model_copy(update={"goal": goal})
        fixed = conversation.fixed_tokens
        budget = Budget.exactly(own_units) if retry and retry.blind else Budget.of(own_units, settings, fixed=fixed)
        force = options.mode == Mode.FORCE  # a retry need not force: the request it retries is already over its limit
        summarizers = None if shadow and not settings.shadow_summaries else self._summarizers
        background = self._compactions.background and summarizers is not None
        background_at = settings.summarize.background_at
        background = background and (background_at is not None or shadow)  # shadow mode never waits for a summary
        start_at = int(budget.limit * background_at) if background and background_at is not None else budget.prune_at
        start_at = min(start_at, budget.first_at)  # with `goal: cost`, a summary may be due long before prune_at
        # Below both thresholds no summary is close, so the summarizer's window need not be asked; and a
        # conversation never compacted here needs nothing else either.
        first_at = min(budget.first_at, start_at)
        due = force or conversation.tokens > first_at
        if not due and self._compactions.needs_nothing(key, conversation.tokens, first_at):
            return None
        # Shadow mode makes no request to the summarizer's endpoint on a client's turn, not even for its window.
        summary_window = await self.summarizer_window(settings, accounting.model, ask=due and not shadow)
        # A client over its summarizer budget (or the proxy over its own) is not summarized: the ledger is used.
        spent = self._budget is not None and due and not self._budget.allows(self._spender_of(options, settings))
        if settings.retrieval.mode != "off" and not self.retrieves(counted, options):  # no handles to name
            settings = settings.model_copy(update={"retrieval": settings.retrieval.model_copy(update={"mode": "off"})})
        parts = CompactionParts(
            settings=settings,
            accounting=accounting,
            counter=self._counter,
            summarizers=None if spent else summarizers,
            client_credentials=options.credentials,
            summarizer_input_tokens=int(summary_window / accounting.ratio),
            wire=counted.wire,
            budget=self._budget,
            spender=self._spender_of(options, settings),
            tenant=options.tenant,
            prices=self._prices(counted) if by_cost else None,
            instructions=options.summary_instructions,
            context_tag=options.context_tag,
        )
        # No background job for a retry (the original turn started any needed) or for a request below every threshold.
        wanted = background and due and not retry
        ahead = parts.ahead(budget, start_at, counted.request.view.get("tools")) if wanted else None
        if force and ahead is not None:  # asked for by the client: its summary covers the recent work too
            ahead = replace(ahead, recent=None)
        if shadow and ahead is not None:
            ahead = replace(ahead, wait_s=0)
        elif options.agent_compaction and ahead is not None:  # the agent waits for its summary in any case
            ahead = replace(ahead, wait_s=max(ahead.wait_s, settings.summarize.timeout_s))
        compactor = functools.partial(parts.compactor, background=background)
        outcome = await self._compactions.compact(
            key, conversation, compactor=compactor, budget=budget, force=force, ahead=ahead
        )
        if (
            spent
            and outcome is not None
            and Action.FALLBACK in outcome.actions
            and BUDGET_ACTION not in outcome.actions
        ):
            outcome.actions.append(BUDGET_ACTION)
        return outcome

    def believes(
        self, counted: Counted, accounting: Accounting, refusal: Refusal, prepared: Prepared, *, tenant: str = ""
    ) -> bool:
        """Whether a refusal's numbers agree with the request it refused and with what this client `tenant` had
        answered (`inflight.policy.refusals.agrees`), so that it may be learned from and retried."""
        sent = accounting.calibrated(prepared.sent_tokens)
        answered = self._brackets.largest_answered(accounting.model, tenant=tenant)
        return agrees(refusal, sent=sent, output_limit=counted.request.output_limit, answered=answered)

    def learn(
        self, counted: Counted, accounting: Accounting, refusal: Refusal, prepared: Prepared, *, tenant: str = ""
    ) -> RetryAim:
        """Learn from a context-too-long refusal and return the (calibrated) budget to compact the retry to.

        What it teaches (the window, that the reply's room counts, a calibration) is the client `tenant`'s alone."""
        learned_budget = None
        sent = accounting.calibrated(prepared.sent_tokens)
        if refusal.counts_output:  # this upstream counts the whole output limit: reserve all of it from now on
            self._output_counted[self._tenant_key(accounting.model, tenant)] = True
        if refusal.context_window:
            self._registry.learn(accounting.model, refusal.context_window, tenant=tenant)
            learned_budget = self._prompt_budget(counted, refusal.context_window, tenant=tenant)
        elif not refusal.prompt_tokens and sent:  # no numbers: the window lies between what was answered and this
            self._brackets.refused(accounting.model, sent, tenant=tenant)
        # Calibrate only from a full count, not one estimated from samples.
        if refusal.prompt_tokens and prepared.sent_tokens and not prepared.approximate:
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

    def _tenant_key(self, model: str, tenant: str) -> str:
        return tenant_model_key(model, tenant, self._max_key_chars)


def build_pipeline(
    settings: Settings,
    *,
    summarizers: SummarizerFactory | None,
    background: bool = False,
    budgeted: bool | None = None,
    observer: Observer = NO_OBSERVER,
) -> Pipeline:
    """A pipeline with fresh state (counts, windows, calibration, records), for the server or a command.

    `background`: summaries are made by background jobs (the server); a command makes them inline.
    `budgeted`: clients' summarizer calls are limited (`limits.summarizer`); by default the server's are and a
    command's are not (`inflight eval` may make many, on the operator's own behalf).
    `observer`: receives record lookups, job counts and store errors (the server's metrics)."""
    jobs = None
    if background:
        summarize = settings.compaction.summarize
        idle_s = settings.compaction.cache.ttl_s
        jobs = BackgroundSummaries(max_running=summarize.max_concurrent_jobs, idle_s=idle_s, observer=observer)
    records = open_record_store(settings.state, settings.compaction.cache, observer=observer)
    limited = background if budgeted is None else budgeted
    return Pipeline(
        settings,
        counter=TokenCounter(),
        registry=ContextRegistry(settings),
        calibration=Calibration(max_key_chars=settings.limits.max_key_chars),
        compactions=ConversationCompactions(records, jobs, observer=observer),
        summarizers=summarizers,
        budget=SummaryBudget(settings.limits.summarizer, on_spend=observer.summarizer_spent) if limited else None,
    )


def sent_request(counted: Counted, outcome: Outcome | None) -> SentRequest:
    """What the request sends, as the prompt cache sees it: the client's messages or the compacted ones."""
    count = counted.count
    if outcome is None:
        return SentRequest.untouched(count.digests, count.messages, fixed=count.fixed)
    view = zip(outcome.messages, outcome.sent_counts, outcome.sent_origins, strict=True)
    ids = view_ids(view, count.digests, outcome.record.replaced)
    return SentRequest.of(ids, outcome.sent_counts, fixed=count.fixed, client=count.digests)


def key_of(counted: Counted, options: Options, *, max_chars: int = 256) -> str:
    """The conversation key: the client's session (from its header, else the body), else its model and head.

    The scope holds the client's tenant and the request's tools (`conversation_key`). A session or model name
    longer than `max_chars` (`limits.max_key_chars`) is clipped and followed by a digest of the whole."""
    head = counted.count.digests[: head_length(counted.request.messages)]
    request, hint = counted.request, options.session_hint
    session = options.session or (hint if counted.wire.spec.session_header_first else None) or request.session or hint
    return conversation_key(
        session=bounded_key(session, max_chars) if session else None,
        model=bounded_key(counted.model, max_chars),
        head_digests=head,
        tenant=options.tenant,
        # Only an in-place summary (Chat Completions') is sent with the tools. In other formats a change of tools
        # (an MCP server connecting, Claude Code's deferred tools) keeps the same conversation key.
        sent_with=counted.count.tools_digest if counted.wire.spec.in_place_summaries else "",
    )
