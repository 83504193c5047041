"""The LLM call that turns a span of conversation into a summary: the summarizer model, then its fallbacks.

A summary is a non-streaming completion sent through the same `UpstreamClient` as forwarded requests,
so pools, TLS, timeouts and error mapping live in one place. Summaries sent to the upstream share its
pool; a summarizer at another `summarize.base_url` gets its own client, made once per URL and closed
with the others.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

import orjson

from inflight.compaction import Summarize, SummaryJob
from inflight.compaction.validation import headings, rejection
from inflight.config import Compaction, Settings
from inflight.config import Upstream as UpstreamSettings
from inflight.errors import ProxyError
from inflight.formats import CHAT_COMPLETIONS, WireFormat
from inflight.metrics.observer import NO_OBSERVER, Observer
from inflight.offload import call_sized
from inflight.policy.windows import ContextRegistry
from inflight.upstream.client import UpstreamClient
from inflight.upstream.headers import RawHeaders, key_headers

if TYPE_CHECKING:
    from inflight.metrics.tracing import Tracing

log = logging.getLogger("inflight")
DISCOVERY_TIMEOUT_S = 10.0
# A summary is a few thousand tokens; a reply this big is not one, and is not read further (nor parsed).
MAX_REPLY_BYTES = 4 << 20
CHARS_PER_TOKEN = 4  # a reply's size in tokens, roughly, to choose where its reading runs
MODEL_CHARS = 256  # how much of a (client-supplied) model name goes into a log line or an error


class SummarizerError(RuntimeError):
    def __init__(self, message: str, *, rejected: str | None = None, status: int | None = None) -> None:
        super().__init__(message)
        self.rejected = rejected  # why the last reply was rejected (`inflight.compaction.validation`), if it was
        self.status = status  # the last error status a summarizer answered with, if any


class Summarizer:
    """Asks the summarizer's endpoint for a summary (non-streaming), trying each model in turn.

    The request uses Chat Completions, or the client request's own format when the upstream's model
    summarizes (models such as Codex's answer only through the Responses API)."""

    def __init__(
        self,
        client: UpstreamClient,
        *,
        timeout_s: float,
        wire: WireFormat = CHAT_COMPLETIONS,
        observer: Observer = NO_OBSERVER,
        tracing: Tracing | None = None,
    ) -> None:
        self.client = client
        self.timeout_s = timeout_s
        self.wire = wire
        self.observer = observer  # receives each model call's outcome and duration
        self.tracing = tracing  # telemetry on: a span per call

    async def __call__(self, job: SummaryJob, *, models: Sequence[str], credentials: RawHeaders) -> str:
        errors: list[str] = []
        rejected = None
        status = None
        if job.in_place is not None:  # only the conversation's own model has it in its prompt cache
            models = [model for model in models if model == job.in_place.model][:1]
        for model in models:
            started = time.perf_counter()
            try:
                if self.tracing is None:
                    text, finish_reason = await self.complete(job, model=model, credentials=credentials)
                else:
                    with self.tracing.summary(model=model, wire=self.wire.spec.name, input_tokens=job.input_tokens):
                        text, finish_reason = await self.complete(job, model=model, credentials=credentials)
            except (ProxyError, SummarizerError, ValueError) as exc:
                self.observer.summarizer_called(outcome="error", seconds=time.perf_counter() - started)
                status = getattr(exc, "status", None) or status
                errors.append(f"{model[:MODEL_CHARS]}: {type(exc).__name__}: {exc}")
                log.info("[compaction] summarizer %s failed: %s", model[:MODEL_CHARS], exc)
                continue
            seconds = time.perf_counter() - started
            sections = headings(job.prompt)
            check = functools.partial(
                rejection, text, finish_reason=finish_reason, transcript=job.transcript, sections=sections
            )
            rejected = await call_sized(check, len(text) // CHARS_PER_TOKEN)  # off the loop for a long reply
            self.observer.summarizer_called(outcome="ok" if rejected is None else "rejected", seconds=seconds)
            if rejected is None:
                return text
            errors.append(f"{model[:MODEL_CHARS]}: reply rejected ({rejected})")
            log.warning("[compaction] summary from %s rejected (%s); not installed", model[:MODEL_CHARS], rejected)
        raise SummarizerError("; ".join(errors) or "no summarizer model", rejected=rejected, status=status)

    async def complete(self, job: SummaryJob, *, model: str, credentials: RawHeaders) -> tuple[str, object]:
        """Ask in the wire format's shape; return the reply's text and its finish reason."""
        tools = job.in_place.tools if job.in_place is not None else None
        call = self.wire.summary_request(job.messages(), model=model, max_tokens=job.max_tokens, tools=tools)
        headers: RawHeaders = [(b"content-type", b"application/json"), *call.headers, *credentials]
        status, answer = await self.client.send_whole(
            "POST",
            call.path,
            headers=headers,
            content=orjson.dumps(call.body),
            timeout_s=self.timeout_s,
            max_bytes=MAX_REPLY_BYTES,
        )
        if status != 200:
            text = answer[:200].decode("utf-8", "replace")
            raise SummarizerError(f"status {status}: {text}", status=status)
        # Parsed off the loop when long: a reply of megabytes (whatever was asked) would stall every request.
        content, finish_reason = await call_sized(
            lambda: self.wire.summary_reply(orjson.loads(answer)),  # raises ValueError if not JSON
            len(answer) // CHARS_PER_TOKEN,
        )
        if not content.strip():
            raise SummarizerError("no summary text in the response")
        return content, finish_reason


class Summarizers:
    """Makes the summarizer for one request: which endpoint, which models, whose key.

    At the upstream (the one for the request's format, `upstreams.<format>`), the key is
    `compaction.summarize.api_key`, else that upstream's own key (or its URL's `user:password`), sent
    the way that upstream expects. At a separate `summarize.base_url`, it is that URL's
    `user:password`, else `summarize.api_key`, else nothing: a client's key goes only to the upstream its
    request was for. At the upstream with none of these, the client's `Authorization` or `x-api-key` is
    used (the summary is spent on the client's behalf), unless the proxy checks keys of its own
    (`access.keys`): the client's key is then one of the proxy's and is never passed on.
    """

    def __init__(
        self,
        settings: Settings,
        upstream: UpstreamClient,
        *,
        by_format: dict[str, UpstreamClient] | None = None,
        observer: Observer = NO_OBSERVER,
        tracing: Tracing | None = None,
    ) -> None:
        self.settings = settings
        self.upstream = upstream  # the proxy's own client: summaries sent to the upstream share its pool
        self.by_format = by_format or {}  # a format's own upstream, for formats that have one
        self.observer = observer
        self.tracing = tracing
        self._registries: dict[str, ContextRegistry] = {}  # one per summarizer endpoint, discovered once
        self._clients: dict[str, UpstreamClient] = {}  # one per `summarize.base_url` (a handful, from the config)

    def client_for(self, base_url: str | None, wire: WireFormat | None = None) -> UpstreamClient:
        """The upstream's client (the format's own), or the client for a summarizer at a separate `base_url`
        (made on first use)."""
        if base_url is None:
            return self.by_format.get(wire.spec.name, self.upstream) if wire is not None else self.upstream
        client = self._clients.get(base_url)
        if client is None:
            upstream = self.settings.upstream
            settings = UpstreamSettings(
                base_url=base_url,
                connect_timeout_s=upstream.connect_timeout_s,
                read_timeout_s=upstream.read_timeout_s,
            )
            client = self._clients[base_url] = UpstreamClient(settings)
        return client

    async def aclose(self) -> None:
        """Close the clients of summarizers at a separate `base_url` (the upstream's client is closed by its owner)."""
        clients, self._clients = list(self._clients.values()), {}
        for client in clients:
            await client.aclose()

    async def window(self, options: Compaction, model: str) -> int | None:
        """The model's window at `summarize.base_url`: from the config, else from its `GET /models`, else None."""
        base_url = options.summarize.base_url
        if base_url is None:
            return None
        registry = self._registries.setdefault(base_url, ContextRegistry(self.settings))
        client = self.client_for(base_url)
        authorization = own_authorization(options, client)
        headers: RawHeaders = [(b"authorization", authorization.encode("latin-1"))] if authorization else []

        async def fetch_models() -> bytes:
            status, body = await client.send_whole(
                "GET", "/v1/models", headers=headers, content=None, timeout_s=DISCOVERY_TIMEOUT_S
            )
            if status != 200:
                raise SummarizerError(f"GET /models answered {status}")
            return body

        limits = await registry.resolve_async(model, fetch_models)
        return limits.context_window if limits.source in ("config", "discovered", "learned") else None

    def __call__(
        self,
        options: Compaction,
        *,
        model: str,
        client_credentials: RawHeaders,
        wire: WireFormat | None = None,
    ) -> Summarize:
        summarize = options.summarize
        client = self.client_for(summarize.base_url, wire)
        # A separate summarizer (`summarize.base_url`) is asked through Chat Completions; the upstream is asked
        # in the request's own format (`wire`).
        shape = wire if wire is not None and summarize.base_url is None else CHAT_COMPLETIONS
        summarizer = Summarizer(
            client, timeout_s=summarize.timeout_s, wire=shape, observer=self.observer, tracing=self.tracing
        )
        models = [summarize.model or model, *summarize.fallback_models]
        credentials = self._credentials(options, client, client_credentials, wire=wire)

        async def run(job: SummaryJob) -> str:
            return await summarizer(job, models=models, credentials=credentials)

        return run

    def _credentials(
        self, options: Compaction, client: UpstreamClient, client_credentials: RawHeaders, *, wire: WireFormat | None
    ) -> RawHeaders:
        """What the summarizer is sent as its key (see the class's docstring)."""
        summarize = options.summarize
        if summarize.base_url is not None:  # another host: a client's key is not its to see
            authorization = own_authorization(options, client)
            return [(b"authorization", authorization.encode("latin-1"))] if authorization else []
        # Anthropic's API for the Messages API, which the config did not name (`Settings.format_upstreams`), is not
        # where `summarize.api_key` was meant to go.
        settings = self.settings
        implied = (
            wire is not None
            and wire.spec.name not in settings.upstreams
            and wire.spec.name in settings.format_upstreams
        )
        if summarize.api_key and not implied:
            return key_headers(summarize.api_key, "", client.key_header)
        # With access.keys the client's key is one of the proxy's own, so it is never passed on.
        return client.own_credentials() or ([] if self.settings.access.keys else list(client_credentials))


def own_authorization(options: Compaction, client: UpstreamClient) -> str | None:
    """The authorization for a summarizer at a separate `summarize.base_url`: the `user:password` in that URL
    (which takes precedence), else `summarize.api_key`, else None."""
    if client.basic_auth:
        return f"Basic {client.basic_auth}"
    return f"Bearer {options.summarize.api_key}" if options.summarize.api_key else None
