"""The real Codex CLI through inflight, over a fake upstream whose window its 30-step task outgrows.

Without inflight Codex dies around step 9 ("ran out of room in the model's context window"). Through
it, Codex must finish every step: with the function tools of most models and with the code mode of
its default model (a custom `exec` tool whose input is JavaScript), with the refusal as an HTTP 400
or inside the stream, with inflight told the window or left to learn it from the refusals. The
fake verifies every reasoning item it gets back and every call's output, and reports the share of
prompt tokens its simulated prompt cache served (printed; the figure is in README).
"""

from __future__ import annotations

import pytest

from tests.agents.codex import DEFAULT_MODEL, run_codex
from tests.agents.installed import required_binary
from tests.conftest import ProxyFactory
from tests.support.responses import TASK_MARKER, TaskAgent, last_step
from tests.support.servers import serve
from tests.support.upstream import UpstreamApp

BINARY = required_binary("codex", "INFLIGHT_CODEX", agent="the Codex CLI", package="@openai/codex")

STEPS = 30
OUTPUT_LINES = 200  # each step's output: about 4k tokens
WINDOW = 48_000  # outgrown around step 9
PROMPT = f"Do the {TASK_MARKER}: run the steps one by one."
FUNCTION_TOOLS = "gpt-5.1-codex"  # exec_command and friends as top-level function tools


def fake_upstream(model: str, *, in_stream: bool) -> UpstreamApp:
    app = UpstreamApp(windows={model: WINDOW})
    app.responses.agent = TaskAgent(steps=STEPS, output_lines=OUTPUT_LINES)
    app.responses.refusal_in_stream = in_stream
    return app


def steps_done(app: UpstreamApp) -> int:
    """The highest step whose output reached the upstream: how far Codex got."""
    return last_step(app.responses_requests()[-1].body.decode(), STEPS)


def test_codex_alone_runs_out_of_room() -> None:
    assert BINARY is not None
    app = fake_upstream(FUNCTION_TOOLS, in_stream=False)
    with serve(app) as url:
        run = run_codex(BINARY, f"{url}/v1", PROMPT, model=FUNCTION_TOOLS)
    assert run.returncode != 0 and "FINISHED" not in run.output
    assert "context window" in run.output
    assert app.responses.refused == 1 and 5 <= steps_done(app) <= 12


@pytest.mark.parametrize(
    ("model", "in_stream", "told"),
    [
        (FUNCTION_TOOLS, False, False),
        (FUNCTION_TOOLS, True, True),
        (DEFAULT_MODEL, True, False),
        (DEFAULT_MODEL, False, True),
    ],
    ids=[
        "function-tools-http-learned",
        "function-tools-stream-told",
        "code-mode-stream-learned",
        "code-mode-http-told",
    ],
)
def test_codex_finishes_every_step_through_inflight(
    start_proxy: ProxyFactory, model: str, in_stream: bool, told: bool
) -> None:
    assert BINARY is not None
    app = fake_upstream(model, in_stream=in_stream)
    models = {model: {"context_window": WINDOW}} if told else {}
    with serve(app) as url, start_proxy(f"{url}/v1", models=models) as proxy_url:
        run = run_codex(BINARY, proxy_url, PROMPT, model=None if model == DEFAULT_MODEL else model)
    assert run.returncode == 0, run.output[-2000:]
    assert f"All {STEPS} steps are done. FINISHED" in run.output
    assert steps_done(app) == STEPS
    assert app.responses.rejected == []  # every reasoning item verbatim, every call with its output
    # Told, no refusal; learning, one: a refusal without numbers still brackets the window (`policy.bracket`).
    assert app.responses.refused == (0 if told else 1)
    cached = app.responses.cached_tokens / app.responses.input_tokens
    print(
        f"\n{model} refusal={'stream' if in_stream else 'http'} told={told}: "
        f"{len(app.responses_requests())} requests, {app.responses.refused} refused, cached share {cached:.1%}"
    )
