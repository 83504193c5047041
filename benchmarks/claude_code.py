"""The real Claude Code's 30-step task against the fake upstream, directly and through inflight, with cache figures.

    python -m benchmarks.claude_code [--window 55000] [--steps 30] [--lines 170] [--model claude-sonnet-4-5]

Runs `claude -p` (the binary `.ci/run` installs under `.cache/agents/`, or `INFLIGHT_CLAUDE`) against
the fake upstream's Messages API, whose window the task outgrows at step 10. The runs: straight to the
upstream with no window; with the window (Claude Code's own compaction off, then on); through inflight,
either learning the window or told it, with Claude Code's own compaction off or on; and against an
upstream that refuses `context_management`. Prints, per run, the steps finished, the requests the
upstream answered and refused, the summaries Claude Code asked for itself and those inflight asked for
(in the background, through the Messages API), and the share of prompt tokens the fake's simulated
prompt cache served (counting inflight's summaries, which are never cached). Asserts nothing.
"""

from __future__ import annotations

import argparse

from benchmarks.harness import table
from inflight.app import create_app
from inflight.config import load_settings
from inflight.http.server import uvicorn_options
from tests.agents.claude_code import claude_binary, run_claude
from tests.support.messages import COMPACTION_REQUEST, MessagesTaskAgent
from tests.support.responses import TASK_MARKER, last_step
from tests.support.servers import serve
from tests.support.upstream import UpstreamApp

PROMPT = f"Do the {TASK_MARKER}: run the steps one by one."
RUNS = (  # label, the window enforced, how (direct, learned, told, counted), its own compaction, context_management
    ("alone, no window", None, "direct", False, True),
    ("alone", "window", "direct", False, True),
    ("alone, its own compaction on", "window", "direct", True, True),
    ("inflight, learns the window", "window", "learned", False, True),
    ("inflight, told the window", "window", "told", False, True),
    ("inflight, told, count_tokens near thresholds", "window", "counted", False, True),
    ("inflight, learns, its own compaction on", "window", "learned", True, True),
    ("inflight, learns, upstream without context_management", "window", "learned", False, False),
)


def run(binary: str, args: argparse.Namespace, window: int | None, via: str, own: bool, managed: bool) -> list[object]:
    app = UpstreamApp(windows={args.model: window} if window else {})
    app.messages.agent = MessagesTaskAgent(steps=args.steps, output_lines=args.lines)
    app.messages.supports_context_management = managed
    with serve(app) as url:
        if via == "direct":
            done = run_claude(binary, url, PROMPT, model=args.model, own_compaction=own)
        else:
            models = {args.model: {"context_window": window}} if via in ("told", "counted") else {}
            overrides = {"upstream": {"base_url": f"{url}/v1"}, "models": models}
            if via == "counted":
                overrides["messages"] = {"count_tokens": "near"}
            settings = load_settings(None, overrides=overrides)
            with serve(create_app(settings), **{**uvicorn_options(settings), "log_level": "warning"}) as proxy:
                done = run_claude(binary, proxy, PROMPT, model=args.model, own_compaction=own)
    answered = app.messages_requests()
    last = answered[-1].body.decode() if answered else ""
    finished = last_step(last, args.steps)
    summaries = sum(1 for r in answered if COMPACTION_REQUEST in r.body.decode())
    fake = app.messages
    return [
        f"{finished}/{args.steps}" + (" FINISHED" if "FINISHED" in done.output else ""),
        len(answered) - fake.refused - len(fake.rejected),
        fake.refused,
        summaries,
        len(app.summaries),
        sum(1 for r in app.requests if r.path == "/v1/messages/count_tokens"),
        f"{app.cached_share():.1%}",
    ]


def arguments() -> argparse.ArgumentParser:
    """The command line (`tests/test_docs.py` checks each command the docs show against it)."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--window", type=int, default=55_000, help="the fake upstream's window (tokens)")
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--lines", type=int, default=170, help="lines each step's command prints")
    parser.add_argument("--model", default="claude-sonnet-4-5")
    return parser


def main() -> None:
    args = arguments().parse_args()
    binary = claude_binary()
    if binary is None:
        raise SystemExit("Claude Code is not installed: npm install --prefix .cache/agents @anthropic-ai/claude-code")
    rows = []
    for label, window, via, own, managed in RUNS:
        size = args.window if window else None
        rows.append([label, *run(binary, args, size, via, own, managed)])
    print(f"{args.model}, window {args.window}, {args.steps} steps of {args.lines} lines")
    header = ["run", "steps", "answered", "refused", "its own summaries", "inflight's summaries", "counts asked"]
    header.append("cached share")
    print(table(rows, header))


if __name__ == "__main__":
    main()
