"""OpenTelemetry traces exported to a real OTLP/HTTP receiver on loopback: a span per request in the client's
trace, a child per upstream attempt (whose `traceparent` the upstream receives) and per summarizer call, with the
GenAI conventions' attributes and inflight's own. The proxy's shutdown exports what is left, so once it has
stopped the receiver holds every span."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import pytest

from tests.compaction.test_compactor import agent_conversation
from tests.conftest import ProxyFactory
from tests.support.otlp import ReceivedSpan, Receiver
from tests.support.servers import serve
from tests.support.upstream import UpstreamApp

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
CLIENT_SPAN = "00f067aa0ba902b7"
TRACEPARENT = f"00-{TRACE_ID}-{CLIENT_SPAN}-01"


@pytest.fixture
def receiver() -> Iterator[tuple[Receiver, str]]:
    receiver = Receiver()
    with serve(receiver.app) as url:
        yield receiver, url


def telemetry(url: str, **more: Any) -> dict[str, Any]:
    return {"telemetry": {"otlp": {"endpoint": url, "schedule_delay_ms": 50}}, **more}


def request_span(receiver: Receiver, name: str) -> ReceivedSpan:
    [span] = receiver.named(name)
    assert span.kind == "server" and span.service == "inflight"
    assert (span.trace_id, span.parent_span_id) == (TRACE_ID, CLIENT_SPAN)  # the client's trace, continued
    return span


def test_a_compacted_chat_completions_turn_is_a_span_with_its_upstream_call_and_summaries_as_children(
    upstream: tuple[UpstreamApp, str], start_proxy: ProxyFactory, receiver: tuple[Receiver, str]
) -> None:
    app, url = upstream
    spans, collector = receiver
    settings = telemetry(collector, models={"*": {"context_window": 4000}})
    settings["compaction"] = {"summarize": {"background_at": None}}  # the summary on this turn: its spans are here
    with start_proxy(url, **settings) as proxy_url:
        body = {"model": "gpt-4o", "messages": agent_conversation(120, output_lines=5)}
        answer = httpx.post(f"{proxy_url}/chat/completions", json=body, headers={"traceparent": TRACEPARENT})
        assert answer.status_code == 200 and "summarize" in answer.headers["x-inflight-actions"]
    span = request_span(spans, "POST /v1/chat/completions")
    attributes = span.attributes
    assert attributes["gen_ai.operation.name"] == "chat" and attributes["gen_ai.request.model"] == "gpt-4o"
    assert attributes["gen_ai.provider.name"] == "openai"
    assert attributes["gen_ai.usage.input_tokens"] > 0 and attributes["gen_ai.usage.output_tokens"] == 5
    assert attributes["inflight.actions"] == answer.headers["x-inflight-actions"].split(",")
    assert attributes["inflight.tokens.before"] == int(answer.headers["x-inflight-tokens-before"])
    assert attributes["inflight.tokens.after"] == int(answer.headers["x-inflight-tokens-after"])
    assert attributes["inflight.tokens.after"] < attributes["inflight.tokens.before"]
    assert 0 <= attributes["inflight.cached_share"] <= 1 and attributes["inflight.cost_units"] > 0
    assert attributes["inflight.shadow"] is False and attributes["http.response.status_code"] == 200
    children = spans.children_of(span)
    [call] = [child for child in children if child.name == "chat gpt-4o" and "inflight.attempt" in child.attributes]
    summaries = [child for child in children if child.attributes.get("inflight.summary")]
    assert call.kind == "client" and call.attributes["http.response.status_code"] == 200
    assert summaries and all(s.kind == "client" and s.attributes["gen_ai.request.model"] == "gpt-4o" for s in summaries)
    # The upstream got the attempt's span as its parent, in the client's trace.
    sent = [request for request in app.chat_requests() if "traceparent" in request.headers]
    assert sent[-1].headers["traceparent"] == f"00-{TRACE_ID}-{call.span_id}-01"


def test_a_messages_stream_is_a_span_with_the_usage_the_stream_reported(
    upstream: tuple[UpstreamApp, str], start_proxy: ProxyFactory, receiver: tuple[Receiver, str]
) -> None:
    _, url = upstream
    spans, collector = receiver
    with start_proxy(url, **telemetry(collector, upstreams={"messages": {"base_url": url}})) as proxy_url:
        client = anthropic.Anthropic(
            base_url=proxy_url.removesuffix("/v1"), api_key="sk-ant-test", default_headers={"traceparent": TRACEPARENT}
        )
        with client.messages.stream(
            model="claude-opus-5-5", max_tokens=100, messages=[{"role": "user", "content": "Say hello."}]
        ) as stream:
            final = stream.get_final_message()
    span = request_span(spans, "POST /v1/messages")
    attributes = span.attributes
    assert attributes["gen_ai.provider.name"] == "anthropic"
    assert attributes["gen_ai.request.model"] == "claude-opus-5-5"
    assert attributes["gen_ai.usage.output_tokens"] == final.usage.output_tokens
    assert attributes["gen_ai.usage.input_tokens"] > 0
    assert attributes["inflight.actions"] == ["none"]
    [call] = spans.children_of(span)
    assert call.name == "chat claude-opus-5-5" and call.attributes["gen_ai.provider.name"] == "anthropic"


def test_a_retry_is_two_upstream_spans_under_one_request_span(
    start_proxy: ProxyFactory, receiver: tuple[Receiver, str]
) -> None:
    spans, collector = receiver
    app = UpstreamApp(windows={"local-model": 2000})
    with serve(app) as url, start_proxy(url + "/v1", **telemetry(collector)) as proxy_url:
        body = {"model": "local-model", "messages": agent_conversation(30, output_lines=5)}
        answer = httpx.post(f"{proxy_url}/chat/completions", json=body, headers={"traceparent": TRACEPARENT})
        assert answer.status_code == 200 and answer.headers["x-inflight-retried"] == "1"
    span = request_span(spans, "POST /v1/chat/completions")
    assert span.attributes["inflight.retried"] is True and span.attributes["inflight.actions"][-1] == "retry"
    assert span.attributes["inflight.context_window"] == 2000
    attempts = sorted(
        (child for child in spans.children_of(span) if "inflight.attempt" in child.attributes),
        key=lambda child: child.attributes["inflight.attempt"],
    )
    assert [a.attributes["http.response.status_code"] for a in attempts] == [400, 200]
    assert [a.status for a in attempts] == [2, 0]  # the refused attempt is an error; the retry is not


def test_the_standard_variable_turns_it_on(
    upstream: tuple[UpstreamApp, str],
    start_proxy: ProxyFactory,
    receiver: tuple[Receiver, str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    spans, collector = receiver
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", collector)
    monkeypatch.setenv("OTEL_SERVICE_NAME", "inflight-test")
    with start_proxy(upstream[1]) as proxy_url:
        body = {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}
        assert httpx.post(f"{proxy_url}/chat/completions", json=body).status_code == 200
    [span] = spans.named("POST /v1/chat/completions")
    assert span.service == "inflight-test" and span.parent_span_id == ""  # no traceparent: a trace of its own


def test_off_by_default_nothing_of_opentelemetry_is_imported() -> None:
    """Telemetry off costs no import and no per-request work beyond a `None` check."""
    code = (
        "import sys; from inflight.app import create_app; from inflight.config import load_settings; "
        "create_app(load_settings(None)); print(sorted(m for m in sys.modules if m.startswith('opentelemetry')))"
    )
    env = {key: value for key, value in os.environ.items() if not key.startswith("OTEL_")}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60, check=True)
    assert done.stdout.strip() == "[]", done.stdout
    disabled = {**env, "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9", "OTEL_SDK_DISABLED": "true"}
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=disabled, timeout=60, check=True
    )
    assert done.stdout.strip() == "[]", done.stdout
