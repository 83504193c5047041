"""The Dockerfile and .dockerignore, read as Docker reads them, and the image's command run as the image runs it
(without Docker: the same config, environment and arguments, in a working directory of its own)."""

from __future__ import annotations

import fnmatch
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.processes import process
from tests.support.servers import free_port
from tests.support.waiting import wait_until

ROOT = Path(__file__).resolve().parents[2]


def instructions() -> list[tuple[str, str]]:
    """The Dockerfile's instructions, continuation lines joined, comments left out."""
    text = re.sub(r"\\\n\s*", " ", (ROOT / "Dockerfile").read_text())
    lines = [line.strip() for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    return [(line.split(None, 1)[0], line.split(None, 1)[1]) for line in lines]


def only(name: str) -> str:
    found = [argument for instruction, argument in instructions() if instruction == name]
    assert len(found) == 1, (name, found)
    return found[0]


def env() -> dict[str, str]:
    """The image's environment (`ENV KEY=value …` lines)."""
    items = [item for instruction, argument in instructions() if instruction == "ENV" for item in argument.split()]
    return dict(item.split("=", 1) for item in items)


def option(command: list[str], name: str) -> str:
    return command[command.index(name) + 1]


def test_the_healthcheck_asks_the_server_the_config_describes() -> None:
    serve = json.loads(only("CMD"))
    health = json.loads(only("HEALTHCHECK").split("CMD", 1)[1])
    assert serve[:2] == ["inflight", "serve"] and health[:2] == ["inflight", "health"]
    assert option(health, "--config") == option(serve, "--config")  # the same listen.port
    assert "--port" not in serve and not any("8787" in part for part in health)
    copied = [argument.split()[-1] for instruction, argument in instructions() if instruction == "COPY"]
    assert option(serve, "--config") in copied


def test_relative_state_paths_land_on_the_volume_the_user_owns() -> None:
    data_dir = env()["INFLIGHT_DATA_DIR"]
    assert only("VOLUME") == data_dir
    assert f"chown inflight {data_dir}" in only("RUN") and only("USER") == "inflight"


def ignored(path: str, patterns: list[str]) -> bool:
    """Whether .dockerignore's `patterns` leave `path` out of the build context, as Docker's matcher has it:
    a pattern matching a directory leaves out all below it, `**/` is any depth, the last match wins."""
    parts = path.split("/")
    leading = ["/".join(parts[:end]) for end in range(1, len(parts) + 1)]  # the path and the directories above
    result = False
    for line in patterns:
        negated, pattern = line.startswith("!"), line.removeprefix("!")
        if pattern.startswith("**/"):
            candidates = {"/".join(p.split("/")[i:]) for p in leading for i in range(len(p.split("/")))}
            pattern = pattern.removeprefix("**/")
        else:
            candidates = set(leading)
        if any(fnmatch.fnmatchcase(candidate, pattern) for candidate in candidates):
            result = not negated
    return result


@pytest.mark.parametrize(
    "path",
    [
        "inflight.db",
        "inflight.db-wal",
        "inflight.db-shm",
        "data/inflight.db",
        "state/records.sqlite",
        "records.sqlite3",
        "records.sqlite3-journal",
        "dump.rdb",
        ".venv/bin/python",
    ],
)
def test_databases_stay_out_of_the_build_context(path: str) -> None:
    patterns = [line.strip() for line in (ROOT / ".dockerignore").read_text().splitlines()]
    assert ignored(path, [p for p in patterns if p and not p.startswith("#")])


@pytest.mark.parametrize(
    "path", ["pyproject.toml", "README.md", "constraints.txt", "inflight/app.py", "config/inflight.yaml"]
)
def test_what_the_image_copies_stays_in_the_build_context(path: str) -> None:
    patterns = [line.strip() for line in (ROOT / ".dockerignore").read_text().splitlines()]
    assert not ignored(path, [p for p in patterns if p and not p.startswith("#")])


def test_the_image_command_with_the_example_config(tmp_path: Path) -> None:
    """What the container runs: the example config, `--host 0.0.0.0`, INFLIGHT_DATA_DIR from the image, and
    nothing else set. It starts (the archive is off and no key is held, so no keys are needed), its
    records go to the data directory, the working directory stays empty, and the healthcheck passes."""
    data, work = tmp_path / "data", tmp_path / "app"
    data.mkdir()
    work.mkdir()
    serve = json.loads(only("CMD"))
    config = str(ROOT / "config" / "inflight.yaml")
    port = free_port()
    environment = {"INFLIGHT_DATA_DIR": str(data), "INFLIGHT_STATE_URL": "", "INFLIGHT_ARCHIVE": ""}
    command = [sys.executable, "-m", "inflight", *serve[1:], "--port", str(port)]
    command[command.index(option(serve, "--config"))] = config
    log = tmp_path / "serve.log"
    with process(command, port, env=environment, output=log, cwd=work):
        wait_until(lambda: "listening on" in log.read_text(), timeout=60)
        health = [sys.executable, "-m", "inflight", "health", "--config", config, "--port", str(port)]
        checked = subprocess.run(health, capture_output=True, text=True, cwd=work, timeout=60, check=False)
    startup = next(line for line in log.read_text().splitlines() if "listening on" in line)
    assert f"listening on http://0.0.0.0:{port}/v1" in startup and f"state sqlite:///{data}/inflight.db;" in startup
    assert " WARNING " not in log.read_text() and list(work.iterdir()) == []
    assert checked.returncode == 0, checked.stderr
