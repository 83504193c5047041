"""The chat-completions path: read once, count, compact if needed, send, relay."""

from __future__ import annotations

import asyncio
import logging
import math
from dataclasses import dataclass
from typing import Any

from starlette.requests import Request

from proxy.body import decode_content, parse_object
from proxy.config import Settings
from proxy.errors import UpstreamUnreachable
from proxy.forward import Relay, Timing, UpstreamClient, header_value, relay_response
from proxy.models import ContextRegistry, ModelLimits, reserve_for
from proxy.pool import UpstreamResponse
from proxy.tokens import THREAD_THRESHOLD_BYTES, TokenCounter, choose_encoding
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


async def read_payload(raw: bytes, content_encoding: str) -> dict[str, Any]:
    """Parse the body; a large one in a worker thread, so the loop keeps serving small requests."""
    if len(raw) > THREAD_THRESHOLD_BYTES:
        return await asyncio.to_thread(lambda: parse_object(decode_content(raw, content_encoding)))
    return parse_object(decode_content(raw, content_encoding))


class ChatCompletions:
    def __init__(
        self,
        settings: Settings,
        upstream: UpstreamClient,
        *,
        counter: TokenCounter,
        registry: ContextRegistry,
        calibration: Calibration,
    ) -> None:
        self.settings = settings
        self.upstream = upstream
        self.counter = counter
        self.registry = registry
        self.calibration = calibration

    async def handle(self, request: Request, timing: Timing) -> Relay:
        raw = await request.body()
        payload = await read_payload(raw, request.headers.get("content-encoding", ""))
        model = payload.get("model")
        timing.model = model if isinstance(model, str) else "-"
        accounting = None
        if isinstance(model, str) and isinstance(payload.get("messages"), list):
            accounting = await self.account(request, payload, model, size_hint=len(raw))
        headers = self.upstream.outgoing_headers(request.scope["headers"])
        url = self.upstream.url_for(request.url.path, request.scope["query_string"])
        response = await self.upstream.open("POST", url, headers=headers, content=raw)
        timing.upstream_answered()
        if accounting is None:
            return relay_response(response, timing)
        return self.relay_with_usage(response, timing, accounting, sent_tokens=accounting.raw_tokens)

    async def account(self, request: Request, payload: dict[str, Any], model: str, *, size_hint: int) -> Accounting:
        credentials = self.upstream.credential_headers(request.scope["headers"])

        async def fetch_models() -> bytes:
            status, body = await self.upstream.fetch("/v1/models", headers=credentials)
            if status != 200:
                raise UpstreamUnreachable(f"GET /v1/models answered {status}")
            return body

        limits = await self.registry.resolve_async(model, fetch_models)
        entry = self.settings.model_entry(model)
        choice = choose_encoding(model, entry.encoding if entry else None)
        count = await self.counter.count_request_async(payload, choice.name, size_hint=size_hint)
        compaction = self.settings.compaction_for(model)
        reserve = reserve_for(payload, reserve_tokens=compaction.reserve_tokens, context_window=limits.context_window)
        accounting = Accounting(
            model=model,
            encoding=choice.name,
            exact=choice.exact,
            limits=limits,
            budget=max(limits.context_window - reserve, 0),
            raw_tokens=count.total,
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

    def relay_with_usage(
        self, response: UpstreamResponse, timing: Timing, accounting: Accounting, *, sent_tokens: int
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
                self.calibration.record(accounting.model, estimate=sent_tokens, actual=actual)

        return relay_response(
            response,
            timing,
            extra_headers=accounting.headers(),
            observe=reader.feed if response.status == 200 else None,
            on_complete=on_complete,
        )
