"""Running the real Gemini CLI (`@google/gemini-cli`, a bundled Node.js program) headless.

`.ci/run` installs the pinned package under `.cache/agents/`; `INFLIGHT_GEMINI` may name another
binary. Each run is `gemini -p PROMPT --yolo` (JSON output) in an empty temporary directory with a
fresh HOME whose settings choose the API key sign-in, trust no folder and send no usage statistics or
telemetry, the Gemini API's base URL (`GOOGLE_GEMINI_BASE_URL`, which takes plain HTTP on loopback)
pointed at the given origin with a dummy key. Its own compression is left as it is: it assumes a window of
1,048,576 tokens for every Gemini model, and compresses only at a user's message once its last prompt passed
`compression_threshold` of that, so a one-prompt task never compresses; a `GeminiSession` resumes the session
of its earlier run with a new prompt, where the compression can happen.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.agents.installed import agent_binary

VERSION = "0.61.0"  # .ci/run installs this one
DEFAULT_MODEL = "gemini-2.5-pro"

# Variables that would steer a run from outside the test: another endpoint, a key, settings.
INHERITED_PREFIXES = ("GEMINI_", "GOOGLE_", "CLOUDSDK_", "OTEL_")


def gemini_binary() -> str | None:
    return agent_binary("gemini", "INFLIGHT_GEMINI")


@dataclass
class GeminiRun:
    returncode: int
    output: str  # stdout (the JSON result) then stderr


def gemini_settings(compression_threshold: float | None) -> dict[str, Any]:
    settings: dict[str, Any] = {
        "security": {"auth": {"selectedType": "gemini-api-key"}, "folderTrust": {"enabled": False}},
        "general": {"disableAutoUpdate": True, "disableUpdateNag": True},
        "privacy": {"usageStatisticsEnabled": False},
        "telemetry": {"enabled": False},
    }
    if compression_threshold is not None:
        settings["model"] = {"compressionThreshold": compression_threshold}
    return settings


class GeminiSession:
    """A fresh HOME and an empty working directory kept across runs, so that a later run may resume the session
    of an earlier one (`--resume latest`), as a user who comes back to it does."""

    def __init__(self, binary: str, base_url: str, *, compression_threshold: float | None = None) -> None:
        self.binary = binary
        self.base_url = base_url  # an origin: the SDK appends `/v1beta/models/...`
        self._home = tempfile.TemporaryDirectory()
        self._workdir = tempfile.TemporaryDirectory()
        settings = Path(self._home.name) / ".gemini" / "settings.json"
        settings.parent.mkdir()
        settings.write_text(json.dumps(gemini_settings(compression_threshold)))

    def __enter__(self) -> GeminiSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self._home.cleanup()
        self._workdir.cleanup()

    def run(
        self, prompt: str, *, model: str = DEFAULT_MODEL, resume: bool = False, timeout_s: float = 600
    ) -> GeminiRun:
        """`gemini -p PROMPT --yolo` (after `--resume latest`: in the session of the previous run)."""
        env = {k: v for k, v in os.environ.items() if not k.startswith(INHERITED_PREFIXES)}
        env |= {
            "HOME": self._home.name,
            "GEMINI_API_KEY": "gemini-dummy-key",
            "GOOGLE_GEMINI_BASE_URL": self.base_url,
            "GEMINI_CLI_NO_RELAUNCH": "1",  # one Node.js process, not a child relaunched with more memory
            "NO_COLOR": "1",
        }
        resuming = ["--resume", "latest"] if resume else []
        done = subprocess.run(
            [self.binary, *resuming, "-p", prompt, "--yolo", "--model", model, "--output-format", "json"],
            cwd=self._workdir.name,
            env=env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout_s,
        )
        return GeminiRun(done.returncode, done.stdout + done.stderr)


def run_gemini(
    binary: str,
    base_url: str,
    prompt: str,
    *,
    model: str = DEFAULT_MODEL,
    compression_threshold: float | None = None,
    timeout_s: float = 600,
) -> GeminiRun:
    """`gemini -p PROMPT --yolo` against `base_url` (an origin), in a session of its own."""
    with GeminiSession(binary, base_url, compression_threshold=compression_threshold) as session:
        return session.run(prompt, model=model, timeout_s=timeout_s)
