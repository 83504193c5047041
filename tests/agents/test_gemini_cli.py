"""The real Gemini CLI against the fake Gemini API, whose window its 30-step task outgrows about three times.

Gemini CLI assumes a 1,048,576-token window for every Gemini model, so its own compression never starts in
this task, and it does not retry a 400: alone it is refused at step 10 and exits. With a large window it
finishes every step, and the fake, which verifies every `thoughtSignature` it gets back and that each call
turn is answered, rejects nothing: the fake is faithful to what Gemini CLI sends. Through inflight it
finishes, told the window or learning it from the one refusal. A session resumed past its compression
threshold has its own compression answered by inflight.
"""

from __future__ import annotations

import orjson
import pytest

from inflight.config.pricing import DEFAULT_FORMAT_PRICES
from tests.agents.gemini_cli import GeminiSession, run_gemini
from tests.agents.installed import required_binary
from tests.conftest import ProxyFactory
from tests.support.gemini import GeminiTaskAgent
from tests.support.responses import TASK_MARKER, last_step
from tests.support.servers import serve
from tests.support.upstream import UpstreamApp

BINARY = required_binary("gemini", "INFLIGHT_GEMINI", agent="Gemini CLI", package="@google/gemini-cli")

STEPS = 30
OUTPUT_LINES = 170  # each step: about 3.5k tokens; its first request alone is about 12k (instructions, 16 tools)
WINDOW = 45_000  # outgrown at step 10; the whole task is about 115k tokens
LARGE_WINDOW = 1_000_000
PROMPT = f"Do the {TASK_MARKER}: run the steps one by one."
MODEL = "gemini-2.5-pro"


def fake_upstream(window: int) -> UpstreamApp:
    app = UpstreamApp(windows={MODEL: window})
    app.gemini.agent = GeminiTaskAgent(steps=STEPS, output_lines=OUTPUT_LINES)
    return app


def steps_done(app: UpstreamApp) -> int:
    """The highest step whose output reached the upstream: how far Gemini CLI got."""
    return last_step(app.gemini_requests()[-1].body.decode(), STEPS)


def report(app: UpstreamApp, label: str) -> None:
    fake = app.gemini
    share = fake.cached_tokens / max(fake.prompt_tokens, 1)
    print(
        f"\n{label}: {len(app.gemini_requests())} requests, {fake.refused} refused, {fake.signatures_seen} "
        f"signatures verified, cached share {share:.1%}, inflight's summaries {len(app.summaries)}"
    )


def test_gemini_cli_alone_runs_out_of_room() -> None:
    assert BINARY is not None
    app = fake_upstream(WINDOW)
    with serve(app) as url:
        run = run_gemini(BINARY, url.removesuffix("/v1"), PROMPT, model=MODEL, timeout_s=300)
    assert "FINISHED" not in run.output
    assert "exceeds the maximum number of tokens allowed" in run.output  # it exits on the 400
    assert app.gemini.refused == 1 and 8 <= steps_done(app) <= 12
    assert app.gemini.rejected == []
    report(app, f"{MODEL} alone, window {WINDOW}")


def test_gemini_cli_finishes_every_step_in_a_large_window() -> None:
    assert BINARY is not None
    app = fake_upstream(LARGE_WINDOW)
    with serve(app) as url:
        run = run_gemini(BINARY, url.removesuffix("/v1"), PROMPT, model=MODEL, timeout_s=300)
    assert run.returncode == 0, run.output[-2000:]
    assert f"All {STEPS} steps are done. FINISHED" in run.output
    assert steps_done(app) == STEPS
    assert app.gemini.rejected == [] and app.gemini.refused == 0 and app.gemini.signatures_seen > STEPS
    report(app, f"{MODEL} alone, window {LARGE_WINDOW}")


@pytest.mark.parametrize("told", [False, True], ids=["learned", "told"])
def test_gemini_cli_finishes_every_step_through_inflight(start_proxy: ProxyFactory, told: bool) -> None:
    """Compacted before a refusal reaches it: every signed turn verbatim or dropped whole, every request the
    upstream got after inflight knew the window inside it."""
    assert BINARY is not None
    app = fake_upstream(WINDOW)
    models = {MODEL: {"context_window": WINDOW}} if told else {}
    with serve(app) as url:
        upstreams = {"gemini": {"base_url": url.removesuffix("/v1")}}
        with start_proxy(url, models=models, upstreams=upstreams) as proxy_url:
            run = run_gemini(BINARY, proxy_url.removesuffix("/v1"), PROMPT, model=MODEL, timeout_s=600)
    assert run.returncode == 0, run.output[-2000:]
    assert f"All {STEPS} steps are done. FINISHED" in run.output
    assert "exceeds the maximum number of tokens allowed" not in run.output  # Gemini CLI never saw a refusal
    assert steps_done(app) == STEPS
    assert app.gemini.rejected == []  # every thoughtSignature verbatim, every call answered
    assert app.gemini.refused == (0 if told else 1)  # learned once, from the first refusal
    report(app, f"{MODEL} through inflight, window {WINDOW}, told={told}")


def test_gemini_clis_own_compression_is_answered_by_inflight_and_the_session_goes_on(
    start_proxy: ProxyFactory,
) -> None:
    """A session resumed with a new prompt, its compression threshold passed: Gemini CLI's snapshot request and
    its verifying one are answered by inflight from one summary, none reaching the upstream's model, and the
    session goes on from the snapshot it installed."""
    assert BINARY is not None
    app = fake_upstream(LARGE_WINDOW)
    app.gemini.agent = GeminiTaskAgent(steps=3, output_lines=50)
    with serve(app) as url:
        upstreams = {"gemini": {"base_url": url.removesuffix("/v1")}}
        models = {MODEL: {"context_window": 20_000}}
        with start_proxy(url, models=models, upstreams=upstreams) as proxy_url:
            origin = proxy_url.removesuffix("/v1")
            with GeminiSession(BINARY, origin, compression_threshold=0.001) as session:
                first = session.run(PROMPT, model=MODEL, timeout_s=300)
                later = session.run("Go on.", model=MODEL, resume=True, timeout_s=300)
    assert first.returncode == 0 and "All 3 steps are done. FINISHED" in first.output, first.output[-2000:]
    assert later.returncode == 0, later.output[-2000:]
    assert app.gemini.compressions == 0  # neither request reached the model: inflight answered both
    assert len(app.summaries) >= 1  # inflight's own summary, through the Gemini API
    resumed = app.gemini_requests()[-1].json()["contents"]
    assert "<state_snapshot>" in orjson.dumps(resumed[0]).decode() and TASK_MARKER in orjson.dumps(resumed).decode()
    assert resumed[-1]["parts"] == [{"text": "Go on."}]
    assert app.gemini.rejected == [] and app.gemini.refused == 0


def test_gemini_cli_through_inflight_costs_at_most_0_8_of_the_task_with_no_window(start_proxy: ProxyFactory) -> None:
    """At Gemini's prices (an implicit-cache read about a quarter of an input token, no write premium, output 5),
    with inflight's summaries billed too: each request stays under the window instead of growing to about 115k."""
    assert BINARY is not None
    prices = DEFAULT_FORMAT_PRICES["gemini"]
    unbounded = fake_upstream(LARGE_WINDOW)
    with serve(unbounded) as url:
        alone = run_gemini(BINARY, url.removesuffix("/v1"), PROMPT, model=MODEL, timeout_s=300)
    bounded = fake_upstream(WINDOW)
    with serve(bounded) as url:
        upstreams = {"gemini": {"base_url": url.removesuffix("/v1")}}
        models = {MODEL: {"context_window": WINDOW}}
        with start_proxy(url, models=models, upstreams=upstreams) as proxy_url:
            through = run_gemini(BINARY, proxy_url.removesuffix("/v1"), PROMPT, model=MODEL, timeout_s=600)
    assert "FINISHED" in alone.output and "FINISHED" in through.output
    ratio = bounded.bill.cost(prices) / unbounded.bill.cost(prices)
    print(f"\ncost through inflight at {WINDOW}: {ratio:.2f}x the task with no window")
    assert bounded.bill.requests("summary") > 0 and ratio <= 0.8
