"""The real agents through inflight (`compaction.goal: cost`) on a task of log-normal tool outputs that outgrows a
small window several times. Compacting must never cost the agent its task, its newest five outputs or all trace of
an earlier step (its call, or the ledger naming it), so each request the fake upstream records is checked.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import suppress
from dataclasses import dataclass
from itertools import pairwise
from typing import Any

import orjson
import pytest

from inflight.compaction.ledger import LEDGER_HEADING
from tests.agents.claude_code import run_claude
from tests.agents.codex import run_codex
from tests.agents.gemini_cli import run_gemini
from tests.agents.installed import required_binary
from tests.conftest import ProxyFactory
from tests.support.gemini import GeminiTaskAgent
from tests.support.messages import MessagesTaskAgent
from tests.support.responses import TASK_MARKER, TaskAgent, last_step
from tests.support.servers import serve
from tests.support.tool_outputs import (
    OUTPUT_LINE,
    lognormal_tokens,
    newest_kept,
    step_lines,
    strings,
    task_requests,
    tokens_per_line,
)
from tests.support.upstream import Recorded, UpstreamApp

STEPS = 50
SEED = 2  # the draw `benchmarks.cost --task long` uses: about 113k tokens in all here, the largest output 10.5k
WINDOW = 60_000  # outgrown four to seven times, depending on the agent's own prompt
NEWEST = 5
PROMPT = f"Do the {TASK_MARKER}: run the steps one by one."
SAMPLE_LINES = 1_000  # the lines of the sample output that tokens per line are measured on
# Claude Code sends an output past 30,000 characters as a preview and a path, which the fake cannot go on from
CLAUDE_SETTINGS = ("--settings", orjson.dumps({"bashOutputMaxChars": 128_000}).decode())
TIMEOUT_S = 300


@dataclass(frozen=True)
class Agent:
    name: str
    model: str
    variable: str
    label: str
    package: str


AGENTS = [
    Agent("claude", "claude-sonnet-4-5", "INFLIGHT_CLAUDE", "Claude Code", "@anthropic-ai/claude-code"),
    Agent("codex", "gpt-5.1-codex", "INFLIGHT_CODEX", "the Codex CLI", "@openai/codex"),
    Agent("gemini", "gemini-2.5-pro", "INFLIGHT_GEMINI", "Gemini CLI", "@google/gemini-cli"),
]


def fake_task(app: UpstreamApp, name: str) -> tuple[dict[int, str], dict[int, str]]:
    """Sets the fake agent of `name`'s API playing the task (each step printing the lines its drawn size takes in
    that fake); returns each step's command and its output, as the fake prints it."""
    tokens = lognormal_tokens(STEPS, seed=SEED)
    sample = GeminiTaskAgent if name == "gemini" else TaskAgent
    lines = step_lines(tokens, tokens_per_line(sample(output_lines=SAMPLE_LINES).output, SAMPLE_LINES))
    shell: TaskAgent | GeminiTaskAgent
    if name == "gemini":
        app.gemini.agent = shell = GeminiTaskAgent(steps=STEPS, step_lines=lines)
    elif name == "claude":
        app.messages.agent = MessagesTaskAgent(steps=STEPS, step_lines=lines)
        shell = app.messages.agent.shell()
    else:
        app.responses.agent = shell = TaskAgent(steps=STEPS, step_lines=lines)
    steps = range(1, STEPS + 1)
    return {n: shell.command(n) for n in steps}, {n: shell.output(n) for n in steps}


def run_agent(agent: Agent, binary: str, proxy: str) -> tuple[int, str]:
    """The agent through inflight at `proxy` (its base URL, ending in /v1), its own compaction off: Claude Code's
    by `DISABLE_AUTO_COMPACT`, Codex's out of reach (no window, no limit), and Gemini CLI compresses only at a
    user's message, which a one-prompt task never has. Its exit code and output."""
    origin = proxy.removesuffix("/v1")
    if agent.name == "claude":
        claude = run_claude(binary, origin, PROMPT, model=agent.model, arguments=CLAUDE_SETTINGS, timeout_s=TIMEOUT_S)
        return claude.returncode, claude.output
    if agent.name == "codex":
        codex = run_codex(binary, proxy, PROMPT, model=agent.model, timeout_s=TIMEOUT_S)
        return codex.returncode, codex.output
    run = run_gemini(binary, origin, PROMPT, model=agent.model, timeout_s=TIMEOUT_S)
    return run.returncode, run.output


def answered_task(app: UpstreamApp, agent: Agent) -> list[dict[str, Any]]:
    """The bodies of the agent's answered task requests, without its side requests (a title, a quota probe, Gemini
    CLI's next-speaker and loop checks), which carry no shell tool; inflight's summaries go elsewhere."""
    recorded: list[Recorded] = {
        "claude": app.messages_requests,
        "codex": app.responses_requests,
        "gemini": app.gemini_requests,
    }[agent.name]()
    return task_requests([record.json() for record in recorded if record.status == 200], agent.name, agent.model)


def texts(payload: Any) -> Iterator[str]:
    """Every string in a request, and in each JSON object a string holds (a Responses call's `arguments`)."""
    for text in strings(payload):
        yield text
        if text.startswith("{"):
            with suppress(orjson.JSONDecodeError):
                yield from strings(orjson.loads(text))


def latest_step(found: list[str]) -> int:
    """The highest step with a line of output in the request (as `newest_kept` finds it)."""
    return max((int(n) for text in found for n in OUTPUT_LINE.findall(text)), default=0)


def untraced(found: list[str], commands: dict[int, str]) -> list[int]:
    """The steps before the latest whose call is neither in the request nor named by inflight's ledger (its text
    from the heading on: a command verbatim, a file's shortened command or a command's outcome, each of which says
    `step N log line`, or a shortened command ending `STEP N DONE`)."""
    ledger = "\n".join(text[text.index(LEDGER_HEADING) :] for text in found if LEDGER_HEADING in text)
    return [
        step
        for step in range(1, latest_step(found))
        if not any(commands[step] in text for text in found) and not named_in(ledger, step)
    ]


def named_in(ledger: str, step: int) -> bool:
    """Whether the ledger names the step: a command or outcome of it (`step N log line`), or a command shortened
    to its two ends, whose end is the step's own `echo 'STEP N DONE'`."""
    return re.search(rf"\bstep {step} log line\b|\bSTEP {step} DONE\b", ledger) is not None


def spans(steps: list[int]) -> str:
    """Steps as runs: `1-11, 28`."""
    runs: list[list[int]] = []
    for step in steps:
        if runs and step == runs[-1][-1] + 1:
            runs[-1].append(step)
        else:
            runs.append([step])
    return ", ".join(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]) for run in runs)


def folds(turns: list[list[str]], outputs: dict[int, str]) -> int:
    """The requests holding fewer of the task's outputs verbatim than the request before: inflight's compactions."""
    held = [sum(1 for output in outputs.values() if any(output in text for text in found)) for found in turns]
    return sum(1 for before, after in pairwise(held) if after < before)


@pytest.mark.parametrize("agent", AGENTS, ids=[agent.name for agent in AGENTS])
def test_every_request_keeps_the_task_the_newest_outputs_and_a_trace_of_each_step(
    start_proxy: ProxyFactory, agent: Agent
) -> None:
    binary = required_binary(agent.name, agent.variable, agent=agent.label, package=agent.package)
    app = UpstreamApp(windows={agent.model: WINDOW})
    commands, outputs = fake_task(app, agent.name)
    with serve(app) as url:
        overrides: dict[str, Any] = {
            "models": {agent.model: {"context_window": WINDOW}},
            "compaction": {"goal": "cost"},
            "upstreams": {"gemini": {"base_url": url}},
        }
        with start_proxy(f"{url}/v1", **overrides) as proxy:
            returncode, output = run_agent(agent, binary, proxy)
    turns = answered_task(app, agent)
    assert returncode == 0 and f"All {STEPS} steps are done. FINISHED" in output, output[-2000:]
    assert turns and last_step(orjson.dumps(turns[-1]).decode(), STEPS) == STEPS
    found = [list(texts(payload)) for payload in turns]
    # inflight compacted, more than once: a request lacks an earlier step's output the one before it held
    assert folds(found, outputs) >= 2
    lost: dict[int, list[int]] = {}
    for n, (payload, strings_of) in enumerate(zip(turns, found, strict=True)):
        assert any(PROMPT in text for text in strings_of), f"request {n} lost the task"
        kept = newest_kept(payload, outputs, NEWEST)
        assert kept is True or (kept is None and n == 0), f"request {n}: the newest {NEWEST} outputs are not whole"
        if missing := untraced(strings_of, commands):
            lost[n] = missing
    assert lost == {}, "steps neither called nor named by the ledger, by request: " + "; ".join(
        f"{n} (latest step {latest_step(found[n])}): {spans(steps)}" for n, steps in lost.items()
    )
