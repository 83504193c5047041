"""Honest timing: the log line and the metrics split a request's time between the proxy and the upstream.

`upstream_ms` runs from the request written upstream to the upstream's answer (its headers, or a held
stream's first event), every attempt's together; `proxy_ms` is everything before and between; a big
request's wait for a heavy lane is `queue_ms`. Each test makes one side slow by construction (a
summarizer that takes a second, an upstream that takes three) and checks the figures against it and
against the whole: the two parts never add up to more than the request took.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass

import httpx
import pytest

from tests.compaction.test_compactor import agent_conversation
from tests.conftest import ProxyFactory
from tests.http.test_metrics import scrape_when
from tests.support.logs import log_lines
from tests.support.upstream import UpstreamApp

CHAT = "/v1/chat/completions"
SLOW_SUMMARY_S = 1.0
SLOW_UPSTREAM_S = 3.0  # the fake upstream's `x-scenario: slow`
# asyncio's timers may fire up to a clock tick early against the proxy's perf_counter: a few ms of slack, which no
# load can take away (a busy machine only makes the waits longer).
TIMER_SLACK_S = 0.01
# A small window, and the summary made while the request waits: a slow summarizer is a slow compaction.
IN_LINE = {
    "models": {"gpt-4o": {"context_window": 4000}},
    "compaction": {"summarize": {"background_at": None}},
}


def figures(line: str) -> dict[str, float]:
    found = dict(re.findall(r" (proxy_ms|queue_ms|upstream_ms|total_ms)=([\d.]+)", line))
    return {name: float(value) for name, value in found.items()}


@dataclass
class Timed:
    """One compacted request through a proxy: its answer, its log line's figures and the metrics' sums."""

    response: httpx.Response
    line: str
    times: dict[str, float]
    added_s: float  # inflight_added_latency_seconds_sum
    upstream_s: float  # inflight_upstream_latency_seconds_sum


def timed(url: str, start_proxy: ProxyFactory, caplog: pytest.LogCaptureFixture, **headers: str) -> Timed:
    body = {"model": "gpt-4o", "messages": agent_conversation(120, output_lines=5)}
    with caplog.at_level(logging.INFO, logger="inflight"), start_proxy(url, **IN_LINE) as proxy_url:
        response = httpx.post(f"{proxy_url}/chat/completions", json=body, headers=headers, timeout=60)
        [line] = log_lines(caplog, f"POST {CHAT}")
        metrics = scrape_when(
            proxy_url.removesuffix("/v1"), lambda s: s.get("inflight_requests_total", route=CHAT, status="200") == 1
        )
    assert response.status_code == 200 and "summarize" in response.headers["x-inflight-actions"]
    added = metrics.get("inflight_added_latency_seconds_sum", route=CHAT)
    waited = metrics.get("inflight_upstream_latency_seconds_sum", route=CHAT)
    times = figures(line)
    # The parts never add up to more than the whole (the log's figures are rounded to 0.1 ms each).
    assert times["proxy_ms"] + times["upstream_ms"] <= times["total_ms"] + 0.2, line
    assert added + waited <= times["total_ms"] / 1000 + 0.001
    return Timed(response, line, times, added, waited)


def test_a_slow_compaction_is_the_proxys_time_not_the_upstreams(
    upstream: tuple[UpstreamApp, str], start_proxy: ProxyFactory, caplog: pytest.LogCaptureFixture
) -> None:
    app, url = upstream
    app.summarizer_delay = SLOW_SUMMARY_S
    result = timed(url, start_proxy, caplog)
    assert app.summaries  # the compaction waited on the summarizer
    assert result.times["proxy_ms"] >= (SLOW_SUMMARY_S - TIMER_SLACK_S) * 1000, result.line
    assert result.added_s >= SLOW_SUMMARY_S - TIMER_SLACK_S


def test_a_slow_upstream_is_the_upstreams_time_not_the_proxys(
    upstream: tuple[UpstreamApp, str], start_proxy: ProxyFactory, caplog: pytest.LogCaptureFixture
) -> None:
    result = timed(upstream[1], start_proxy, caplog, **{"x-scenario": "slow"})  # compacted fast, answered slowly
    assert result.times["upstream_ms"] >= (SLOW_UPSTREAM_S - TIMER_SLACK_S) * 1000, result.line
    assert result.upstream_s >= SLOW_UPSTREAM_S - TIMER_SLACK_S


def test_a_big_request_says_how_long_it_waited_for_a_heavy_lane(
    upstream: tuple[UpstreamApp, str], start_proxy: ProxyFactory, caplog: pytest.LogCaptureFixture
) -> None:
    _, url = upstream
    output = "\n".join(f"line {i} of a long log" for i in range(60_000))  # about 1.3 MB: the heavy lanes'
    messages = [{"role": "user", "content": "Read the log."}, {"role": "assistant", "content": output}]
    with caplog.at_level(logging.INFO, logger="inflight"), start_proxy(url) as proxy_url:
        response = httpx.post(f"{proxy_url}/chat/completions", json={"model": "gpt-4o", "messages": messages})
        [line] = log_lines(caplog, f"POST {CHAT}")
        metrics = scrape_when(
            proxy_url.removesuffix("/v1"), lambda s: s.get("inflight_requests_total", route=CHAT, status="200") == 1
        )
    assert response.status_code == 200
    times = figures(line)
    assert "queue_ms" in times and times["queue_ms"] <= times["proxy_ms"], line
    assert metrics.get("inflight_heavy_lane_wait_seconds_count", route=CHAT) == 1
