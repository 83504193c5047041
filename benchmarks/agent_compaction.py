"""The real agents' own compaction, fired early, straight to the fake upstream and answered by inflight.

    python -m benchmarks.agent_compaction [--agent claude|codex|codex-openai|all] [--steps 30] [--lines 60]

Claude Code's auto-compaction is made to fire at about 22-27k tokens (`CLAUDE_CODE_AUTO_COMPACT_WINDOW=100000`
with `CLAUDE_AUTOCOMPACT_PCT_OVERRIDE=30`), Codex's at `model_auto_compact_token_limit` 20000 (`codex`: with a
custom provider, its checkpoint prompt; `codex-openai`: with OpenAI as its provider and its remote compaction,
a `compaction_trigger` item, which the fake upstream does not serve, so that one runs through inflight only), all below
where inflight compacts in the fake upstream's window (and, in a third run, below where inflight makes summaries
ahead: `background_at` 0.3). Prints, per run, the steps finished, the agent's compaction requests the upstream
got, those inflight answered (and of them, those a summary made ahead or in place served, and those that took
no summarizer call on their turn: a summary already made, or the earlier handoff carried over), the slowest answer
(the proxy's `total_ms`), and inflight's summaries. Asserts nothing.
"""

from __future__ import annotations

import argparse
import logging
import re
from typing import Any

import orjson

from benchmarks.harness import table
from inflight.app import create_app
from inflight.config import load_settings
from inflight.http.server import uvicorn_options
from tests.agents.claude_code import claude_binary, run_claude
from tests.agents.codex import codex_binary, run_codex
from tests.support.messages import COMPACTION_REQUEST, MessagesTaskAgent, text_of
from tests.support.responses import CHECKPOINT, TASK_MARKER, TaskAgent, last_step
from tests.support.servers import serve
from tests.support.upstream import UpstreamApp

PROMPT = f"Do the {TASK_MARKER}: run the steps one by one."
CLAUDE_MODEL, CLAUDE_WINDOW = "claude-sonnet-4-5", 55_000
CODEX_MODEL, CODEX_WINDOW, CODEX_LIMIT = "gpt-5.1-codex", 48_000, 20_000
AGENTS = ("claude", "codex", "codex-openai")
EARLY = {"CLAUDE_CODE_AUTO_COMPACT_WINDOW": "100000", "CLAUDE_AUTOCOMPACT_PCT_OVERRIDE": "30"}
TOTAL_MS = re.compile(r" total_ms=([\d.]+)")


class Answered(logging.Handler):
    """The proxy's log lines of the agent's compaction requests it answered."""

    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        line = record.getMessage()
        if "agent_compaction_answer=" in line:
            self.lines.append(line)


def run(agent: str, steps: int, *, lines: int, through: bool, background_at: float | None = None) -> list[object]:
    claude = agent == "claude"
    model, window = (CLAUDE_MODEL, CLAUDE_WINDOW) if claude else (CODEX_MODEL, CODEX_WINDOW)
    app = UpstreamApp(windows={model: window})
    if claude:
        app.messages.agent = MessagesTaskAgent(steps=steps, output_lines=lines)
    else:
        app.responses.agent = TaskAgent(steps=steps, output_lines=lines)
    answered = Answered()
    logger = logging.getLogger("inflight")
    logger.addHandler(answered)
    logger.setLevel(logging.INFO)
    try:
        with serve(app) as url:
            base = url
            if through:
                overrides: dict[str, object] = {
                    "upstream": {"base_url": f"{url}/v1"},
                    "models": {model: {"context_window": window}},
                }
                if background_at is not None:
                    overrides["compaction"] = {"summarize": {"background_at": background_at}}
                settings = load_settings(None, overrides=overrides)
                with serve(create_app(settings), **{**uvicorn_options(settings), "log_level": "warning"}) as proxy:
                    done = drive(agent, proxy, model, steps)
            else:
                done = drive(agent, base, model, steps)
    finally:
        logger.removeHandler(answered)
    requests = app.messages_requests() if claude else app.responses_requests()
    upstream_compactions = sum(1 for r in requests if asks_compaction(r.json(), claude=claude))
    answers = [line for line in answered.lines if "agent_compaction_answer=answered" in line]
    slowest = max((float(m[1]) for line in answers if (m := TOTAL_MS.search(line))), default=None)
    ready = [line for line in answers if "summary-precomputed" in line or "summary-cached" in line]
    # The answers whose turn asked the summarizer nothing: from a summary already made, or carried over.
    no_call = [line for line in answers if not re.search(r"actions=\S*\bsummarize\b", line)]
    last = requests[-1].body.decode() if requests else ""
    return [
        f"{last_step(last, steps)}/{steps}" + (" FINISHED" if "FINISHED" in done else ""),
        upstream_compactions,
        len(answers),
        len(ready),
        len(no_call),
        len(answered.lines) - len(answers),
        "-" if slowest is None else f"{slowest:.0f} ms",
        len(app.summaries),
    ]


def asks_compaction(body: dict[str, Any], *, claude: bool) -> bool:
    """Whether a request the upstream got is the agent's own compaction (its prompt in the last message)."""
    if claude:
        return COMPACTION_REQUEST in text_of(body["messages"][-1].get("content"))
    last = body["input"][-1]
    if last.get("type") == "compaction_trigger":
        return True
    return last.get("role") == "user" and CHECKPOINT in orjson.dumps(last.get("content")).decode()


def drive(agent: str, base: str, model: str, steps: int) -> str:
    if agent == "claude":
        origin = base.removesuffix("/v1")
        return run_claude(
            claude_binary() or "claude", origin, PROMPT, model=model, own_compaction=True, env=EARLY
        ).output
    window = CODEX_WINDOW
    url = base if base.endswith("/v1") else f"{base}/v1"
    return run_codex(
        codex_binary() or "codex",
        url,
        PROMPT,
        model=model,
        context_window=window,
        auto_compact_limit=CODEX_LIMIT,
        openai_provider=agent == "codex-openai",
    ).output


def arguments() -> argparse.ArgumentParser:
    """The command line (`tests/test_docs.py` checks each command the docs show against it)."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--agent", choices=(*AGENTS, "all"), default="all")
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument(
        "--lines", type=int, default=60, help="lines each step's command prints (60: about 1.4k tokens)"
    )
    return parser


def main() -> None:
    args = arguments().parse_args()
    agents = AGENTS if args.agent == "all" else (args.agent,)
    runs = [
        ("alone, its own compaction early", False, None),
        ("through inflight", True, None),
        ("through inflight, background_at 0.3", True, 0.3),
    ]
    rows = [
        [agent, label, *run(agent, args.steps, lines=args.lines, through=through, background_at=at)]
        for agent in agents
        for label, through, at in runs
        if through or agent != "codex-openai"  # the fake upstream has no remote compaction of its own
    ]
    header = ["agent", "run", "steps", "its compactions upstream", "answered by inflight", "of them made ahead"]
    header += ["with no summarizer call"]
    header += ["forwarded", "slowest answer"]
    print(table(rows, [*header, "inflight's summaries"]))


if __name__ == "__main__":
    main()
