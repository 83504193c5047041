"""The real Codex CLI's 30-step task against the fake upstream, directly and through inflight, with cache figures.

    python -m benchmarks.codex [--window 48000] [--steps 30] [--lines 200]

Runs `codex exec` (the binary `.ci/run` installs under `.cache/agents/`, or `INFLIGHT_CODEX`) in both
of its modes (function tools, and its default model's code mode) against the fake upstream's Responses
API, whose window the task outgrows around step 9. The runs: straight to the upstream with no window,
straight to it with the window, and through inflight, either learning the window or told it.
Prints, per run, the steps finished, the requests the upstream answered and refused, and the share
of prompt tokens its simulated prompt cache served. Asserts nothing.
"""

from __future__ import annotations

import argparse

from benchmarks.harness import table
from inflight.app import create_app
from inflight.config import load_settings
from inflight.http.server import uvicorn_options
from tests.agents.codex import DEFAULT_MODEL, codex_binary, run_codex
from tests.support.responses import TASK_MARKER, TaskAgent, last_step
from tests.support.servers import serve
from tests.support.upstream import UpstreamApp

SHAPES = {"function tools": "gpt-5.1-codex", "code mode": None}  # None: Codex's default model
PROMPT = f"Do the {TASK_MARKER}: run the steps one by one."


def run(binary: str, model: str | None, *, window: int | None, via: str, steps: int, lines: int) -> list[object]:
    name = model or DEFAULT_MODEL
    app = UpstreamApp(windows={name: window} if window else {})
    app.responses.agent = TaskAgent(steps=steps, output_lines=lines)
    with serve(app) as url:
        if via == "direct":
            done = run_codex(binary, f"{url}/v1", PROMPT, model=model)
        else:
            models = {name: {"context_window": window}} if via == "told" else {}
            settings = load_settings(None, overrides={"upstream": {"base_url": f"{url}/v1"}, "models": models})
            with serve(create_app(settings), **{**uvicorn_options(settings), "log_level": "warning"}) as proxy:
                done = run_codex(binary, f"{proxy}/v1", PROMPT, model=model)
    answered = app.responses_requests()
    last = answered[-1].body.decode() if answered else ""
    finished = last_step(last, steps)
    cached = app.responses.cached_tokens / max(app.responses.input_tokens, 1)
    return [
        f"{finished}/{steps}" + (" FINISHED" if "FINISHED" in done.output else ""),
        len(answered) - app.responses.refused,
        app.responses.refused,
        f"{cached:.1%}",
    ]


def arguments() -> argparse.ArgumentParser:
    """The command line (`tests/test_docs.py` checks each command the docs show against it)."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--window", type=int, default=48_000, help="the fake upstream's window (tokens)")
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--lines", type=int, default=200, help="lines each step's command prints")
    return parser


def main() -> None:
    args = arguments().parse_args()
    binary = codex_binary()
    if binary is None:
        raise SystemExit("the Codex CLI is not installed: npm install --prefix .cache/agents @openai/codex@0.169.0")
    rows = []
    for shape, model in SHAPES.items():
        for label, window, via in (
            ("alone, no window", None, "direct"),
            ("alone", args.window, "direct"),
            ("inflight, learns the window", args.window, "learned"),
            ("inflight, told the window", args.window, "told"),
        ):
            rows.append([shape, label, *run(binary, model, window=window, via=via, steps=args.steps, lines=args.lines)])
    header = ["shape", "run", "steps", "answered", "refused", "cached share"]
    print(table(rows, header))


if __name__ == "__main__":
    main()
