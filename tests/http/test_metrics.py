"""`GET /metrics`: what a scrape reports after real requests through the proxy, one process or several."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import orjson
from prometheus_client.parser import text_string_to_metric_families

from tests.compaction.test_compactor import agent_conversation
from tests.conftest import ProxyFactory
from tests.fixtures.refusals import REFUSALS
from tests.support.processes import inflight
from tests.support.upstream import Scripted, UpstreamApp

CHAT = "/v1/chat/completions"
OTHER = "/v1/{path}"
WINDOW = {"models": {"gpt-4o": {"context_window": 4000}}}  # budget 3000: a long conversation is compacted
KEYS = {"access": {"keys": ["sk-proxy-client"], "admin_keys": ["sk-proxy-admin"]}, "upstream": {"api_key": "sk-up"}}


class Scrape:
    """One scrape of `/metrics`, parsed with prometheus_client's own parser."""

    def __init__(self, text: str) -> None:
        self.samples: dict[tuple[str, frozenset[tuple[str, str]]], float] = {}
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                self.samples[sample.name, frozenset(sample.labels.items())] = sample.value

    def get(self, name: str, **labels: str) -> float:
        return self.samples.get((name, frozenset(labels.items())), 0.0)

    def label_values(self) -> set[str]:
        return {value for _, labels in self.samples for _, value in labels}


def scrape(base: str, **headers: str) -> Scrape:
    response = httpx.get(f"{base}/metrics", headers=headers)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/plain")
    return Scrape(response.text)


def scrape_when(base: str, ready: Callable[[Scrape], bool]) -> Scrape:
    """A scrape once `ready` holds: a request is counted when its last byte is sent, just after the client has it."""
    deadline = time.monotonic() + 10
    while not ready(current := scrape(base)):
        assert time.monotonic() < deadline, "the metrics never got there"
        time.sleep(0.02)
    return current


def chat(proxy_url: str, messages: list[dict[str, Any]], **extra: Any) -> httpx.Response:
    headers = extra.pop("headers", {})
    body = {"model": "gpt-4o", "messages": messages, **extra}
    return httpx.post(f"{proxy_url}/chat/completions", json=body, headers=headers, timeout=30)


def test_requests_are_counted_by_route_and_status_and_their_time_split_between_proxy_and_upstream(
    upstream: tuple[UpstreamApp, str], start_proxy: ProxyFactory
) -> None:
    _, url = upstream
    hello = [{"role": "user", "content": "hi"}]
    with start_proxy(url) as proxy_url:
        base = proxy_url.removesuffix("/v1")
        for _ in range(3):
            assert chat(proxy_url, hello).status_code == 200
        streamed = chat(proxy_url, hello, stream=True)
        assert streamed.headers["content-type"].startswith("text/event-stream") and b"[DONE]" in streamed.content
        assert httpx.get(f"{proxy_url}/models").status_code == 200
        assert httpx.get(f"{proxy_url}/no/such/thing").status_code == 404  # the upstream's 404
        slow = httpx.get(f"{proxy_url}/models", headers={"x-scenario": "slow"}, timeout=30)  # 3 s upstream
        assert slow.status_code == 200
        metrics = scrape_when(base, lambda s: s.get("inflight_requests_total", route=OTHER, status="200") == 2)
    assert metrics.get("inflight_requests_total", route=CHAT, status="200") == 4
    assert metrics.get("inflight_requests_total", route=OTHER, status="404") == 1
    for route, count in ((CHAT, 4), (OTHER, 3)):
        assert metrics.get("inflight_added_latency_seconds_count", route=route) == count
        assert metrics.get("inflight_upstream_latency_seconds_count", route=route) == count
    # The slow upstream's three seconds are the upstream's, not the proxy's.
    assert metrics.get("inflight_upstream_latency_seconds_sum", route=OTHER) >= 3
    assert metrics.get("inflight_upstream_latency_seconds_bucket", route=OTHER, le="2.5") == 2
    assert 0 < metrics.get("inflight_added_latency_seconds_sum", route=OTHER) < 1
    assert metrics.get("inflight_added_latency_seconds_bucket", route=CHAT, le="0.1") == 4
    assert not any("no/such" in value for value in metrics.label_values())  # routes are labels, never raw paths
    assert not any(name.startswith("inflight_compactions") for name, _ in metrics.samples)
    assert metrics.get("inflight_retries_total") == 0


def test_a_compaction_counts_its_actions_tokens_summarizer_calls_and_record_lookups(
    upstream: tuple[UpstreamApp, str], start_proxy: ProxyFactory
) -> None:
    app, url = upstream
    with start_proxy(url, **WINDOW) as proxy_url:
        base = proxy_url.removesuffix("/v1")
        first = chat(proxy_url, agent_conversation(120, output_lines=5))
        second = chat(proxy_url, agent_conversation(121, output_lines=5))  # the record is reused
        metrics = scrape_when(base, lambda s: s.get("inflight_requests_total", route=CHAT, status="200") == 2)
    actions = first.headers["x-inflight-actions"].split(",") + second.headers["x-inflight-actions"].split(",")
    assert (
        "summarize" in first.headers["x-inflight-actions"] and "summary-cached" in second.headers["x-inflight-actions"]
    )
    for action in set(actions):
        assert metrics.get("inflight_compactions_total", action=action) == actions.count(action), action
    assert metrics.get("inflight_compaction_tokens_count", side="before") == 2
    before = sum(int(r.headers["x-inflight-tokens-before"]) for r in (first, second))
    after = sum(int(r.headers["x-inflight-tokens-after"]) for r in (first, second))
    assert metrics.get("inflight_compaction_tokens_sum", side="before") == before
    assert metrics.get("inflight_compaction_tokens_sum", side="after") == after
    assert metrics.get("inflight_summarizer_calls_total", outcome="ok") == len(app.summaries) > 0
    assert metrics.get("inflight_summarizer_latency_seconds_count") == len(app.summaries)
    assert metrics.get("inflight_summarizer_fallbacks_total") == 0
    assert metrics.get("inflight_record_lookups_total", result="hit") >= 1  # the second turn's
    assert metrics.get("inflight_record_lookups_total", result="miss") >= 1  # the first turn's


def test_rejected_and_failed_summaries_are_counted_with_the_fallbacks_they_cause(
    upstream: tuple[UpstreamApp, str], start_proxy: ProxyFactory
) -> None:
    app, url = upstream
    with start_proxy(url, **WINDOW) as proxy_url:
        base = proxy_url.removesuffix("/v1")
        app.summarizer_reply = ("## Task\nFix the bu", "length")  # cut off: refused as truncated
        rejected = chat(proxy_url, agent_conversation(120, output_lines=5), headers={"x-inflight-session": "a"})
        app.summarizer_reply, app.summarizer_status = None, 503
        failed = chat(proxy_url, agent_conversation(120, output_lines=5), headers={"x-inflight-session": "b"})
        calls = ("inflight_summarizer_calls_total", "inflight_summarizer_latency_seconds_count")

        def settled(s: Scrape) -> bool:  # a failed background job tries once more, maybe after the answer
            by_outcome = sum(s.get(calls[0], outcome=o) for o in ("ok", "rejected", "error"))
            return by_outcome == s.get(calls[1]) == len(app.summaries)

        metrics = scrape_when(base, settled)
    assert "fallback" in rejected.headers["x-inflight-actions"] and "fallback" in failed.headers["x-inflight-actions"]
    assert metrics.get("inflight_summarizer_fallbacks_total") == 2
    assert metrics.get("inflight_compactions_total", action="fallback") == 2
    assert metrics.get("inflight_summarizer_calls_total", outcome="rejected") >= 1
    assert metrics.get("inflight_summarizer_calls_total", outcome="error") >= 1
    assert metrics.get("inflight_summarizer_calls_total", outcome="ok") == 0


def test_a_retry_is_counted_once(upstream: tuple[UpstreamApp, str], start_proxy: ProxyFactory) -> None:
    app, url = upstream
    refusal = REFUSALS[0]
    body = refusal.body if isinstance(refusal.body, bytes) else orjson.dumps(refusal.body)
    app.script.append(Scripted(status=refusal.status, body=body))
    with start_proxy(url) as proxy_url:
        base = proxy_url.removesuffix("/v1")
        response = chat(proxy_url, agent_conversation(30, output_lines=5), model="local-model")
        metrics = scrape_when(base, lambda s: s.get("inflight_requests_total", route=CHAT, status="200") == 1)
    assert response.headers["x-inflight-retried"] == "1"
    assert metrics.get("inflight_retries_total") == 1
    assert metrics.get("inflight_compactions_total", action="retry") == 1
    # Both upstream requests were waited on, the refused one and the retry: two upstream waits, one request.
    assert metrics.get("inflight_upstream_latency_seconds_count", route=CHAT) == 1
    assert len(app.chat_requests()) == 2


def test_metrics_take_an_admin_key_when_keys_are_set_and_refusals_are_counted(
    upstream: tuple[UpstreamApp, str], start_proxy: ProxyFactory
) -> None:
    _, url = upstream
    with start_proxy(url, **KEYS) as proxy_url:
        base = proxy_url.removesuffix("/v1")
        missing = httpx.get(f"{base}/metrics")
        as_client = httpx.get(f"{base}/metrics", headers={"authorization": "Bearer sk-proxy-client"})
        refused_chat = httpx.post(f"{proxy_url}/chat/completions", json={"model": "m", "messages": []})
        metrics = scrape(base, authorization="Bearer sk-proxy-admin")
    assert missing.status_code == as_client.status_code == refused_chat.status_code == 401
    assert metrics.get("inflight_requests_total", route="/metrics", status="401") == 2
    assert metrics.get("inflight_requests_total", route=CHAT, status="401") == 1


def test_any_worker_reports_every_workers_requests(upstream: tuple[UpstreamApp, str], tmp_path: Path) -> None:
    _, url = upstream
    requests = 24
    with inflight(url, f'state: {{url: "sqlite:///{tmp_path}/inflight.db"}}\n', "--workers", "2") as proxy_url:
        base = proxy_url.removesuffix("/v1")
        totals: dict[int, list[float]] = {}
        deadline = time.monotonic() + 30
        while len(totals) < 2 or sum(len(seen) for seen in totals.values()) < 6:  # both workers, several times
            assert time.monotonic() < deadline, f"scrapes reached {sorted(totals)} only"
            with httpx.Client() as client:  # a new connection: the kernel picks a worker for it
                pid = client.get(f"{base}/inflight/stats").json()["worker_pid"]
                if not totals:  # each on a connection of its own, spread across both workers
                    for _ in range(requests):
                        assert chat(proxy_url, [{"role": "user", "content": "hi"}]).status_code == 200
                    scrape_when(base, lambda s: s.get("inflight_requests_total", route=CHAT, status="200") == requests)
                text = client.get(f"{base}/metrics").text  # the same connection: the same worker
            totals.setdefault(pid, []).append(Scrape(text).get("inflight_requests_total", route=CHAT, status="200"))
    assert {total for seen in totals.values() for total in seen} == {requests}, totals
