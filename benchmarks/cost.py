"""What the real Claude Code's and Codex CLI's 30-step task is billed, with their own compaction and through inflight.

    python -m benchmarks.cost [--agents claude,codex] [--arms "its own compaction,inflight, told the window"]
        [--steps 30] [--claude-window 55000] [--codex-window 52000] [--claude-lines 170] [--codex-lines 200]
        [--claude-compact-pct 30]
        [--read 0.1] [--write 1.25] [--output 5]
        [--proxy-log FILE] [--retrieval auto|tool|off]

Runs each agent (the binaries `.ci/run` installs under `.cache/agents/`, or `INFLIGHT_CLAUDE` and
`INFLIGHT_CODEX`) against the fake upstream (Claude Code on its Messages API, Codex on its Responses
API, each simulating its provider's prompt cache) in these arms: with no window enforced; with the
window and the agent's own compaction; through inflight told the window; through inflight learning
the window from a refusal (an HTTP 400); learning it from a refusal inside the stream; and told the
window with the agent's own compaction firing early, below inflight's thresholds, so inflight answers it.
Every request the upstream answers is billed (the agent's, its own compaction's and inflight's
summaries), in units of one uncached input token: a cache read `--read`, a cache write `--write`
(the Messages API only: OpenAI has no write premium), an output token `--output`; a refusal costs
nothing. Prints per agent the steps finished, the requests answered and refused, the share of
prompt tokens read from the cache, the cost and its ratio to the agent's own compaction, then
each arm's cost by part. Asserts nothing.
"""

from __future__ import annotations

import argparse
import logging
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import orjson

from benchmarks.harness import table
from inflight.app import create_app
from inflight.config import Prices, load_settings
from inflight.config.pricing import DEFAULT_FORMAT_PRICES
from inflight.http.server import uvicorn_options
from tests.agents.claude_code import claude_binary, run_claude
from tests.agents.codex import codex_binary, run_codex
from tests.support.billing import Bill
from tests.support.messages import MessagesTaskAgent
from tests.support.responses import TASK_MARKER, TaskAgent, last_step
from tests.support.servers import serve
from tests.support.upstream import Recorded, UpstreamApp

PROMPT = f"Do the {TASK_MARKER}: run the steps one by one."
TRACES = sorted(str(path) for path in Path(__file__).resolve().parents[1].glob("tests/fixtures/traces/*.json"))
NO_WINDOW = "no window"
OWN = "its own compaction"
TOLD = "inflight, told the window"
LEARNS = "inflight, learns the window"
IN_STREAM = "inflight, learns, refusal in the stream"
ANSWERS = "inflight, answering the agent's compactions"  # told the window; the agent's own compaction fires early
ARMS = (NO_WINDOW, OWN, TOLD, LEARNS, IN_STREAM, ANSWERS)
# Where the agent's own compaction fires in that arm: below inflight's thresholds, so inflight answers it
EARLY_CLAUDE_WINDOW = "100000"  # with a percentage of it (`--claude-compact-pct`, 30: about 22-27k tokens)
EARLY_CODEX = 20_000
OWN_COMPACTION_AT = 0.8  # Codex's own compaction limit, as a share of the window it is told


@dataclass(frozen=True)
class Agent:
    """One agent's task: its model, the fake upstream's window, the lines each step prints."""

    name: str
    label: str
    model: str
    window: int
    lines: int
    compact_pct: int = 30  # where its own compaction fires in the early arm, a percentage of 100k tokens


@dataclass(frozen=True)
class Outcome:
    """An arm's run: how far the agent got and what the upstream billed."""

    steps: str
    bill: Bill


def thousands(value: float) -> str:
    return f"{value / 1000:.0f}k"


def pricing(prices: Prices) -> dict[str, object]:
    """inflight's `pricing:` at the benchmark's prices, so that it schedules by what the bill counts."""
    openai = {"cache_read": prices.cache_read, "cache_write": 1.0, "output": prices.output}
    anthropic = {**openai, "cache_write": prices.cache_write}
    return {"formats": {"chat_completions": openai, "responses": openai, "messages": anthropic}}


@contextmanager
def proxied(upstream: str, models: dict[str, object], prices: Prices, *, retrieval: str = "auto") -> Iterator[str]:
    """inflight in this process, in front of `upstream` (an origin), with `compaction.retrieval` set to
    `retrieval`; yields its origin."""
    overrides: dict[str, object] = {"upstream": {"base_url": f"{upstream}/v1"}, "models": models}
    overrides |= {"pricing": pricing(prices), "compaction": {"retrieval": {"mode": retrieval}}}
    settings = load_settings(None, overrides=overrides)
    with serve(create_app(settings), **{**uvicorn_options(settings), "log_level": "warning"}) as url:
        yield url


def run_arm(agent: Agent, arm: str, *, binary: str, steps: int, prices: Prices, retrieval: str = "auto") -> Outcome:
    """The agent's task in one arm, over a fresh fake upstream."""
    app = UpstreamApp(windows={} if arm == NO_WINDOW else {agent.model: agent.window})
    told = arm in (TOLD, ANSWERS)
    models: dict[str, object] = {agent.model: {"context_window": agent.window}} if told else {}
    app.messages.agent = MessagesTaskAgent(steps=steps, output_lines=agent.lines)
    app.responses.agent = TaskAgent(steps=steps, output_lines=agent.lines)
    app.messages.refusal_in_stream = app.responses.refusal_in_stream = arm == IN_STREAM
    try:
        with serve(app) as url:
            if arm in (NO_WINDOW, OWN):
                output = run_direct(agent, arm, binary=binary, url=url)
            else:
                with proxied(url, models, prices, retrieval=retrieval) as proxy:
                    output = run_agent(agent, binary=binary, url=proxy, own=arm == ANSWERS)
    except subprocess.TimeoutExpired:
        output = "(timed out)"
    answered: list[Recorded] = app.messages_requests() if agent.name == "claude" else app.responses_requests()
    finished = last_step(answered[-1].body.decode(), steps) if answered else 0
    return Outcome(f"{finished}/{steps}" + (" FINISHED" if "FINISHED" in output else ""), app.bill)


def run_direct(agent: Agent, arm: str, *, binary: str, url: str) -> str:
    """The agent straight to the upstream: its own compaction on in the arm named for it."""
    if agent.name == "claude":
        return run_claude(binary, url, PROMPT, model=agent.model, own_compaction=arm == OWN).output
    if arm == OWN:
        limit = int(OWN_COMPACTION_AT * agent.window)
        return run_codex(
            binary, f"{url}/v1", PROMPT, model=agent.model, context_window=agent.window, auto_compact_limit=limit
        ).output
    return run_codex(binary, f"{url}/v1", PROMPT, model=agent.model).output


def run_agent(agent: Agent, *, binary: str, url: str, own: bool = False) -> str:
    """The agent through inflight at `url` (an origin), its own compaction off, or (`own`) on and firing early."""
    if agent.name == "claude":
        early = {"CLAUDE_CODE_AUTO_COMPACT_WINDOW": EARLY_CLAUDE_WINDOW}
        env = early | {"CLAUDE_AUTOCOMPACT_PCT_OVERRIDE": str(agent.compact_pct)} if own else None
        return run_claude(binary, url, PROMPT, model=agent.model, own_compaction=own, env=env).output
    if own:
        return run_codex(
            binary, f"{url}/v1", PROMPT, model=agent.model, context_window=agent.window, auto_compact_limit=EARLY_CODEX
        ).output
    return run_codex(binary, f"{url}/v1", PROMPT, model=agent.model).output


def report(agent: Agent, outcomes: dict[str, Outcome], prices: Prices) -> str:
    """The cost table of one agent's arms, then each arm's cost by part."""
    where = f"{agent.label}, {thousands(agent.window)}"
    own = outcomes[OWN].bill.cost(prices) if OWN in outcomes else None
    rows: list[list[object]] = []
    parts: list[list[object]] = []
    for arm, outcome in outcomes.items():
        bill = outcome.bill
        cost = bill.cost(prices)
        ratio = f"{cost / own:.2f}x" if own else "-"
        share = f"{bill.cached_share:.1%}"
        rows.append([where, arm, outcome.steps, bill.requests(), bill.refusals, share, thousands(cost), ratio])
        split = bill.split(prices)
        money = [thousands(split[name]) for name in ("reads", "writes", "uncached", "output")]
        summaries = f"{bill.requests('summary')}: {thousands(split['summaries'])}"
        parts.append([where, arm, *money, bill.requests("own compaction"), summaries])
    header = ["agent, window", "arm", "steps", "requests", "refusals", "cached share", "cost", "vs own compaction"]
    split_header = [
        "agent, window",
        "arm",
        "reads",
        "writes",
        "uncached",
        "output",
        "own compactions",
        "summaries: cost",
    ]
    return table(rows, header) + "\n\n" + table(parts, split_header)


def trace_report(prices: Prices, windows: list[int]) -> str:
    """The SWE-agent traces (Chat Completions) replayed offline by `inflight eval` at each window, at the same
    prices: what the client's requests would have cost had the upstream taken them all, and what inflight sent
    (the ledger standing in for summaries, so no summarizer call is billed)."""
    rows: list[list[object]] = []
    with tempfile.TemporaryDirectory() as directory:
        config = Path(directory, "pricing.yaml")
        config.write_text(orjson.dumps({"pricing": pricing(prices)}).decode())  # JSON is YAML
        for window in windows:
            command = [sys.executable, "-m", "inflight", "eval", *TRACES, "--window", str(window), "--json"]
            done = subprocess.run([*command, "--config", str(config)], capture_output=True, text=True, check=True)
            figures = orjson.loads(done.stdout)
            cache = figures["cache"]
            where = f"SWE-agent traces, {thousands(window)}"
            client, sent = cache["cost_client"], cache["cost"]
            rows.append([where, "the client's requests, as sent", cache["turns"], "-", "-", thousands(client), "1.00x"])
            share = f"{cache['cached_share']:.1%}"
            compacted = figures["compacted_requests"]
            rows.append([where, "inflight", cache["turns"], compacted, share, thousands(sent), f"{sent / client:.2f}x"])
    header = ["conversations, window", "arm", "requests", "compacted", "cached share", "prompt cost", "vs as sent"]
    return table(rows, header)


def arguments() -> argparse.ArgumentParser:
    """The command line (`tests/test_docs.py` checks each command the docs show against it)."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--agents", default="claude,codex", help="comma list: claude, codex")
    parser.add_argument("--arms", default=",".join(ARMS), help=f"comma list of arms (default all: {', '.join(ARMS)})")
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--claude-window", type=int, default=55_000, help="the fake upstream's window for Claude Code")
    parser.add_argument("--codex-window", type=int, default=52_000, help="the fake upstream's window for Codex")
    parser.add_argument("--claude-lines", type=int, default=170, help="lines each of Claude Code's steps prints")
    parser.add_argument("--codex-lines", type=int, default=200, help="lines each of Codex's steps prints")
    parser.add_argument(
        "--claude-compact-pct",
        type=int,
        default=30,
        help="where Claude Code's own compaction fires in the arm answering it, in percent of 100k tokens",
    )
    anthropic = DEFAULT_FORMAT_PRICES["messages"]
    parser.add_argument("--read", type=float, default=anthropic.cache_read, help="a cache-read token's price")
    parser.add_argument(
        "--write", type=float, default=anthropic.cache_write, help="a cache-write token's price (Messages)"
    )
    parser.add_argument("--output", type=float, default=anthropic.output, help="an output token's price")
    parser.add_argument("--proxy-log", metavar="FILE", help="write inflight's log lines (INFO) to this file")
    parser.add_argument(
        "--retrieval", choices=("auto", "tool", "off"), default="auto", help="inflight's compaction.retrieval.mode"
    )
    parser.add_argument(
        "--traces",
        default="8000,16000",
        help="windows to replay the SWE-agent traces at (comma list; empty: none)",
    )
    return parser


def selected_arms(text: str) -> list[str]:
    """The arms a comma list names, in the table's order; an arm's own name holds a comma, so names are
    matched whole against the text."""
    arms = [arm for arm in ARMS if arm in text]
    rest = text
    for arm in arms:
        rest = rest.replace(arm, "")
    if rest.strip(", "):
        raise SystemExit(f"--arms: unknown arm in {text!r}; the arms are: {'; '.join(ARMS)}")
    return arms


def main() -> None:
    args = arguments().parse_args()
    prices = Prices(cache_read=args.read, cache_write=args.write, output=args.output)
    arms = selected_arms(args.arms)
    agents = {
        "claude": Agent(
            "claude", "Claude Code", "claude-sonnet-4-5", args.claude_window, args.claude_lines, args.claude_compact_pct
        ),
        "codex": Agent("codex", "Codex", "gpt-5.1-codex", args.codex_window, args.codex_lines),
    }
    names = [name.strip() for name in args.agents.split(",") if name.strip()]
    if unknown := [name for name in names if name not in agents]:
        raise SystemExit(f"--agents: unknown agent {', '.join(unknown)} (claude, codex)")
    log = logging.getLogger("benchmarks.cost")
    if args.proxy_log:
        handler = logging.FileHandler(args.proxy_log)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        for logger in (logging.getLogger("inflight"), log):
            logger.setLevel(logging.INFO)
            logger.addHandler(handler)
    print(
        f"prices per token: uncached input 1, cache read {prices.cache_read}, cache write {prices.cache_write}, ",
        end="",
    )
    print(f"output {prices.output}; {args.steps} steps")
    for name in names:
        agent = agents[name]
        binary = claude_binary() if name == "claude" else codex_binary()
        if binary is None:
            raise SystemExit(f"{agent.label} is not installed: see .ci/run (npm install --prefix .cache/agents ...)")
        outcomes = {}
        for arm in arms:
            log.info("%s, window %d: %s", agent.label, agent.window, arm)
            outcomes[arm] = run_arm(
                agent, arm, binary=binary, steps=args.steps, prices=prices, retrieval=args.retrieval
            )
        print(f"\n{agent.label} ({agent.model}), window {agent.window}, steps of {agent.lines} lines")
        print(report(agent, outcomes, prices))
    windows = [int(window) for window in args.traces.split(",") if window.strip()]
    if windows:
        print("\nA Chat Completions agent: the SWE-agent traces of tests/fixtures/traces/, replayed by inflight eval")
        print(trace_report(prices, windows))


if __name__ == "__main__":
    main()
