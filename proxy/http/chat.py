"""POST /v1/chat/completions: read, count, budget, compact if needed, send, relay; retry once if refused.

Each step is one call into the module that owns it; this file only puts them in order.
"""

from __future__ import annotations

from starlette.requests import Request

from proxy.accounting import Accounting, Counted
from proxy.errors import ContextTooLong, UpstreamUnreachable
from proxy.exchange import Exchange
from proxy.http.intake import read_chat
from proxy.pipeline import ChatPipeline, Options, Prepared
from proxy.policy.calibration import UsageReader
from proxy.policy.windows import FetchModels
from proxy.upstream.client import UpstreamClient
from proxy.upstream.headers import header_value, is_event_stream
from proxy.upstream.hold import Held, hold_until_known
from proxy.upstream.relay import Relay, prepend, relay, tap
from proxy.upstream.response import Response as UpstreamResponse


class ChatCompletions:
    def __init__(self, pipeline: ChatPipeline, upstream: UpstreamClient) -> None:
        self.pipeline = pipeline
        self.upstream = upstream

    async def __call__(self, request: Request, exchange: Exchange) -> Relay:
        raw = await request.body()
        intake = await read_chat(raw, request.headers.get("content-encoding", ""), self.pipeline)
        model = intake.payload.get("model")
        exchange.note("model", model if isinstance(model, str) else "-")
        counted = intake.counted
        if counted is None:  # not ours to judge: the upstream answers whatever this is with its own error
            response = await self.send(request, raw, exchange, rewritten=False)
            return relay(response, exchange)
        accounting = await self.pipeline.account(counted, self.discovery(request))
        exchange.note_all(accounting.log_fields())
        options = options_of(request)
        prepared = await self.prepare(counted, accounting, options, exchange)
        response = await self.send(request, prepared.body, exchange, rewritten=prepared.rewritten)
        if not self.pipeline.compacts(counted.model, options):
            return self.relay(response, exchange, accounting, prepared)
        try:
            held = await hold_until_known(
                response, event_stream=counted.payload.get("stream") is True, host=self.upstream.host
            )
        except BaseException:
            await response.aclose()
            raise
        if held.refusal is None:
            return self.relay(response, exchange, accounting, prepared, held=held)
        await response.aclose()
        limit = self.pipeline.learn(accounting, held.refusal, prepared, counted.payload)
        exchange.note_all({"refused_by": held.refusal.upstream, "retry_limit": limit})
        return await self.retry(request, exchange, counted, accounting, options, limit=limit)

    async def retry(
        self,
        request: Request,
        exchange: Exchange,
        counted: Counted,
        accounting: Accounting,
        options: Options,
        *,
        limit: int,
    ) -> Relay:
        """Once: the original request compacted again against what the refusal taught us."""
        retry = await self.prepare(counted, accounting, options, exchange, limit=limit)
        exchange.headers["x-inflight-actions"] += ",retry"
        exchange.headers["x-inflight-retried"] = "1"
        response = await self.send(request, retry.body, exchange, rewritten=retry.rewritten)
        return self.relay(response, exchange, accounting, retry)

    async def prepare(
        self,
        counted: Counted,
        accounting: Accounting,
        options: Options,
        exchange: Exchange,
        *,
        limit: int | None = None,
    ) -> Prepared:
        """The body to send (compacted if needed); its headers and log fields go on the exchange."""
        prepared = await self.pipeline.prepare(counted, accounting, options, limit=limit, force=limit is not None)
        exchange.headers = dict(prepared.headers)
        exchange.note_all(prepared.fields)
        if prepared.too_long is not None:
            raise ContextTooLong(prepared.too_long)
        return prepared

    async def send(self, request: Request, body: bytes, exchange: Exchange, *, rewritten: bool) -> UpstreamResponse:
        target = self.upstream.target_for(request.scope["path"], request.scope["query_string"])
        headers = self.upstream.headers_for(request.scope["headers"], rewrite_body=rewritten)
        response = await self.upstream.open("POST", target, headers=headers, content=body)
        exchange.upstream_answered()
        return response

    def discovery(self, request: Request) -> FetchModels:
        """Fetches the upstream's model list with this client's credentials (used once per process)."""
        credentials = self.upstream.credential_headers(request.scope["headers"])

        async def fetch_models() -> bytes:
            status, body = await self.upstream.fetch("/v1/models", headers=credentials)
            if status != 200:
                raise UpstreamUnreachable(f"GET /v1/models answered {status}")
            return body

        return fetch_models

    def relay(
        self,
        response: UpstreamResponse,
        exchange: Exchange,
        accounting: Accounting,
        prepared: Prepared,
        *,
        held: Held | None = None,
    ) -> Relay:
        """Relay unchanged, reading `usage.prompt_tokens` on the way to calibrate this model's estimates."""
        chunks = response.aiter_raw() if held is None else prepend(held.chunks, held.rest)
        if response.status != 200:
            return relay(response, exchange, chunks=chunks)
        reader = UsageReader(
            event_stream=is_event_stream(response.headers),
            content_encoding=header_value(response.headers, b"content-encoding"),
        )

        def calibrate() -> None:
            actual = reader.finish()
            if actual is not None:
                self.pipeline.calibration.record(accounting.model, estimate=prepared.sent_tokens, actual=actual)

        return relay(response, exchange, chunks=tap(chunks, reader.feed, calibrate))


def options_of(request: Request) -> Options:
    return Options(
        mode=request.headers.get("x-inflight-compaction", "").strip().lower(),
        session=request.headers.get("x-inflight-session"),
        authorization=request.headers.get("authorization"),
    )
