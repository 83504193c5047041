"""The real agents started by `inflight run`, as README shows them, finish a short task over the fake upstream.

Each is run as its driver in this directory runs it (a fresh HOME, no telemetry, a dummy key) but with nothing
pointing it at a server: `inflight run --config FILE -- AGENT ...` starts the proxy (its config's upstream the
fake's `/v1`, so Gemini CLI's `/v1beta/...` goes to the fake's origin) and points the agent at it, Claude Code
and Gemini CLI by their variables, Codex by a provider on its command line. A missing agent skips its test
(an error with `INFLIGHT_<NAME>_REQUIRED=1`, as in `.ci/run`).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.agents import gemini_cli
from tests.agents.claude_code import claude_environment
from tests.agents.installed import required_binary
from tests.support.gemini import GeminiTaskAgent
from tests.support.messages import MessagesTaskAgent
from tests.support.responses import TASK_MARKER, TaskAgent
from tests.support.servers import serve
from tests.support.upstream import UpstreamApp

STEPS = 2
OUTPUT_LINES = 20
PROMPT = f"Do the {TASK_MARKER}: run the steps one by one."
FINISHED = f"All {STEPS} steps are done. FINISHED"
NOWHERE = "http://127.0.0.1:9"  # what the agents' own variables say, if `run` left them: nothing listens there
TIMEOUT_S = 120
ROOT = Path(__file__).resolve().parents[2]


@contextmanager
def fake_behind_a_config(app: UpstreamApp) -> Iterator[Path]:
    """The fake on loopback, and a config whose upstream is its `/v1` (as README's local server)."""
    with serve(app) as url, tempfile.TemporaryDirectory() as directory:
        config = Path(directory, "inflight.yaml")
        config.write_text(f"upstream: {{base_url: {url}/v1}}\n")
        yield config


def inflight_run(config: Path, command: list[str], *, env: dict[str, str], cwd: str) -> tuple[int, str]:
    """`inflight run --config CONFIG -- COMMAND` in `cwd` (the agent's working directory), this checkout's."""
    done = subprocess.run(
        [sys.executable, "-m", "inflight", "run", "--config", str(config), "--log", f"{config}.log", "--", *command],
        cwd=cwd,
        env={**env, "PYTHONPATH": str(ROOT)},
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )
    return done.returncode, done.stdout + done.stderr


def test_claude_code_through_inflight_run() -> None:
    binary = required_binary("claude", "INFLIGHT_CLAUDE", agent="Claude Code", package="@anthropic-ai/claude-code")
    model = "claude-sonnet-4-5"
    app = UpstreamApp()
    app.messages.agent = MessagesTaskAgent(steps=STEPS, output_lines=OUTPUT_LINES)
    with fake_behind_a_config(app) as config, tempfile.TemporaryDirectory() as home:
        command = [binary, "-p", PROMPT, "--output-format", "stream-json", "--verbose"]
        command += ["--dangerously-skip-permissions", "--model", model]
        env = claude_environment(home, NOWHERE, own_compaction=False)
        code, output = inflight_run(config, command, env=env, cwd=home)
    assert code == 0, output[-2000:]
    assert FINISHED in output
    assert app.messages_requests() and app.messages.rejected == []


def test_codex_through_inflight_run() -> None:
    binary = required_binary("codex", "INFLIGHT_CODEX", agent="the Codex CLI", package="@openai/codex")
    model = "gpt-5.1-codex"
    app = UpstreamApp()
    app.responses.agent = TaskAgent(steps=STEPS, output_lines=OUTPUT_LINES)
    with fake_behind_a_config(app) as config, tempfile.TemporaryDirectory() as home:
        # No provider here: `run` gives Codex one on its command line.
        Path(home, "config.toml").write_text(
            f'model = "{model}"\napproval_policy = "never"\nsandbox_mode = "danger-full-access"\n'
        )
        workdir = Path(home, "work")
        workdir.mkdir()
        env = {**os.environ, "CODEX_HOME": home, "OPENAI_API_KEY": "sk-dummy", "NO_COLOR": "1"}
        env |= {"OPENAI_BASE_URL": NOWHERE}
        code, output = inflight_run(
            config, [binary, "exec", "--skip-git-repo-check", PROMPT], env=env, cwd=str(workdir)
        )
    assert code == 0, output[-2000:]
    assert FINISHED in output
    assert app.responses_requests() and app.responses.rejected == []


def test_gemini_cli_through_inflight_run() -> None:
    binary = required_binary("gemini", "INFLIGHT_GEMINI", agent="Gemini CLI", package="@google/gemini-cli")
    model = gemini_cli.DEFAULT_MODEL
    app = UpstreamApp()
    app.gemini.agent = GeminiTaskAgent(steps=STEPS, output_lines=OUTPUT_LINES)
    with fake_behind_a_config(app) as config, tempfile.TemporaryDirectory() as home:
        settings = Path(home, ".gemini", "settings.json")  # the API-key sign-in, as docs/agents.md says
        settings.parent.mkdir()
        settings.write_text(json.dumps(gemini_cli.gemini_settings(None)))
        workdir = Path(home, "work")
        workdir.mkdir()
        env = {k: v for k, v in os.environ.items() if not k.startswith(gemini_cli.INHERITED_PREFIXES)}
        env |= {"HOME": home, "GEMINI_API_KEY": "gemini-dummy-key", "GEMINI_CLI_NO_RELAUNCH": "1", "NO_COLOR": "1"}
        env |= {"GOOGLE_GEMINI_BASE_URL": NOWHERE}
        command = [binary, "-p", PROMPT, "--yolo", "--model", model, "--output-format", "json"]
        code, output = inflight_run(config, command, env=env, cwd=str(workdir))
    assert code == 0, output[-2000:]
    assert FINISHED in output
    assert app.gemini_requests() and app.gemini.rejected == []
    assert all(r.path.startswith("/v1beta/") for r in app.gemini_requests())  # the fake's origin, not /v1/v1beta
