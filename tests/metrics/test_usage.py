"""Usage and savings per client: `/inflight/usage` and the `inflight_client_*` series add up to the log lines of
the same run, and the client label stays bounded however many keys clients send."""

from __future__ import annotations

import dataclasses
import logging
import re
from typing import Any

import httpx
import pytest

from inflight.compaction.actions import Action
from inflight.compaction.report import CacheFigures, Plan, TurnReport, Window
from inflight.http.exchange import Exchange
from inflight.metrics.prometheus import Metrics
from inflight.metrics.usage import OTHER, ClientUsage, used_by
from inflight.policy.tenants import tenant_of
from tests.compaction.test_compactor import agent_conversation
from tests.conftest import ProxyFactory
from tests.http.test_metrics import Scrape, scrape
from tests.support.logs import log_lines
from tests.support.upstream import UpstreamApp
from tests.support.waiting import wait_until

# A 4,000-token window: the long conversation is compacted (summarized on the turn: no background job to wait
# for), the short one is not.
SETTINGS: dict[str, Any] = {
    "models": {"*": {"context_window": 4000}},
    "compaction": {"summarize": {"background_at": None}},
    "archive": {"enabled": True},
}
FIELD = re.compile(r" (\w+)=(\S+)")


def figures_of(lines: list[str]) -> dict[str, dict[str, int]]:
    """Per client, what its requests' log lines say: tokens sent by the client and upstream, cost, refusals
    avoided (a compacted request over the window)."""
    clients: dict[str, dict[str, int]] = {}
    for line in lines:
        fields = dict(FIELD.findall(line))
        tally = clients.setdefault(fields["client"], dict.fromkeys(("requests", "client", "upstream", "cost"), 0))
        tally.setdefault("avoided", 0)
        client = int(fields["tokens"].split("/")[0])
        upstream = int(fields["compacted"].split("->")[1].split("/")[0]) if "compacted" in fields else client
        tally["requests"] += 1
        tally["client"] += client
        tally["upstream"] += upstream
        tally["cost"] += int(fields.get("cost", 0))
        tally["avoided"] += int("compacted" in fields and client > int(fields["window"]))
    return clients


def test_two_clients_usage_and_metrics_add_up_to_their_log_lines(
    upstream: tuple[UpstreamApp, str], start_proxy: ProxyFactory, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="inflight")
    _, url = upstream
    long, short = agent_conversation(120, output_lines=5), [{"role": "user", "content": "Say hello."}]
    with start_proxy(url, **SETTINGS) as proxy_url:
        for key, messages, times in (("sk-client-a", long, 2), ("sk-client-b", short, 3)):
            for _ in range(times):
                body = {"model": "gpt-4o", "messages": messages}
                answer = httpx.post(
                    f"{proxy_url}/chat/completions", json=body, headers={"authorization": f"Bearer {key}"}, timeout=30
                )
                assert answer.status_code == 200, answer.text
        lines = log_lines(caplog, "POST /v1/chat/completions 200", count=5)
        base = proxy_url.removesuffix("/v1")
        usage = httpx.get(f"{base}/inflight/usage", timeout=10).json()
        metrics = scrape(base)
        wait_until(lambda: sum(c["turn_count"] for c in conversations(base)) == 5, timeout=30)  # written behind
        archived = [
            httpx.get(f"{base}/inflight/conversations/{c['id']}", timeout=10).json()["usage"]
            for c in conversations(base)
        ]
    logged = figures_of(lines)
    a, b = (tenant_of([(b"authorization", f"Bearer {key}".encode())])[:16] for key in ("sk-client-a", "sk-client-b"))
    assert set(logged) == {a, b} == set(usage["clients"])
    for client in (a, b):
        tally, shown = logged[client], usage["clients"][client]
        assert shown["requests"] == tally["requests"] == metrics.get("inflight_client_requests_total", client=client)
        for kind in ("client", "upstream"):
            assert shown[f"{kind}_tokens"] == tally[kind] == series(metrics, client, kind)
        assert shown["saved_tokens"] == tally["client"] - tally["upstream"] == series(metrics, client, "saved")
        assert shown["cost_units"] == tally["cost"]
        assert shown["refusals_avoided"] == tally["avoided"]
        assert shown["summarizer_tokens"] == series(metrics, client, "summarizer")
    assert usage["clients"][a]["saved_tokens"] > 0 and usage["clients"][a]["refusals_avoided"] >= 1
    assert usage["clients"][a]["summarizer_tokens"] > 0 and usage["clients"][b]["summarizer_tokens"] == 0
    assert usage["clients"][b]["saved_tokens"] == 0
    assert usage["total"]["requests"] == 5 and usage[OTHER]["requests"] == 0
    # The archive's per-conversation figures (one conversation each) add up to the same.
    assert sorted(c["requests"] for c in archived) == [2, 3]
    for kind in ("client_tokens", "upstream_tokens", "saved_tokens", "refusals_avoided"):
        assert sum(c[kind] for c in archived) == usage["total"][kind], kind


def conversations(base: str) -> list[dict[str, Any]]:
    return httpx.get(f"{base}/inflight/conversations", timeout=10).json()["conversations"]  # type: ignore[no-any-return]


def series(metrics: Scrape, client: str, kind: str) -> int:
    return int(metrics.get("inflight_client_tokens_total", client=client, kind=kind))


def finished(client: str, tokens: int) -> Exchange:
    """A conversation request's exchange as the edge leaves it: answered, its report, its client."""
    exchange = Exchange("POST", "/v1/chat/completions", "/v1/chat/completions")
    exchange.status, exchange.client = 200, client
    plan = Plan((Action.MASK,), tokens, tokens // 2)
    exchange.report = TurnReport(window=Window(tokens, 128_000, 96_000), sent=plan, cache=CacheFigures(0.5, False))
    return exchange


def test_the_client_label_stays_bounded_under_ten_thousand_keys_and_the_totals_stay_whole() -> None:
    """10,000 clients of 100 tokens a request, then a few sending far more: these get labels of their own (they
    are the top clients), every other client is `other`, and no client's tokens are lost from the sum."""
    metrics = Metrics(top_clients=10)
    for n in range(10_000):
        metrics.exchange_done(finished(f"{n:016x}{0:08x}", 100))
    heavy = [f"f{n:015x}{0:08x}" for n in range(5)]
    for client in heavy:
        metrics.exchange_done(finished(client, 1_000_000))
    scraped = Scrape(metrics.render("")[0].decode())
    labels = {value for (name, labels), _ in scraped.samples.items() for key, value in labels if key == "client"}
    assert len(labels) <= 2 * 10 + 1 and OTHER in labels
    assert {client[:16] for client in heavy} <= labels
    total = sum(
        value
        for (name, labels), value in scraped.samples.items()
        if name == "inflight_client_tokens_total" and ("kind", "client") in labels
    )
    assert total == 10_000 * 100 + 5 * 1_000_000
    report = metrics.usage.report(limit=5)
    assert set(report["clients"]) == {client[:16] for client in heavy}
    assert report["total"]["client_tokens"] == total


def test_a_compaction_that_came_out_longer_saved_nothing_rather_than_a_negative_count() -> None:
    """A forced compaction of a short history (an agent's own compaction request) can add more than it removes:
    the client's savings stay at zero, which a Prometheus counter can take (it never goes down)."""
    grown = TurnReport(window=Window(900, 8000, 6000), sent=Plan((Action.SUMMARIZE,), 900, 1100))
    usage = used_by(grown, status=200)
    assert (usage.client_tokens, usage.upstream_tokens, usage.saved_tokens) == (900, 1100, 0)


def test_adding_one_clients_usage_to_another_adds_every_figure() -> None:
    one = ClientUsage(**{item.name: index + 1 for index, item in enumerate(dataclasses.fields(ClientUsage))})
    total = ClientUsage(**{item.name: 100 for item in dataclasses.fields(ClientUsage)})
    total.add(one)
    assert dataclasses.asdict(total) == {name: 100 + value for name, value in dataclasses.asdict(one).items()}


def test_a_report_with_the_caches_figures_keeps_everything_else() -> None:
    """Every field but the cache is set to a value of its own, so a field `with_cache` missed would show."""
    values: dict[str, Any] = {
        "window": Window(10, 100, 90),
        "sent": Plan((Action.MASK,), 10, 5, "c1"),
        "shadow": Plan((Action.SUMMARIZE,), 10, 4, "c2"),
        "shadow_mode": True,
        "retried": True,
        "degraded": True,
        "retrieved": 2,
        "unavailable": 1,
    }
    names = {item.name for item in dataclasses.fields(TurnReport)}
    assert names == {*values, "cache"}  # a new field needs a value here
    report = TurnReport(**values)
    figures = CacheFigures(0.5, rewrite=True, cost=3, cost_client=4)
    with_figures = report.with_cache(figures)
    assert with_figures.cache is figures
    assert {name: getattr(with_figures, name) for name in values} == values


@pytest.mark.parametrize("status", [400, 413, 429, 502])
def test_a_refused_or_failed_request_adds_itself_and_no_tokens_nor_cost(status: int) -> None:
    refused = TurnReport(
        window=Window(9000, 8000, 6000), sent=Plan((Action.MASK,), 9000, 5000), cache=CacheFigures(0.5, False, 10, 20)
    )
    assert dataclasses.asdict(used_by(refused, status=status)) == dataclasses.asdict(ClientUsage(requests=1))
    answered = used_by(refused, status=200)
    assert (answered.client_tokens, answered.saved_tokens, answered.cost_units) == (9000, 4000, 10)
    assert used_by(refused, status=499).cost_units == 0  # the client left before its answer began
    assert used_by(refused, status=200, answered=False).cost_units == 0  # an error after a keep-alive's 200
