"""Running the real Codex CLI (`@openai/codex`, its binary shipped inside the npm package) headless.

`.ci/run` installs the pinned package under `.cache/agents/`; `INFLIGHT_CODEX` may name another
binary. Each run gets a fresh `CODEX_HOME` whose `config.toml` points a custom provider at the
given base URL (`wire_api = "responses"`, no WebSocket, a dummy key), keeps Codex's own
auto-compaction out of reach unless a run asks for it (a context window and an auto-compaction limit)
and its tool outputs whole, and runs with approvals and the sandbox off in an empty temporary
directory. With a custom provider Codex compacts by itself through the Responses API: the whole
history, then a user message that opens "You are performing a CONTEXT CHECKPOINT COMPACTION".
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from tests.agents.installed import agent_binary

VERSION = "0.169.0"  # .ci/run installs this one
DEFAULT_MODEL = "gpt-6.1-sol"  # what Codex picks when the config names none: its tools go in an input item
OUT_OF_REACH_WINDOW = 10_000_000  # a window and a compaction limit no test's task reaches
OUT_OF_REACH_LIMIT = 9_000_000


def codex_binary() -> str | None:
    return agent_binary("codex", "INFLIGHT_CODEX")


@dataclass
class CodexRun:
    returncode: int
    output: str


def run_codex(
    binary: str,
    base_url: str,
    prompt: str,
    *,
    model: str | None,
    context_window: int | None = None,
    auto_compact_limit: int | None = None,
    timeout_s: float = 600,
    openai_provider: bool = False,
) -> CodexRun:
    """`codex exec PROMPT` against `base_url`; `model` None: Codex's default (code mode). `context_window` and
    `auto_compact_limit` (tokens) are what Codex believes the window is and where it compacts by itself;
    None keeps each out of reach. `openai_provider`: Codex's own OpenAI provider pointed at `base_url`, with its
    remote compaction (`remote_compaction_v2`: a compaction trigger item at the end of a request) turned on,
    instead of a custom provider (whose compaction is a request of its checkpoint prompt)."""
    window = OUT_OF_REACH_WINDOW if context_window is None else context_window
    limit = OUT_OF_REACH_LIMIT if auto_compact_limit is None else auto_compact_limit
    with tempfile.TemporaryDirectory() as home, tempfile.TemporaryDirectory() as workdir:
        config = f'model = "{model}"\n' if model else ""
        config += f"""approval_policy = "never"
sandbox_mode = "danger-full-access"
model_context_window = {window}
model_auto_compact_token_limit = {limit}
tool_output_token_limit = 100000
"""
        if openai_provider:
            config += f"""openai_base_url = "{base_url}"

[features]
remote_compaction_v2 = true
"""
        else:
            config = f"""model_provider = "inflight-test"
{config}
[model_providers.inflight-test]
name = "inflight test"
base_url = "{base_url}"
env_key = "INFLIGHT_TEST_KEY"
wire_api = "responses"
supports_websockets = false
"""
        Path(home, "config.toml").write_text(config)
        env = {**os.environ, "CODEX_HOME": home, "INFLIGHT_TEST_KEY": "sk-dummy", "NO_COLOR": "1"}
        if openai_provider:
            env |= {"OPENAI_API_KEY": "sk-dummy", "OPENAI_BASE_URL": base_url}
        done = subprocess.run(
            [binary, "exec", "--skip-git-repo-check", prompt],
            cwd=workdir,
            env=env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout_s,
        )
    return CodexRun(done.returncode, done.stdout + done.stderr)
