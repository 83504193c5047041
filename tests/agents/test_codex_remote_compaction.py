"""The real Codex CLI with OpenAI as its provider, through inflight: its remote compaction (`remote_compaction_v2`,
a `compaction_trigger` item at the end of an otherwise normal request) is answered by inflight with one sealed
`compaction` item. The trigger never reaches the upstream, Codex installs the item, and inflight opens it on every
later turn, so Codex finishes the task without running a step twice.
"""

from __future__ import annotations

import orjson

from tests.agents.codex import run_codex
from tests.agents.installed import required_binary
from tests.conftest import ProxyFactory
from tests.support.responses import TASK_MARKER, TaskAgent, last_step, steps_done
from tests.support.servers import serve
from tests.support.upstream import UpstreamApp

BINARY = required_binary("codex", "INFLIGHT_CODEX", agent="the Codex CLI", package="@openai/codex")

STEPS = 12
OUTPUT_LINES = 60  # each step's output: about 1.4k tokens
WINDOW = 52_000
LIMIT = 20_000  # Codex compacts past this, below inflight's thresholds: every few steps
MODEL = "gpt-5.1-codex"
PROMPT = f"Do the {TASK_MARKER}: run the steps one by one."


def test_codexs_remote_compaction_is_answered_with_a_sealed_item_and_never_reaches_the_upstream(
    start_proxy: ProxyFactory,
) -> None:
    assert BINARY is not None
    app = UpstreamApp(windows={MODEL: WINDOW})
    app.responses.agent = TaskAgent(steps=STEPS, output_lines=OUTPUT_LINES)
    models = {MODEL: {"context_window": WINDOW}}
    with serve(app) as url, start_proxy(f"{url}/v1", models=models) as proxy_url:
        run = run_codex(
            BINARY,
            proxy_url,
            PROMPT,
            model=MODEL,
            context_window=WINDOW,
            auto_compact_limit=LIMIT,
            timeout_s=300,
            openai_provider=True,
        )
    assert run.returncode == 0, run.output[-2000:]
    assert f"All {STEPS} steps are done. FINISHED" in run.output
    requests = app.responses_requests()
    bodies = [request.body.decode() for request in requests]
    assert not any("compaction_trigger" in body for body in bodies)  # every trigger was answered by inflight
    assert not any("inflight2." in body for body in bodies)  # the upstream only ever gets the opened summary
    opened = [body for body in bodies if "[Previous conversation summary]" in body]
    assert opened  # Codex installed the item and sent it back: at least one turn went on from it
    assert app.responses.rejected == [] and app.responses.refused == 0
    assert last_step(bodies[-1], STEPS) == STEPS
    turns = [steps_done(orjson.loads(body)["input"]) for body in bodies]
    assert turns == sorted(turns) and turns[-1] == STEPS  # never back to an earlier step
