"""Running the real Claude Code CLI (`@anthropic-ai/claude-code`, a native binary inside the npm package) headless.

`.ci/run` installs the pinned package under `.cache/agents/`; `INFLIGHT_CLAUDE` may name another
binary. Each run is `claude -p PROMPT` (stream-json output, permissions skipped) in an empty
temporary directory with a fresh HOME, the Anthropic base URL pointed at the given origin with a
dummy key, and nothing that would leave loopback: no telemetry, error reports, update checks or
other nonessential traffic. Claude Code's own auto-compaction is off unless asked for.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from dataclasses import dataclass

from tests.agents.installed import agent_binary

VERSION = "2.1.328"  # .ci/run installs this one
DEFAULT_MODEL = "claude-sonnet-4-5"

# Variables that would steer a run from outside the test: another endpoint, a key, settings.
INHERITED_PREFIXES = ("ANTHROPIC_", "CLAUDE_", "CLAUDECODE", "DISABLE_", "MAX_THINKING", "BASH_", "MCP_")


def claude_binary() -> str | None:
    return agent_binary("claude", "INFLIGHT_CLAUDE")


@dataclass
class ClaudeRun:
    returncode: int
    output: str  # stdout (the stream-json events, one a line) then stderr


def claude_environment(home: str, base_url: str, *, own_compaction: bool) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(INHERITED_PREFIXES)}
    env |= {
        "HOME": home,
        "CLAUDE_CODE_TMPDIR": home,  # else it leaves a directory per run under /tmp/claude-<uid>/
        "ANTHROPIC_BASE_URL": base_url,  # the origin: Claude Code appends /v1/messages
        "ANTHROPIC_API_KEY": "sk-ant-dummy",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",  # without it: a HEAD /api/hello and telemetry
        "DISABLE_TELEMETRY": "1",
        "DISABLE_ERROR_REPORTING": "1",
        "DISABLE_AUTOUPDATER": "1",
        "NO_COLOR": "1",
    }
    if not own_compaction:
        env["DISABLE_AUTO_COMPACT"] = "1"
    if os.geteuid() == 0:  # Claude Code refuses --dangerously-skip-permissions as root outside a sandbox
        env["IS_SANDBOX"] = "1"
    return env


def run_claude(
    binary: str,
    base_url: str,
    prompt: str,
    *,
    model: str = DEFAULT_MODEL,
    own_compaction: bool = False,
    timeout_s: float = 600,
    env: dict[str, str] | None = None,
    arguments: tuple[str, ...] = (),
    then: tuple[str, ...] = (),
) -> ClaudeRun:
    """`claude -p PROMPT` against `base_url` (an origin, no `/v1`); `own_compaction`: leave Claude Code's
    auto-compaction on; `env`: more variables (where its auto-compaction fires); `arguments`: more flags;
    `then`: more prompts, each in the same session resumed (`--continue`), as a user types `/compact` later.
    The run's code is the first that failed (else 0), its output all of theirs."""
    with tempfile.TemporaryDirectory() as home, tempfile.TemporaryDirectory() as workdir:
        returncode, output = 0, ""
        for n, said in enumerate((prompt, *then)):
            command = [binary, "-p", said, "--output-format", "stream-json", "--verbose"]
            command += ["--dangerously-skip-permissions", "--model", model, *arguments]
            command += ["--continue"] if n else []
            done = subprocess.run(
                command,
                cwd=workdir,
                env=claude_environment(home, base_url, own_compaction=own_compaction) | (env or {}),
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
                timeout=timeout_s,
            )
            returncode = returncode or done.returncode
            output += done.stdout + done.stderr
    return ClaudeRun(returncode, output)
