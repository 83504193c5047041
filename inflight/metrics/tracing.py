"""OpenTelemetry traces, exported over OTLP/HTTP: a span per conversation request, a child span per upstream
attempt and per summarizer call, in the client's trace when it sends a `traceparent`.

Spans follow the GenAI semantic conventions (`gen_ai.operation.name`, `gen_ai.request.model`,
`gen_ai.provider.name`, `gen_ai.usage.*`) and carry what inflight did (`inflight.*`, from the turn's report).
Built only when telemetry is configured (`telemetry.otlp.endpoint` or the standard `OTEL_EXPORTER_OTLP_*`
variables): the app then imports this module; otherwise nothing here is imported or called.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.trace import Span, SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from inflight import __version__
from inflight.compaction.report import TurnReport
from inflight.config import Telemetry

OPERATION = "chat"  # every conversation API inflight serves is a chat in the conventions' terms
# The GenAI conventions' provider of each wire format's API (the upstream may be another server speaking it).
PROVIDERS = {"chat_completions": "openai", "responses": "openai", "messages": "anthropic", "gemini": "gcp.gemini"}
RawHeaders = Sequence[tuple[bytes, bytes]]


class Headers:
    """A carrier for the propagator: the first value of a header in raw ASGI headers."""

    @staticmethod
    def get(carrier: RawHeaders, key: str) -> list[str] | None:
        name = key.lower().encode("latin-1")
        values = [value.decode("latin-1") for header, value in carrier if header == name]
        return values or None

    @staticmethod
    def keys(carrier: RawHeaders) -> list[str]:
        return [header.decode("latin-1") for header, _ in carrier]


class Tracing:
    """The tracer provider, its OTLP/HTTP exporter and batch processor, and the spans the proxy makes."""

    def __init__(self, settings: Telemetry, environ: Mapping[str, str] = os.environ) -> None:
        otlp = settings.otlp
        name = environ.get("OTEL_SERVICE_NAME") or otlp.service_name
        resource = Resource.create({"service.name": name, "service.version": __version__})
        self.provider = TracerProvider(resource=resource)
        endpoint = f"{otlp.endpoint.rstrip('/')}/v1/traces" if otlp.endpoint else None  # None: from the variables
        exporter = OTLPSpanExporter(endpoint=endpoint, headers=dict(otlp.headers) or None)
        self.provider.add_span_processor(BatchSpanProcessor(exporter, schedule_delay_millis=otlp.schedule_delay_ms))
        self.tracer = self.provider.get_tracer("inflight", __version__)
        self.propagator = TraceContextTextMapPropagator()

    def request(self, headers: RawHeaders, *, method: str, route: str, wire: str) -> RequestTrace:
        """A conversation request's span, in the client's trace if its `traceparent` names one; it is the current
        span until `detach`, so the summarizer calls made for it are its children."""
        parent = self.propagator.extract(headers, getter=Headers)  # type: ignore[arg-type]
        span = self.tracer.start_span(f"{method} {route}", context=parent, kind=SpanKind.SERVER)
        provider = PROVIDERS.get(wire, wire)
        span.set_attributes(
            {
                "gen_ai.operation.name": OPERATION,
                "gen_ai.provider.name": provider,
                "http.request.method": method,
                "http.route": route,
            }
        )
        token = otel_context.attach(trace.set_span_in_context(span))
        return RequestTrace(self, span, provider, token)

    @contextmanager
    def summary(self, *, model: str, wire: str, input_tokens: int) -> Iterator[Span]:
        """A summarizer call's span, a child of the current one (the request that needed the summary)."""
        provider = PROVIDERS.get(wire, wire)
        with self.tracer.start_as_current_span(f"{OPERATION} {model}", kind=SpanKind.CLIENT) as span:
            span.set_attributes(
                {
                    "gen_ai.operation.name": OPERATION,
                    "gen_ai.request.model": model,
                    "gen_ai.provider.name": provider,
                    "inflight.summary": True,
                    "inflight.summary.input_tokens": input_tokens,  # inflight's own count of what it sends
                }
            )
            yield span

    def shutdown(self) -> None:
        """Export what is left and stop (blocking: the exporter posts from this thread)."""
        self.provider.shutdown()


@dataclass
class RequestTrace:
    """One request's span, its upstream attempts' spans, and what the upstream reported of its usage."""

    tracing: Tracing
    span: Span
    provider: str
    token: object | None
    model: str = ""
    attempts: int = 0
    upstream: Span | None = None
    usage: tuple[int | None, int | None] = (None, None)
    ended: bool = field(default=False, repr=False)

    def named(self, model: str) -> None:
        self.model = model
        self.span.set_attribute("gen_ai.request.model", model)

    def detach(self) -> None:
        """The handler is done: its span is no longer the current one (its relay may still run)."""
        if self.token is not None:
            otel_context.detach(self.token)  # type: ignore[arg-type]
            self.token = None

    def sending(self, headers: list[tuple[bytes, bytes]], *, host: str, path: str) -> list[tuple[bytes, bytes]]:
        """Start an upstream attempt's span (ending the previous one) and return `headers` with its `traceparent`
        in place of the client's, so the upstream's spans are its children."""
        self._end_upstream()
        self.attempts += 1
        context = trace.set_span_in_context(self.span)
        span = self.upstream = self.tracing.tracer.start_span(
            f"{OPERATION} {self.model}".strip(), context=context, kind=SpanKind.CLIENT
        )
        span.set_attributes(
            {
                "gen_ai.operation.name": OPERATION,
                "gen_ai.request.model": self.model,
                "gen_ai.provider.name": self.provider,
                "server.address": host,
                "url.path": path,
                "inflight.attempt": self.attempts,
            }
        )
        carrier: dict[str, str] = {}
        self.tracing.propagator.inject(carrier, context=trace.set_span_in_context(span))
        kept = [(name, value) for name, value in headers if name.lower() not in (b"traceparent", b"tracestate")]
        return kept + [(name.encode("latin-1"), value.encode("latin-1")) for name, value in carrier.items()]

    def answered(self, status: int) -> None:
        if self.upstream is not None:
            self.upstream.set_attribute("http.response.status_code", status)
            if status >= 400:
                self.upstream.set_status(Status(StatusCode.ERROR, f"upstream answered {status}"))

    def used(self, input_tokens: int | None, output_tokens: int | None) -> None:
        """The upstream's own count of the prompt and the reply, as its answer reported them."""
        self.usage = (input_tokens, output_tokens)
        if self.upstream is not None:
            self.upstream.set_attributes(usage_attributes(input_tokens, output_tokens))

    def finish(self, report: TurnReport, *, status: int, client: str | None) -> None:
        """End the spans with what the turn's report says."""
        if self.ended:
            return
        self.ended = True
        self._end_upstream()
        span = self.span
        attributes = usage_attributes(*self.usage) | report_attributes(report)
        attributes["http.response.status_code"] = status
        if client:
            attributes["inflight.client"] = client
        span.set_attributes(attributes)
        if status >= 500:
            span.set_status(Status(StatusCode.ERROR))
        span.end()

    def _end_upstream(self) -> None:
        if self.upstream is not None:
            self.upstream.end()
            self.upstream = None


def usage_attributes(input_tokens: int | None, output_tokens: int | None) -> dict[str, Any]:
    attributes: dict[str, Any] = {}
    if input_tokens is not None:
        attributes["gen_ai.usage.input_tokens"] = input_tokens
    if output_tokens is not None:
        attributes["gen_ai.usage.output_tokens"] = output_tokens
    return attributes


def report_attributes(report: TurnReport) -> dict[str, Any]:
    """What inflight did, from the turn's report (`inflight.compaction.report`)."""
    attributes: dict[str, Any] = {"inflight.shadow": report.shadow_mode, "inflight.retried": report.retried}
    if report.window is not None:
        attributes["inflight.context_window"] = report.window.context_window
        attributes["inflight.budget"] = report.window.budget
    if report.sent is not None:
        attributes["inflight.actions"] = list(report.sent.actions)
        attributes["inflight.tokens.before"] = report.sent.tokens_before
        attributes["inflight.tokens.after"] = report.sent.tokens_after
        if report.sent.compaction_id:
            attributes["inflight.compaction_id"] = report.sent.compaction_id
    if report.shadow is not None:
        attributes["inflight.shadow.actions"] = list(report.shadow.actions)
        attributes["inflight.shadow.tokens.after"] = report.shadow.tokens_after
    if report.cache is not None:
        attributes["inflight.cached_share"] = report.cache.share
        if report.cache.cost is not None:
            attributes["inflight.cost_units"] = report.cache.cost
        if report.cache.cost_client is not None:
            attributes["inflight.cost_units.client"] = report.cache.cost_client
    return attributes
