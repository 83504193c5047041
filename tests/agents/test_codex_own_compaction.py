"""The real Codex CLI compacting by itself, straight to the fake upstream: told a small window and a low
auto-compaction limit, it sends its own compaction request (the whole history, then its "CONTEXT
CHECKPOINT COMPACTION" prompt) through the Responses API, starts again from the fake agent's summary,
and still finishes the task without running a step twice.
"""

from __future__ import annotations

from tests.agents.codex import run_codex
from tests.agents.installed import required_binary
from tests.support.responses import CHECKPOINT, TASK_MARKER, TaskAgent, last_step, steps_done
from tests.support.servers import serve
from tests.support.upstream import UpstreamApp

BINARY = required_binary("codex", "INFLIGHT_CODEX", agent="the Codex CLI", package="@openai/codex")

STEPS = 8
OUTPUT_LINES = 200  # each step's output: about 4k tokens
WINDOW = 24_000
LIMIT = 16_000  # Codex compacts past this: every two or three steps
MODEL = "gpt-5.1-codex"
PROMPT = f"Do the {TASK_MARKER}: run the steps one by one."


def test_codex_compacts_itself_and_goes_on_from_the_summary() -> None:
    assert BINARY is not None
    app = UpstreamApp(windows={MODEL: WINDOW})
    app.responses.agent = TaskAgent(steps=STEPS, output_lines=OUTPUT_LINES)
    with serve(app) as url:
        run = run_codex(
            BINARY, f"{url}/v1", PROMPT, model=MODEL, context_window=WINDOW, auto_compact_limit=LIMIT, timeout_s=180
        )
    assert run.returncode == 0, run.output[-2000:]
    assert f"All {STEPS} steps are done. FINISHED" in run.output
    requests = app.responses_requests()
    compactions = [r for r in requests if CHECKPOINT in r.body.decode()[-2000:]]
    assert len(compactions) == app.bill.requests("own compaction") >= 1
    assert app.responses.refused == 0 and app.responses.rejected == []
    assert last_step(requests[-1].body.decode(), STEPS) == STEPS
    turns = [steps_done(r.json()["input"]) for r in requests if r not in compactions]
    assert turns == list(range(STEPS + 1))  # each step once, in order, across the compactions
