"""What the real Claude Code's and Codex CLI's 30-step task is billed, with their own compaction and through inflight;
and the real agents' 200-step task of tool outputs that vary in size, at their models' own windows.

    python -m benchmarks.cost [--agents claude,codex] [--arms "its own compaction,inflight, told the window"]
        [--steps 30] [--claude-window 55000] [--codex-window 52000] [--claude-lines 170] [--codex-lines 200]
        [--claude-compact-pct 30]
        [--read 0.1] [--write 1.25] [--output 5]
        [--proxy-log FILE] [--retrieval auto|tool|off]
    python -m benchmarks.cost --task long [--agents claude,codex,gemini]
        [--arms "its own compaction,inflight, goal cost,inflight, goal fit"] [--steps 200] [--seed 2]
        [--claude-window 200000] [--codex-window 272000] [--gemini-window 1000000] [--proxy-log FILE]

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

`--task long` is a longer task at the windows agents really run with: 200 steps whose outputs are drawn from a
log-normal (seeded: median about 1k tokens, mean about 1.8k, now and then near 16k; `tests/support/tool_outputs.py`),
for Claude Code at 200,000 tokens (its own auto-compaction as it runs by default: 2.1.328 waits for the upstream's
"prompt is too long" and compacts then; `--claude-compact-window 200000` makes it compact at its threshold, about
167k), Codex at 272,000 (its own compaction at `model_auto_compact_token_limit` 244,800) and Gemini CLI at 1,000,000
(which never compresses a one-prompt task, but masks old tool outputs by itself). Claude Code is let keep each
output inline (`bashOutputMaxChars`: past 30,000 characters it sends a 2 KB preview and a path, which the fake
cannot go on from); Codex and Gemini CLI cut their largest outputs as they do (here only step 200's, about 15k tokens:
Codex to about 10k tokens, Gemini CLI to its first 8,000 and last 32,000 characters). Its arms: the agent's own
compaction, straight to the
fake upstream; through inflight told the window with `compaction.goal: cost`, and with `goal: fit` (the
agent's own compaction off). Each agent is billed at its provider's prices (Anthropic: read 0.1, write 1.25;
OpenAI: read 0.1, no write premium; Gemini: read 0.25, no write premium; output 5). Besides the short task's
figures it prints inflight's summarizer calls, the rewrites (the agent's requests whose prompt does not begin
with the whole of the previous one's: the cache writes again from the first difference), how many of the
agent's requests held the outputs of their newest five steps verbatim (the latest step's and the four before
it), and each arm's time.
"""

from __future__ import annotations

import argparse
import logging
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import orjson

from benchmarks.harness import table
from inflight.app import create_app
from inflight.config import Prices, load_settings
from inflight.config.compaction import Compaction
from inflight.config.pricing import DEFAULT_FORMAT_PRICES
from inflight.http.server import uvicorn_options
from tests.agents.claude_code import claude_binary, run_claude
from tests.agents.codex import codex_binary, run_codex
from tests.agents.gemini_cli import gemini_binary, run_gemini
from tests.support.billing import Bill
from tests.support.gemini import GeminiTaskAgent
from tests.support.messages import MessagesTaskAgent
from tests.support.responses import TASK_MARKER, TaskAgent, last_step
from tests.support.servers import serve
from tests.support.tool_outputs import (
    lognormal_tokens,
    newest_kept,
    rewrites,
    step_lines,
    task_requests,
    tokens_per_line,
)
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
# The long task: its arms (through inflight: told the window, the agent's own compaction off, with this goal)
GOAL_COST = "inflight, goal cost"
GOAL_FIT = "inflight, goal fit"
GOALS = {GOAL_COST: "cost", GOAL_FIT: "fit"}
LONG_ARMS = (OWN, GOAL_COST, GOAL_FIT)
LONG_STEPS = 200
LONG_SEED = 2  # of seeds 0 to 7, the one whose sizes come nearest a median of 1k, a mean of 1.8k and a 15k
LONG_WINDOWS = {"claude": 200_000, "codex": 272_000, "gemini": 1_000_000}
LONG_CODEX_COMPACT_AT = 244_800  # Codex's `model_auto_compact_token_limit` (90% of 272k)
LONG_TIMEOUT_S = 4 * 3600  # an agent's whole run of 200 steps
# Claude Code keeps a Bash output inline up to 30,000 characters, else it sends a 2 KB preview and a file's path;
# here every output (16k tokens, about 55,000 characters, at most) reaches the conversation whole, as the task means
CLAUDE_LONG_SETTINGS = ("--settings", orjson.dumps({"bashOutputMaxChars": 128_000}).decode())
NEWEST = 5  # the newest outputs checked verbatim in each request
SAMPLE_LINES = 1_000  # the lines of the sample output that tokens per line are measured on


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


@dataclass(frozen=True)
class LongAgent:
    """One agent's long task: its model, the fake upstream's window, its provider's prices, each step's lines."""

    name: str
    label: str
    model: str
    window: int
    prices: Prices
    step_lines: tuple[int, ...]
    compact_window: int | None = None  # Claude Code's CLAUDE_CODE_AUTO_COMPACT_WINDOW in its own arm (None: unset)


@dataclass(frozen=True)
class LongOutcome:
    """A long arm's run: the short one's figures, the rewrites, the requests that kept the newest outputs
    (of those holding any), and its time."""

    steps: str
    bill: Bill
    rewrites: int
    kept: int
    with_outputs: int
    seconds: float


def thousands(value: float) -> str:
    return f"{value / 1000:.0f}k"


def pricing(prices: Prices) -> dict[str, object]:
    """inflight's `pricing:` at the benchmark's prices, so that it schedules by what the bill counts."""
    openai = {"cache_read": prices.cache_read, "cache_write": 1.0, "output": prices.output}
    anthropic = {**openai, "cache_write": prices.cache_write}
    formats = {"chat_completions": openai, "responses": openai, "messages": anthropic, "gemini": openai}
    return {"formats": formats}


@contextmanager
def proxied(
    upstream: str,
    models: dict[str, object],
    prices: Prices,
    *,
    retrieval: str = "auto",
    goal: str | None = None,
    config: str | None = None,
) -> Iterator[str]:
    """inflight in this process, in front of `upstream` (an origin, its Gemini API too), with
    `compaction.retrieval` set to `retrieval` and `compaction.goal` to `goal` (where inflight has the key),
    over the YAML file `config` if one is named; yields its origin."""
    compaction: dict[str, object] = {"retrieval": {"mode": retrieval}}
    if goal is not None and "goal" in Compaction.model_fields:
        compaction["goal"] = goal
    overrides: dict[str, object] = {"upstream": {"base_url": f"{upstream}/v1"}, "models": models}
    overrides |= {"upstreams": {"gemini": {"base_url": upstream}}}
    overrides |= {"pricing": pricing(prices), "compaction": compaction}
    settings = load_settings(config, overrides=overrides)
    with serve(create_app(settings), **{**uvicorn_options(settings), "log_level": "warning"}) as url:
        yield url


def run_arm(
    agent: Agent,
    arm: str,
    *,
    binary: str,
    steps: int,
    prices: Prices,
    retrieval: str = "auto",
    config: str | None = None,
) -> Outcome:
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
                with proxied(url, models, prices, retrieval=retrieval, config=config) as proxy:
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


COST_HEADER = ["agent, window", "arm", "steps", "requests", "refusals", "cached share", "cost", "vs own compaction"]


def cost_row(where: str, arm: str, steps: str, bill: Bill, prices: Prices, own: float | None) -> list[object]:
    """The columns of `COST_HEADER` for one arm, both tasks' tables alike (`own`: its own compaction's cost)."""
    cost = bill.cost(prices)
    ratio = f"{cost / own:.2f}x" if own else "-"
    share = f"{bill.cached_share:.1%}"
    return [where, arm, steps, bill.requests(), bill.refusals, share, thousands(cost), ratio]


def report(agent: Agent, outcomes: dict[str, Outcome], prices: Prices) -> str:
    """The cost table of one agent's arms, then each arm's cost by part."""
    where = f"{agent.label}, {thousands(agent.window)}"
    own = outcomes[OWN].bill.cost(prices) if OWN in outcomes else None
    rows: list[list[object]] = []
    parts: list[list[object]] = []
    for arm, outcome in outcomes.items():
        bill = outcome.bill
        rows.append(cost_row(where, arm, outcome.steps, bill, prices, own))
        split = bill.split(prices)
        money = [thousands(split[name]) for name in ("reads", "writes", "uncached", "output")]
        summaries = f"{bill.requests('summary')}: {thousands(split['summaries'])}"
        parts.append([where, arm, *money, bill.requests("own compaction"), summaries])
    header = COST_HEADER
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


def long_agents(args: argparse.Namespace, tokens: list[int]) -> dict[str, LongAgent]:
    """The long task's agents at their windows, each step printing the lines its size in tokens takes in that
    agent's fake (their lines differ)."""
    task = TaskAgent(output_lines=SAMPLE_LINES)
    shell = step_lines(tokens, tokens_per_line(task.output, SAMPLE_LINES))
    gemini_lines = step_lines(tokens, tokens_per_line(GeminiTaskAgent(output_lines=SAMPLE_LINES).output, SAMPLE_LINES))
    windows = {name: getattr(args, f"{name}_window") or window for name, window in LONG_WINDOWS.items()}
    return {
        "claude": LongAgent(
            "claude",
            "Claude Code",
            "claude-sonnet-4-5",
            windows["claude"],
            DEFAULT_FORMAT_PRICES["messages"],
            shell,
            args.claude_compact_window,
        ),
        "codex": LongAgent(
            "codex", "Codex", "gpt-5.1-codex", windows["codex"], DEFAULT_FORMAT_PRICES["responses"], shell
        ),
        "gemini": LongAgent(
            "gemini", "Gemini CLI", "gemini-2.5-pro", windows["gemini"], DEFAULT_FORMAT_PRICES["gemini"], gemini_lines
        ),
    }


def long_fake(app: UpstreamApp, agent: LongAgent, steps: int) -> dict[int, str]:
    """Sets the fake upstream's agent for `agent`'s API; returns each step's output, as the fake prints it."""
    if agent.name == "claude":
        app.messages.agent = fake = MessagesTaskAgent(steps=steps, step_lines=agent.step_lines)
        return {step: fake.output(step) for step in range(1, steps + 1)}
    if agent.name == "codex":
        app.responses.agent = task = TaskAgent(steps=steps, step_lines=agent.step_lines)
        return {step: task.output(step) for step in range(1, steps + 1)}
    app.gemini.agent = shell = GeminiTaskAgent(steps=steps, step_lines=agent.step_lines)
    return {step: shell.output(step) for step in range(1, steps + 1)}


def run_long_arm(
    agent: LongAgent, arm: str, *, binary: str, steps: int, retrieval: str = "auto", config: str | None = None
) -> LongOutcome:
    """The agent's long task in one arm, over a fresh fake upstream enforcing its window."""
    app = UpstreamApp(windows={agent.model: agent.window})
    outputs = long_fake(app, agent, steps)
    started = time.monotonic()
    try:
        with serve(app) as url:
            if arm == OWN:
                output = run_long(agent, binary=binary, url=url, own=True)
            else:
                models: dict[str, object] = {agent.model: {"context_window": agent.window}}
                with proxied(url, models, agent.prices, retrieval=retrieval, goal=GOALS[arm], config=config) as proxy:
                    output = run_long(agent, binary=binary, url=proxy, own=False)
    except subprocess.TimeoutExpired:
        output = "(timed out)"
    seconds = time.monotonic() - started
    answered = api_requests(app, agent.name)
    finished = last_step(answered[-1].body.decode(), steps) if answered else 0
    turns = conversation(answered, agent)
    kept = [newest_kept(payload, outputs, NEWEST) for payload in turns]
    return LongOutcome(
        f"{finished}/{steps}" + (" FINISHED" if "FINISHED" in output else ""),
        app.bill,
        rewrites=rewrites(turns),
        kept=sum(1 for k in kept if k),
        with_outputs=sum(1 for k in kept if k is not None),
        seconds=seconds,
    )


def run_long(agent: LongAgent, *, binary: str, url: str, own: bool) -> str:
    """The agent against `url` (an origin): with its own compaction as it really runs (`own`), or with it off."""
    if agent.name == "claude":
        window = agent.compact_window if own else None
        return run_claude(
            binary,
            url,
            PROMPT,
            model=agent.model,
            own_compaction=own,
            env=None if window is None else {"CLAUDE_CODE_AUTO_COMPACT_WINDOW": str(window)},
            arguments=CLAUDE_LONG_SETTINGS,
            timeout_s=LONG_TIMEOUT_S,
        ).output
    if agent.name == "codex":
        window, limit = (agent.window, LONG_CODEX_COMPACT_AT) if own else (None, None)
        return run_codex(
            binary,
            f"{url}/v1",
            PROMPT,
            model=agent.model,
            context_window=window,
            auto_compact_limit=limit,
            timeout_s=LONG_TIMEOUT_S,
        ).output
    return run_gemini(binary, url, PROMPT, model=agent.model, timeout_s=LONG_TIMEOUT_S).output


def api_requests(app: UpstreamApp, name: str) -> list[Recorded]:
    """The requests the agent's own (not inflight's summaries) became on its API, in order."""
    if name == "claude":
        return app.messages_requests()
    return app.responses_requests() if name == "codex" else app.gemini_requests()


def conversation(recorded: list[Recorded], agent: LongAgent) -> list[dict[str, object]]:
    """The bodies of the task's answered requests (its own compaction's included), without the agent's side
    requests (a title, a quota probe, Gemini CLI's next-speaker and loop checks), which carry no shell tool."""
    return task_requests([record.json() for record in recorded if record.status == 200], agent.name, agent.model)


def long_report(agent: LongAgent, outcomes: dict[str, LongOutcome]) -> str:
    """The long task's table of one agent's arms, then each arm's cost by part."""
    where = f"{agent.label}, {thousands(agent.window)}"
    prices = agent.prices
    own = outcomes[OWN].bill.cost(prices) if OWN in outcomes else None
    rows: list[list[object]] = []
    parts: list[list[object]] = []
    for arm, outcome in outcomes.items():
        bill = outcome.bill
        kept = f"{outcome.kept}/{outcome.with_outputs}"
        minutes = f"{outcome.seconds / 60:.1f} min"
        rows.append(cost_row(where, arm, outcome.steps, bill, prices, own))
        rows[-1] += [bill.requests("summary"), outcome.rewrites, kept, minutes]
        split = bill.split(prices)
        money = [thousands(split[name]) for name in ("reads", "writes", "uncached", "output", "summaries")]
        parts.append([where, arm, *money, bill.requests("own compaction")])
    header = [*COST_HEADER, "summarizer calls", "rewrites", f"kept newest {NEWEST}", "time"]
    split_header = ["agent, window", "arm", "reads", "writes", "uncached", "output", "summaries", "own compactions"]
    return table(rows, header) + "\n\n" + table(parts, split_header)


def price_list(agent: LongAgent) -> str:
    """What the agent's provider bills, as the table's heading says it."""
    prices = agent.prices
    write = "no write premium" if prices.cache_write == prices.input else f"write {prices.cache_write}"
    return f"{agent.label} read {prices.cache_read}, {write}, output {prices.output}"


def long_task(args: argparse.Namespace, names: list[str], arms: list[str], log: logging.Logger) -> None:
    """The long task: each agent in each arm, then its table."""
    steps = args.steps or LONG_STEPS
    tokens = lognormal_tokens(steps, seed=args.seed)
    agents = long_agents(args, tokens)
    print(
        f"{steps} steps; tool outputs log-normal (seed {args.seed}), in o200k tokens: median "
        f"{statistics.median(tokens):,.0f}, mean {statistics.mean(tokens):,.0f}, max {max(tokens):,}, "
        f"{sum(tokens):,} in all"
    )
    print("prices per token (uncached input 1): " + "; ".join(map(price_list, agents.values())))
    binaries = {"claude": claude_binary, "codex": codex_binary, "gemini": gemini_binary}
    for name in names:
        agent = agents[name]
        binary = binaries[name]()
        if binary is None:
            raise SystemExit(f"{agent.label} is not installed: see .ci/run (npm install --prefix .cache/agents ...)")
        outcomes = {}
        for arm in arms:
            log.info("%s, window %d: %s", agent.label, agent.window, arm)
            outcomes[arm] = run_long_arm(
                agent, arm, binary=binary, steps=steps, retrieval=args.retrieval, config=args.config
            )
            log.info("%s, %s: %.0f s", agent.label, arm, outcomes[arm].seconds)
        lines = agent.step_lines
        print(
            f"\n{agent.label} ({agent.model}), window {agent.window}, steps of {min(lines)} to {max(lines)} lines "
            f"(median {statistics.median(lines):.0f})"
        )
        print(long_report(agent, outcomes), flush=True)


def arguments() -> argparse.ArgumentParser:
    """The command line (`tests/test_docs.py` checks each command the docs show against it)."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--task", choices=("short", "long"), default="short", help="the 30-step task, or the 200-step one (above)"
    )
    parser.add_argument(
        "--agents", help="comma list: claude, codex (the long task: gemini too; default: all of the task's)"
    )
    parser.add_argument(
        "--arms",
        help=f"comma list of arms (default all; the short task's: {', '.join(ARMS)}; the long task's: "
        f"{', '.join(LONG_ARMS)})",
    )
    parser.add_argument("--steps", type=int, help=f"30 (the long task: {LONG_STEPS})")
    parser.add_argument("--seed", type=int, default=LONG_SEED, help="the long task's draw of tool output sizes")
    parser.add_argument(
        "--claude-window", type=int, help="the fake upstream's window for Claude Code (55000; the long task: 200000)"
    )
    parser.add_argument(
        "--codex-window", type=int, help="the fake upstream's window for Codex (52000; the long task: 272000)"
    )
    parser.add_argument(
        "--gemini-window", type=int, help="the fake upstream's window for Gemini CLI (the long task: 1000000)"
    )
    parser.add_argument(
        "--claude-compact-window",
        type=int,
        help="the long task: Claude Code's CLAUDE_CODE_AUTO_COMPACT_WINDOW in its own arm, so that it compacts at "
        "its threshold (unset: its default, which waits for the upstream's refusal)",
    )
    parser.add_argument("--claude-lines", type=int, default=170, help="lines each of Claude Code's steps prints")
    parser.add_argument("--codex-lines", type=int, default=200, help="lines each of Codex's steps prints")
    parser.add_argument(
        "--claude-compact-pct",
        type=int,
        default=30,
        help="where Claude Code's own compaction fires in the arm answering it, in percent of 100k tokens",
    )
    anthropic = DEFAULT_FORMAT_PRICES["messages"]
    each = "; the long task bills each agent at its provider's"
    parser.add_argument("--read", type=float, default=anthropic.cache_read, help=f"a cache-read token's price{each}")
    parser.add_argument(
        "--write", type=float, default=anthropic.cache_write, help=f"a cache-write token's price (Messages){each}"
    )
    parser.add_argument("--output", type=float, default=anthropic.output, help=f"an output token's price{each}")
    parser.add_argument(
        "--config", metavar="FILE", help="inflight's YAML file for its arms (the arm's own settings over it)"
    )
    parser.add_argument("--proxy-log", metavar="FILE", help="write inflight's log lines (INFO) to this file")
    parser.add_argument(
        "--retrieval", choices=("auto", "tool", "off"), default="auto", help="inflight's compaction.retrieval.mode"
    )
    parser.add_argument(
        "--traces",
        default="8000,16000",
        help="windows to replay the SWE-agent traces at after the short task (comma list; empty: none)",
    )
    return parser


def selected_arms(text: str, known: tuple[str, ...] = ARMS) -> list[str]:
    """The arms a comma list names, in the table's order; an arm's own name holds a comma, so names are
    matched whole against the text."""
    arms = [arm for arm in known if arm in text]
    rest = text
    for arm in arms:
        rest = rest.replace(arm, "")
    if rest.strip(", "):
        raise SystemExit(f"--arms: unknown arm in {text!r}; the arms are: {'; '.join(known)}")
    return arms


def proxy_logging(path: str | None) -> logging.Logger:
    """The benchmark's logger, with inflight's, writing to `path` (INFO) when one is given."""
    log = logging.getLogger("benchmarks.cost")
    if path:
        handler = logging.FileHandler(path)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        for logger in (logging.getLogger("inflight"), log):
            logger.setLevel(logging.INFO)
            logger.addHandler(handler)
    return log


def agent_names(text: str | None, known: tuple[str, ...]) -> list[str]:
    """The agents a comma list names (None: all the task has)."""
    names = [name.strip() for name in (text or ",".join(known)).split(",") if name.strip()]
    if unknown := [name for name in names if name not in known]:
        raise SystemExit(f"--agents: unknown agent {', '.join(unknown)} ({', '.join(known)})")
    return names


def main() -> None:
    args = arguments().parse_args()
    log = proxy_logging(args.proxy_log)
    if args.task == "long":
        names = agent_names(args.agents, tuple(LONG_WINDOWS))
        long_task(args, names, selected_arms(args.arms or ",".join(LONG_ARMS), LONG_ARMS), log)
        return
    short_task(args, log)


def short_task(args: argparse.Namespace, log: logging.Logger) -> None:
    """The 30-step task: each agent in each arm, its table, then the SWE-agent traces."""
    steps = args.steps or 30
    prices = Prices(cache_read=args.read, cache_write=args.write, output=args.output)
    arms = selected_arms(args.arms or ",".join(ARMS))
    claude_window, codex_window = args.claude_window or 55_000, args.codex_window or 52_000
    agents = {
        "claude": Agent(
            "claude", "Claude Code", "claude-sonnet-4-5", claude_window, args.claude_lines, args.claude_compact_pct
        ),
        "codex": Agent("codex", "Codex", "gpt-5.1-codex", codex_window, args.codex_lines),
    }
    names = agent_names(args.agents, tuple(agents))
    print(
        f"prices per token: uncached input 1, cache read {prices.cache_read}, cache write {prices.cache_write}, ",
        end="",
    )
    print(f"output {prices.output}; {steps} steps")
    for name in names:
        agent = agents[name]
        binary = claude_binary() if name == "claude" else codex_binary()
        if binary is None:
            raise SystemExit(f"{agent.label} is not installed: see .ci/run (npm install --prefix .cache/agents ...)")
        outcomes = {}
        for arm in arms:
            log.info("%s, window %d: %s", agent.label, agent.window, arm)
            outcomes[arm] = run_arm(
                agent, arm, binary=binary, steps=steps, prices=prices, retrieval=args.retrieval, config=args.config
            )
        print(f"\n{agent.label} ({agent.model}), window {agent.window}, steps of {agent.lines} lines")
        print(report(agent, outcomes, prices))
    windows = [int(window) for window in args.traces.split(",") if window.strip()]
    if windows:
        print("\nA Chat Completions agent: the SWE-agent traces of tests/fixtures/traces/, replayed by inflight eval")
        print(trace_report(prices, windows))


if __name__ == "__main__":
    main()
