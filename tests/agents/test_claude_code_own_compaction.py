"""The real Claude Code compacting by itself through inflight: each of its compaction requests is answered by
inflight from its own summary, and none reaches the upstream.

Its auto-compaction is made to fire early, at about 22-27k tokens (below inflight's thresholds in the fake's
55k window), so it compacts every few steps of the 30-step task; and a user's `/compact <instructions>`, typed in
the session resumed, reaches inflight's summarizer with the instructions.
"""

from __future__ import annotations

import httpx

from tests.agents.claude_code import run_claude
from tests.agents.installed import required_binary
from tests.conftest import ProxyFactory
from tests.support.messages import COMPACTION_REQUEST, MessagesTaskAgent
from tests.support.responses import TASK_MARKER, last_step
from tests.support.servers import serve
from tests.support.upstream import UpstreamApp

BINARY = required_binary("claude", "INFLIGHT_CLAUDE", agent="Claude Code", package="@anthropic-ai/claude-code")

STEPS = 30
OUTPUT_LINES = 60  # about 1.4k tokens a step: longer steps leave it too little room between compactions
WINDOW = 55_000
MODEL = "claude-sonnet-4-5"
PROMPT = f"Do the {TASK_MARKER}: run the steps one by one."
EARLY = {"CLAUDE_CODE_AUTO_COMPACT_WINDOW": "100000", "CLAUDE_AUTOCOMPACT_PCT_OVERRIDE": "30"}


def test_claude_codes_early_compactions_are_all_answered_by_inflight_and_it_finishes(
    start_proxy: ProxyFactory,
) -> None:
    assert BINARY is not None
    app = UpstreamApp(windows={MODEL: WINDOW})
    app.messages.agent = MessagesTaskAgent(steps=STEPS, output_lines=OUTPUT_LINES)
    with serve(app) as url, start_proxy(f"{url}/v1", models={MODEL: {"context_window": WINDOW}}) as proxy_url:
        run = run_claude(
            BINARY, proxy_url.removesuffix("/v1"), PROMPT, model=MODEL, own_compaction=True, env=EARLY, timeout_s=300
        )
        metrics = app_metrics(proxy_url)
    assert run.returncode == 0, run.output[-2000:]
    assert f"All {STEPS} steps are done. FINISHED" in run.output
    bodies = [request.body.decode() for request in app.messages_requests()]
    assert not any(COMPACTION_REQUEST in body for body in bodies)  # every one was answered by inflight
    assert last_step(bodies[-1], STEPS) == STEPS
    assert answered_count(metrics) >= 3  # the agent compacted every few steps, and inflight answered each
    assert app.messages.refused == 0 and app.messages.rejected == []


def test_compact_with_instructions_in_a_resumed_session_reaches_the_summarizer(start_proxy: ProxyFactory) -> None:
    assert BINARY is not None
    app = UpstreamApp(windows={MODEL: WINDOW})
    app.messages.agent = MessagesTaskAgent(steps=4, output_lines=OUTPUT_LINES)
    with serve(app) as url, start_proxy(f"{url}/v1", models={MODEL: {"context_window": WINDOW}}) as proxy_url:
        run = run_claude(
            BINARY,
            proxy_url.removesuffix("/v1"),
            PROMPT,
            model=MODEL,
            own_compaction=True,
            then=("/compact focus on the failing tests",),
            timeout_s=120,
        )
    assert run.returncode == 0, run.output[-2000:]
    assert '"local_command":"compact"' in run.output.replace(" ", "")
    [summary] = app.summaries  # asked once, for this compaction, with the user's instructions
    assert "focus on the failing tests" in summary.body.decode()
    assert not any(COMPACTION_REQUEST in request.body.decode() for request in app.messages_requests())


def app_metrics(proxy_url: str) -> str:
    return httpx.get(proxy_url.removesuffix("/v1") + "/metrics").text


def answered_count(metrics: str) -> float:
    """`inflight_compactions_total{action="answered-compaction"}`'s value."""
    for line in metrics.splitlines():
        if line.startswith("inflight_compactions_total{") and 'action="answered-compaction"' in line:
            return float(line.rsplit(" ", 1)[1])
    return 0.0
