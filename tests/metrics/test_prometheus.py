"""`Metrics` as the rest of the proxy feeds it: finished exchanges, background jobs, a failing store."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from inflight.compaction.actions import Action
from inflight.compaction.background.scheduler import BackgroundSummaries
from inflight.compaction.report import Plan, TurnReport
from inflight.config import Cache, State
from inflight.http.exchange import Exchange
from inflight.metrics.prometheus import Metrics
from inflight.records import open_record_store


def value(metrics: Metrics, name: str, **labels: str) -> float:
    found = metrics.registry.get_sample_value(name, labels)
    return 0.0 if found is None else found


def finished(metrics: Metrics, status: int, report: TurnReport) -> None:
    exchange = Exchange("POST", "/v1/chat/completions", "/v1/chat/completions", metrics.exchange_done)
    exchange.status, exchange.report = status, report
    exchange.finish()
    exchange.finish()  # counted once


def test_an_exchange_is_counted_once_with_what_its_report_says() -> None:
    metrics = Metrics()
    compacted = Plan((Action.TRUNCATE, Action.MASK, Action.FALLBACK), 9000, 2500)
    finished(metrics, 200, TurnReport(sent=compacted).retried_as(None, 2500))
    finished(metrics, 200, TurnReport(sent=Plan.untouched(10)))
    finished(metrics, 400, TurnReport(sent=Plan((Action.ERROR,), 10, 10)))
    route = "/v1/chat/completions"
    assert value(metrics, "inflight_requests_total", route=route, status="200") == 2
    assert value(metrics, "inflight_requests_total", route=route, status="400") == 1
    for action in ("truncate", "mask", "fallback", "retry", "error"):
        assert value(metrics, "inflight_compactions_total", action=action) == 1
    assert value(metrics, "inflight_compactions_total", action="none") == 0
    assert value(metrics, "inflight_summarizer_fallbacks_total") == value(metrics, "inflight_retries_total") == 1
    assert value(metrics, "inflight_compaction_tokens_sum", side="before") == 9000  # only the compacted one
    assert value(metrics, "inflight_compaction_tokens_sum", side="after") == 2500
    assert value(metrics, "inflight_added_latency_seconds_count", route=route) == 0  # no upstream answered these


def test_the_proxys_time_is_what_the_upstream_requests_did_not_take() -> None:
    # A clock that says what each moment is: 10 ms of the proxy's own work, 30 ms to the upstream's headers and
    # 30 more to a held first event; then the same for the retry.
    moments = iter([0.0, 0.01, 0.04, 0.07, 0.08, 0.11, 0.14])
    exchange = Exchange("POST", "/v1/chat/completions", clock=lambda: next(moments))
    for _ in range(2):  # a refused request, then its retry
        exchange.upstream_sending()
        exchange.upstream_answered()  # the headers
        exchange.upstream_answered()  # a held first event
    assert exchange.answered_at == pytest.approx(0.14)
    assert exchange.upstream_s == pytest.approx(0.12)  # both requests, each from its sending to its first event
    assert exchange.added_s == pytest.approx(0.02)  # the proxy's 10 ms before each


async def test_background_jobs_report_queued_and_running() -> None:
    metrics = Metrics()
    jobs = BackgroundSummaries(max_running=1, idle_s=60, observer=metrics)
    release = asyncio.Event()

    async def make() -> object:
        await release.wait()
        return None

    async def land(result: object) -> None:
        pass

    started = [jobs.start(key, b"", make, land) for key in ("a", "b")]
    await asyncio.sleep(0)  # the first job takes the only slot
    assert value(metrics, "inflight_summary_jobs", state="running") == 1
    assert value(metrics, "inflight_summary_jobs", state="queued") == 1
    release.set()
    await asyncio.gather(*(job.done.wait() for job in started if job is not None))
    assert value(metrics, "inflight_summary_jobs", state="running") == 0
    assert value(metrics, "inflight_summary_jobs", state="queued") == 0


async def test_a_failing_store_reports_each_error(tmp_path: Path) -> None:
    metrics = Metrics()
    (tmp_path / "a-directory").mkdir()
    store = open_record_store(State(url=f"sqlite:///{tmp_path}/a-directory"), Cache(), observer=metrics)
    assert await store.load("k") == []  # the file cannot be opened: memory answers
    assert value(metrics, "inflight_store_errors_total", store="sqlite") == 1
    await store.close()
