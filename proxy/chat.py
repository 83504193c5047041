"""The chat-completions path: read once, count, compact if needed, send, relay."""

from __future__ import annotations

import asyncio
import logging
import math
import weakref
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import orjson
from starlette.requests import Request

from proxy.body import decode_content, parse_object
from proxy.compaction import (
    Budget,
    Compactor,
    Conversation,
    Outcome,
    RecordStore,
    SummaryJob,
    best_record,
    conversation_key,
    with_record,
)
from proxy.compaction.conversation import head_length
from proxy.config import Compaction, Settings
from proxy.errors import ContextTooLong, UpstreamUnreachable, upstream_errors
from proxy.forward import Relay, Timing, UpstreamClient, header_value, relay_response
from proxy.models import ContextRegistry, ModelLimits, budget_for
from proxy.pool import UpstreamResponse
from proxy.refusals import MAX_BODY as MAX_ERROR_BODY
from proxy.refusals import Refusal, detect, detect_event, first_event
from proxy.summarizer import Summarizer
from proxy.tokens import THREAD_THRESHOLD_BYTES, EncodingChoice, RequestCount, TokenCounter, choose_encoding
from proxy.usage import Calibration, UsageReader

log = logging.getLogger("inflight")


@dataclass(frozen=True)
class Accounting:
    """What one request costs against its model's window."""

    model: str
    encoding: str
    exact: bool  # the model's own tokenizer; otherwise an estimate corrected by calibration
    limits: ModelLimits
    budget: int
    raw_tokens: int  # our count before calibration
    ratio: float

    @property
    def prompt_tokens(self) -> int:
        return self.calibrated(self.raw_tokens)

    def calibrated(self, tokens: int) -> int:
        return tokens if self.ratio == 1.0 else math.ceil(tokens * self.ratio)

    def headers(self) -> dict[str, str]:
        return {
            "x-inflight-prompt-tokens": str(self.prompt_tokens),
            "x-inflight-context-window": str(self.limits.context_window),
            "x-inflight-budget": str(self.budget),
        }


@dataclass(frozen=True)
class Counted:
    """A chat request we can count: its model, the encoding it is counted with, and the count."""

    model: str
    encoding: EncodingChoice
    count: RequestCount


@dataclass(frozen=True)
class Parsed:
    payload: dict[str, Any]
    counted: Counted | None = None  # None: no chat request we can count (no model, odd messages)


@dataclass
class Prepared:
    """The body to send upstream and what the proxy says about it."""

    body: bytes
    rewritten: bool
    sent_tokens: int  # our uncalibrated count of what is sent, for calibration
    headers: dict[str, str]
    notes: list[str] = field(default_factory=list)
    limit: int = 0  # the budget it was prepared against


class ChatCompletions:
    def __init__(
        self,
        settings: Settings,
        upstream: UpstreamClient,
        *,
        counter: TokenCounter,
        registry: ContextRegistry,
        calibration: Calibration,
        records: RecordStore,
        summarizer_client: httpx.AsyncClient,
    ) -> None:
        self.settings = settings
        self.upstream = upstream
        self.counter = counter
        self.registry = registry
        self.calibration = calibration
        self.records = records
        self.summarizer_client = summarizer_client
        self._locks: weakref.WeakValueDictionary[str, asyncio.Lock] = weakref.WeakValueDictionary()

    async def handle(self, request: Request, timing: Timing) -> Relay:
        raw = await request.body()
        parsed = await self.read(raw, request.headers.get("content-encoding", ""))
        payload, counted = parsed.payload, parsed.counted
        model = payload.get("model")
        timing.model = model if isinstance(model, str) else "-"  # logged even when the request is not counted
        url = self.upstream.url_for(request.url.path, request.scope["query_string"])
        if counted is None:
            # Not ours to judge: the upstream answers whatever this is with its own error.
            response = await self.upstream.open("POST", url, headers=self.outgoing(request, False), content=raw)
            timing.upstream_answered()
            return relay_response(response, timing)
        count = counted.count
        accounting = await self.account(request, payload, counted)
        prepared = await self.prepare(request, raw, payload, accounting, count)
        timing.notes += prepared.notes
        response = await self.upstream.open(
            "POST", url, headers=self.outgoing(request, prepared.rewritten), content=prepared.body
        )
        if not self.retries(request, accounting):
            timing.upstream_answered()
            return self.relay_with_usage(response, timing, accounting, prepared)
        try:
            held = await hold_until_known(response, event_stream=payload.get("stream") is True, host=self.upstream.host)
        except BaseException:
            await response.aclose()
            raise
        if held.refusal is None:
            timing.upstream_answered()
            return self.relay_with_usage(response, timing, accounting, prepared, held=held)
        await response.aclose()
        limit = self.learn(accounting, held.refusal, prepared, payload)
        timing.notes.append(f"refused_by={held.refusal.upstream}")
        retry = await self.prepare(request, raw, payload, accounting, count, budget=limit, force=True)
        retry.headers["x-inflight-actions"] = ",".join([*retry.headers["x-inflight-actions"].split(","), "retry"])
        retry.headers["x-inflight-retried"] = "1"
        timing.notes += [*retry.notes, "retried"]
        headers = self.outgoing(request, retry.rewritten)
        response = await self.upstream.open("POST", url, headers=headers, content=retry.body)
        timing.upstream_answered()
        return self.relay_with_usage(response, timing, accounting, retry)

    def retries(self, request: Request, accounting: Accounting) -> bool:
        settings = self.settings.compaction_for(accounting.model)
        return settings.enabled and request.headers.get("x-inflight-compaction", "").strip().lower() != "off"

    def learn(self, accounting: Accounting, refusal: Refusal, prepared: Prepared, payload: dict[str, Any]) -> int:
        """Record what the refusal says, and return the (calibrated) budget to compact the retry against."""
        previous = int(accounting.budget if not prepared.rewritten else prepared.limit)
        limit = previous
        if refusal.context_window:
            self.registry.learn(accounting.model, refusal.context_window)
            reserve_tokens = self.settings.compaction_for(accounting.model).reserve_tokens
            learned = budget_for(payload, reserve_tokens=reserve_tokens, context_window=refusal.context_window)
            limit = min(limit, learned)
        if refusal.prompt_tokens and prepared.sent_tokens:
            self.calibration.record(accounting.model, estimate=prepared.sent_tokens, actual=refusal.prompt_tokens)
            sent = accounting.calibrated(prepared.sent_tokens)
            if sent < refusal.prompt_tokens <= sent * 4:  # we undercounted: shrink by the same factor
                limit = int(limit * sent / refusal.prompt_tokens)
        if limit >= previous * 0.98:
            # No usable numbers (llama-cpp-python's empty stream): what we sent was too long, so aim at 75%
            # of the smaller of the budget and what was sent; 75% of a budget far above it would change nothing.
            limit = int(min(previous, accounting.calibrated(prepared.sent_tokens)) * 0.75)
        log.info(
            "[retry] %s refused by %s (window=%s prompt=%s); compacting again against %d tokens",
            accounting.model,
            refusal.upstream,
            refusal.context_window,
            refusal.prompt_tokens,
            limit,
        )
        return max(limit, 1)

    def outgoing(self, request: Request, rewritten: bool) -> list[tuple[bytes, bytes]]:
        return self.upstream.outgoing_headers(request.scope["headers"], rewrite_body=rewritten)

    async def read(self, raw: bytes, content_encoding: str) -> Parsed:
        """Parse and count; a large body both in one worker thread, so the loop keeps serving others."""
        if len(raw) > THREAD_THRESHOLD_BYTES:
            return await asyncio.to_thread(self.parse_and_count, raw, content_encoding)
        payload = parse_object(decode_content(raw, content_encoding))
        target = self.count_target(payload)
        if target is None:
            return Parsed(payload)
        count = await self.counter.count_request_async(payload, target[1].name, size_hint=len(raw))
        return Parsed(payload, Counted(*target, count))

    def parse_and_count(self, raw: bytes, content_encoding: str) -> Parsed:
        payload = parse_object(decode_content(raw, content_encoding))
        target = self.count_target(payload)
        if target is None:
            return Parsed(payload)
        return Parsed(payload, Counted(*target, self.counter.count_request(payload, target[1].name)))

    def count_target(self, payload: dict[str, Any]) -> tuple[str, EncodingChoice] | None:
        """The model and the encoding to count it with, or None when this is no chat request we can count."""
        model = payload.get("model")
        if not isinstance(model, str) or not _countable(payload.get("messages")):
            return None
        return model, choose_encoding(model, self.settings.encoding_override(model))

    async def account(self, request: Request, payload: dict[str, Any], counted: Counted) -> Accounting:
        model, choice = counted.model, counted.encoding
        credentials = self.upstream.credential_headers(request.scope["headers"])

        async def fetch_models() -> bytes:
            status, body = await self.upstream.fetch("/v1/models", headers=credentials)
            if status != 200:
                raise UpstreamUnreachable(f"GET /v1/models answered {status}")
            return body

        limits = await self.registry.resolve_async(model, fetch_models)
        compaction = self.settings.compaction_for(model)
        budget = budget_for(payload, reserve_tokens=compaction.reserve_tokens, context_window=limits.context_window)
        accounting = Accounting(
            model=model,
            encoding=choice.name,
            exact=choice.exact,
            limits=limits,
            budget=budget,
            raw_tokens=counted.count.total,
            ratio=1.0 if choice.exact else self.calibration.ratio(model),
        )
        log.info(
            "[context] %s %d/%d (%.0f%%) window=%d source=%s%s",
            model,
            accounting.prompt_tokens,
            accounting.budget,
            100 * accounting.prompt_tokens / max(accounting.budget, 1),
            limits.context_window,
            limits.source,
            "" if choice.exact else f" calibration={accounting.ratio:.3f}",
        )
        return accounting

    async def prepare(
        self,
        request: Request,
        raw: bytes,
        payload: dict[str, Any],
        accounting: Accounting,
        count: RequestCount,
        *,
        budget: int | None = None,
        force: bool = False,
    ) -> Prepared:
        """The original bytes when the request fits; else the compacted body. Never fails for our own bugs."""
        limit = budget if budget is not None else accounting.budget
        headers = accounting.headers() | _compaction_headers(accounting.calibrated(count.total))
        untouched = Prepared(raw, False, count.total, headers, limit=limit)
        settings = self.settings.compaction_for(accounting.model)
        mode = request.headers.get("x-inflight-compaction", "").strip().lower()
        if not settings.enabled or mode == "off":
            return untouched
        raw_limit = int(limit / accounting.ratio)  # compaction counts in our own units
        try:
            outcome = await self.compact(request, payload, accounting, count, raw_limit, force=force or mode == "force")
        except Exception as exc:  # a bug of ours must not cost the user the request
            log.exception("[compaction] failed for %s; forwarding the request unchanged", accounting.model)
            untouched.notes.append(f"compaction_error={type(exc).__name__}")
            untouched.headers["x-inflight-actions"] = "error"
            return untouched
        if outcome is None:
            return untouched
        if not outcome.fits:
            raise ContextTooLong(
                f"This request needs at least {accounting.calibrated(outcome.tokens_after):,} prompt tokens after "
                f"compaction (it had {accounting.calibrated(outcome.tokens_before):,}), but {accounting.model} "
                f"allows {limit:,} ({accounting.limits.context_window:,}-token context window minus the tokens "
                "reserved for the reply). Shorten the system prompt, the tools or the last message."
            )
        body = orjson.dumps({**payload, "messages": outcome.messages})
        headers = accounting.headers() | {
            "x-inflight-tokens-before": str(accounting.calibrated(outcome.tokens_before)),
            "x-inflight-tokens-after": str(accounting.calibrated(outcome.tokens_after)),
            "x-inflight-actions": ",".join(outcome.actions),
        }
        notes = [f"actions={','.join(outcome.actions)}"]
        return Prepared(body, True, outcome.tokens_after, headers, notes, limit=limit)

    async def compact(
        self,
        request: Request,
        payload: dict[str, Any],
        accounting: Accounting,
        count: RequestCount,
        raw_limit: int,
        *,
        force: bool,
    ) -> Outcome | None:
        settings = self.settings.compaction_for(accounting.model)
        messages = payload["messages"]
        conversation = Conversation(messages, count.messages, count.digests, count.fixed)
        budget = Budget.of(raw_limit, settings)
        key = conversation_key(
            session=request.headers.get("x-inflight-session"),
            model=accounting.model,
            head_digests=count.digests[: head_length(messages)],
        )
        lock = self._locks.setdefault(key, asyncio.Lock())
        async with lock:  # one compaction per conversation at a time: the second request reuses the first's
            records = await self.records.load(key)
            record = best_record(records, count.digests)
            compactor = self.compactor(request, accounting, settings)
            outcome = await compactor.run(conversation, budget=budget, record=record, force=force)
            if outcome is None:
                return None
            await self.records.save(key, with_record(records, record, outcome.record))
        log.info(
            "[compaction] key=%s tokens %d->%d budget=%d actions=%s replaced=%d summarizer_calls=%d summarizer_ms=%s%s",
            key[:48],
            accounting.calibrated(outcome.tokens_before),
            accounting.calibrated(outcome.tokens_after),
            int(raw_limit * accounting.ratio),
            ",".join(outcome.actions),
            outcome.messages_replaced,
            outcome.summarizer_calls,
            f"{outcome.summarizer_ms:.0f}" if outcome.summarizer_ms is not None else "-",
            "".join(f" {note}" for note in outcome.notes),
        )
        return outcome

    def compactor(self, request: Request, accounting: Accounting, settings: Compaction) -> Compactor:
        encoding = self.counter.encoding(accounting.encoding)
        options = settings.summarize
        summary_model = options.model or accounting.model
        summarizer = Summarizer(
            self.summarizer_client,
            base_url=options.base_url or self.settings.upstream.base_url,
            timeout_s=options.timeout_s,
        )
        authorization = self.summarizer_authorization(request, settings)
        models = [summary_model, *options.fallback_models]

        async def summarize(job: SummaryJob) -> str:
            return await summarizer(job, models=models, authorization=authorization)

        # The summarizer's reply is bounded by max_summary_tokens, which the engine keeps room for.
        window = self.registry.resolve(summary_model).context_window
        return Compactor(
            settings,
            count_message=lambda message: self.counter.count_message(message, encoding),
            count_text=lambda text: len(encoding.encode_ordinary(text)),
            summarize=summarize,
            summarizer_input_tokens=int(window / accounting.ratio),
        )

    def summarizer_authorization(self, request: Request, settings: Compaction) -> str | None:
        if settings.summarize.api_key:
            return f"Bearer {settings.summarize.api_key}"
        if settings.summarize.base_url is None and self.settings.upstream.api_key:
            return f"Bearer {self.settings.upstream.api_key}"
        return request.headers.get("authorization")

    def relay_with_usage(
        self,
        response: UpstreamResponse,
        timing: Timing,
        accounting: Accounting,
        prepared: Prepared,
        *,
        held: Held | None = None,
    ) -> Relay:
        """Relay unchanged, reading `usage.prompt_tokens` on the way to calibrate this model's estimates."""
        content_type = header_value(response.headers, b"content-type") or b""
        reader = UsageReader(
            event_stream=content_type.startswith(b"text/event-stream"),
            content_encoding=header_value(response.headers, b"content-encoding"),
        )

        def on_complete() -> None:
            actual = reader.finish()
            if response.status == 200 and actual is not None:
                self.calibration.record(accounting.model, estimate=prepared.sent_tokens, actual=actual)

        if held is not None and response.status == 200:
            for chunk in held.chunks:  # the relay sends held chunks without observing them
                reader.feed(chunk)
        return relay_response(
            response,
            timing,
            extra_headers=prepared.headers,
            observe=reader.feed if response.status == 200 else None,
            on_complete=on_complete,
            held=held.chunks if held else None,
            chunks=held.rest if held else None,
        )


@dataclass
class Held:
    """What was read of a response before deciding whether to retry it; the relay sends it first."""

    chunks: list[bytes]
    rest: AsyncIterator[bytes]
    refusal: Refusal | None = None


async def hold_until_known(response: UpstreamResponse, *, event_stream: bool, host: str) -> Held:
    """Read an error body whole, or a stream up to its first event: enough to recognise a refusal.

    A 2xx non-stream body is never a refusal, so nothing of it is held.
    """
    rest = response.aiter_raw()
    chunks: list[bytes] = []
    encoding = header_value(response.headers, b"content-encoding")
    if response.status >= 400:
        size = 0
        async with upstream_errors(host):
            async for chunk in rest:
                chunks.append(chunk)
                size += len(chunk)
                if size > MAX_ERROR_BODY:
                    return Held(chunks, rest)
        return Held(chunks, rest, detect(response.status, b"".join(chunks), content_encoding=encoding))
    content_type = header_value(response.headers, b"content-type") or b""
    if response.status != 200 or not event_stream or not content_type.startswith(b"text/event-stream") or encoding:
        return Held(chunks, rest)
    buffer = b""
    async with upstream_errors(host):
        async for chunk in rest:
            chunks.append(chunk)
            buffer += chunk
            event = first_event(buffer)
            if event is not None:
                return Held(chunks, rest, detect_event(event))
    if not buffer.strip():
        # llama-cpp-python answers an overlong streaming request with 200 and a stream with no event at all.
        return Held(chunks, rest, Refusal("llama-cpp-python-stream"))
    return Held(chunks, rest, detect_event(buffer))


def _countable(messages: Any) -> bool:
    return isinstance(messages, list) and all(isinstance(m, dict) for m in messages)


def _compaction_headers(tokens: int) -> dict[str, str]:
    return {
        "x-inflight-tokens-before": str(tokens),
        "x-inflight-tokens-after": str(tokens),
        "x-inflight-actions": "none",
    }
