"""Where the real agents' binaries are, and what a test module does when one is missing.

`.ci/run` installs each pinned npm package under `.cache/agents/` (its binary ships inside it) and
requires it (`INFLIGHT_<NAME>_REQUIRED=1`); elsewhere a missing agent skips its tests. An environment
variable may name another binary.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def agent_binary(name: str, variable: str) -> str | None:
    """The binary `variable` names, else the one `.ci/run` installed, else `name` on PATH."""
    named = os.environ.get(variable)
    if named:
        return named
    local = ROOT / ".cache" / "agents" / "node_modules" / ".bin" / name
    return str(local) if local.exists() else shutil.which(name)


def required_binary(name: str, variable: str, *, agent: str, package: str) -> str:
    """`agent_binary`, or the test module skipped (an error when `<variable>_REQUIRED=1`, as in `.ci/run`)."""
    binary = agent_binary(name, variable)
    if binary is None:
        if os.environ.get(f"{variable}_REQUIRED") == "1":
            raise RuntimeError(f"{agent} is required ({variable}_REQUIRED=1) but not installed")
        pytest.skip(f"{agent} is not installed (npm install {package}, see .ci/run)", allow_module_level=True)
    return binary
