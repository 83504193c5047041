"""Every command README.md and docs/ show is exercised, so none can rot.

A command in a fenced shell block is run here (an `inflight` command, to its end or, for a server,
until it answers `/healthz`), checked against its command line (a benchmark, which takes minutes:
its arguments must parse), or found in `.ci/run`, which runs it (installing, the test suite). A
command quoted in the text (`inflight serve --workers N`) must name a command and options that
exist. A command nothing here knows how to exercise fails the test, until someone teaches it.
"""

from __future__ import annotations

import argparse
import ast
import importlib
import importlib.metadata
import os
import re
import shlex
import signal
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from inflight.cli import build_parser
from inflight.config import load_settings
from tests.support.servers import free_port
from tests.support.waiting import wait_until

ROOT = Path(__file__).resolve().parents[1]
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
SHELL_BLOCK = re.compile(r"^```(?:sh|bash|console|shell)\n(.*?)^```", re.MULTILINE | re.DOTALL)
INLINE = re.compile(r"(?<!`)`([^`\n]+)`(?!`)")
COMMAND_START = ("inflight ", "python -m benchmarks.", "pytest", "pip ", "npm ", "apt-get ", "ruff ", "mypy ")
# The real agents, which `tests/agents/` runs through inflight (pointed at it with the variables the documents show).
AGENTS = {
    "claude": ("tests/agents/claude_code.py", "ANTHROPIC_BASE_URL"),
    "codex": ("tests/agents/codex.py", "base_url"),
    "gemini": ("tests/agents/gemini_cli.py", "GOOGLE_GEMINI_BASE_URL"),
}
# Set-up lines that only `.ci/run` runs (a fresh virtualenv, the install): they must be there, word for word.
CI_RUN = (ROOT / ".ci" / "run").read_text(encoding="utf-8")


@dataclass(frozen=True)
class Shown:
    """A command as a document shows it: in a shell block (run), or quoted in the text (only checked)."""

    document: str
    command: str
    fenced: bool

    def __str__(self) -> str:
        return f"{self.document}: {self.command}"


def shown_commands() -> list[Shown]:
    found: list[Shown] = []
    for path in DOCUMENTS:
        text = path.read_text(encoding="utf-8")
        name = path.relative_to(ROOT).as_posix()
        for block in SHELL_BLOCK.findall(text):
            for line in block.replace("\\\n", " ").splitlines():
                for part in split_command(line):
                    found.append(Shown(name, part, fenced=True))
        prose = SHELL_BLOCK.sub("", text)
        for span in INLINE.findall(prose):
            if ASSIGNMENTS.sub("", span).startswith(COMMAND_START):
                found += [Shown(name, part, fenced=False) for part in split_command(span)]
    return found


def split_command(line: str) -> list[str]:
    """A shell line's commands (`a && b`), as written (globs and quotes kept), without the comment after them."""
    line = re.sub(r"(^|\s)#.*$", "", line).strip()
    return [part.strip() for part in line.split("&&") if part.strip()]


ASSIGNMENT = re.compile(r"""([A-Z_][A-Z0-9_]*)=(\$\([^)]*\)|'[^']*'|"[^"]*"|\S*)\s+""")
ASSIGNMENTS = re.compile(rf"^(?:{ASSIGNMENT.pattern})*")


def words_of(command: str) -> tuple[dict[str, str], list[str]]:
    """The variables a command sets for itself (`A=b cmd`, `A=$(...) cmd`), and its words."""
    env: dict[str, str] = {}
    while found := ASSIGNMENT.match(command):
        env[found[1]] = found[2].strip("'\"")
        command = command[found.end() :]
    return env, shlex.split(command)


def kind_of(command: str) -> str:
    _, words = words_of(command)
    head = words[0] if words else ""
    if head == "inflight":
        return "inflight"
    if words[:2] == ["python", "-m"] and words[2].startswith("benchmarks."):
        return "benchmark"
    if head == "export":
        return "export"
    if head in ("pytest", "pip", "python3", ".", "source", "npm", "apt-get", "ruff", "mypy"):
        return "ci"
    if head == "docker":
        return "docker"
    if head in AGENTS:
        return "agent"
    return "unknown"


SHOWN = shown_commands()


def ids(items: list[Shown]) -> list[str]:
    return [item.command[:70] for item in items]


def test_the_documents_show_commands() -> None:
    kinds = {kind_of(item.command) for item in SHOWN}
    assert {"inflight", "benchmark", "ci"} <= kinds, kinds  # the parsing above finds what it should


@pytest.mark.parametrize("shown", SHOWN, ids=ids(SHOWN))
def test_each_command_is_one_something_exercises(shown: Shown) -> None:
    assert kind_of(shown.command) != "unknown", f"{shown}: nothing exercises this command; teach tests/test_docs.py"


CI_COMMANDS = [item for item in SHOWN if kind_of(item.command) == "ci"]


@pytest.mark.parametrize("shown", CI_COMMANDS, ids=ids(CI_COMMANDS))
def test_set_up_and_test_commands_are_run_by_ci(shown: Shown) -> None:
    env, words = words_of(shown.command)
    if shown.command in CI_RUN.replace("\\\n", " "):
        return
    if words[0] == "pytest" and len(words) > 1:  # a selection of the suite: it must select something
        collected = subprocess.run(
            [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *words[1:]],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=120,
            env={**os.environ, **env},
        )
        assert collected.returncode == 0 and re.search(r"^\d+(/\d+)? tests? collected", collected.stdout, re.M), shown
        return
    if shown.fenced:
        assert shown.command in CI_RUN.replace("\\\n", " "), f"{shown}: not in .ci/run"
        return
    # Quoted in the text, often shortened: a line of .ci/run runs it with every word it shows.
    wanted = [word for word in words if not word.startswith("-")]
    lines = CI_RUN.replace("\\\n", " ").splitlines()
    assert any(all(word in line.split() for word in wanted) for line in lines), f"{shown}: not in .ci/run"


EXPORTS = [item for item in SHOWN if kind_of(item.command) == "export"]


@pytest.mark.parametrize("shown", EXPORTS, ids=ids(EXPORTS))
def test_each_variable_shown_is_one_the_tests_set(shown: Shown) -> None:
    """The agents' variables (OPENAI_BASE_URL, ANTHROPIC_BASE_URL) are what the tests point the real clients with."""
    name = shown.command.split()[1].partition("=")[0]
    sources = [*ROOT.glob("tests/**/*.py"), *ROOT.glob("inflight/**/*.py")]
    assert any(name in path.read_text(encoding="utf-8") for path in sources), f"{shown}: {name} is set nowhere"


AGENT_RUNS = [item for item in SHOWN if kind_of(item.command) == "agent"]


@pytest.mark.parametrize("shown", AGENT_RUNS, ids=ids(AGENT_RUNS))
def test_each_agent_shown_is_one_the_tests_run(shown: Shown) -> None:
    _, words = words_of(shown.command)
    module, pointed_with = AGENTS[words[0]]
    source = (ROOT / module).read_text(encoding="utf-8")
    assert pointed_with in source and "subprocess.run(" in source, f"{shown}: {module} does not run it so"


DOCKER = [item for item in SHOWN if kind_of(item.command) == "docker"]
# No Docker on these machines: what a docker command runs is exercised without it, by these tests.
DOCKER_TESTS = {
    "compose": ("docker-compose.yml", "tests/deploy/test_topology.py"),
    "build": ("Dockerfile", "tests/deploy/test_image.py"),
}


@pytest.mark.parametrize("shown", DOCKER, ids=ids(DOCKER))
def test_each_docker_command_is_one_a_test_runs_without_docker(shown: Shown) -> None:
    _, words = words_of(shown.command)
    assert words[1] in DOCKER_TESTS, f"{shown}: no test runs this without Docker"
    used, test = DOCKER_TESTS[words[1]]
    assert (ROOT / used).is_file() and used in (ROOT / test).read_text(encoding="utf-8"), shown


BENCHMARKS = [item for item in SHOWN if kind_of(item.command) == "benchmark"]


@pytest.mark.parametrize("shown", BENCHMARKS, ids=ids(BENCHMARKS))
def test_each_benchmark_command_parses(shown: Shown) -> None:
    _, words = words_of(shown.command)
    module = importlib.import_module(words[2])
    parser = module.arguments()
    if shown.fenced:
        parser.parse_args(words[3:])  # exits (a test failure) on an option it does not take
    else:
        unknown = [word for word in options_of(words[3:]) if word not in parser._option_string_actions]
        assert not unknown, f"{shown}: {unknown}"


def inflight_commands() -> dict[str, argparse.ArgumentParser]:
    """`inflight`'s commands and their parsers."""
    actions = [action for action in build_parser()._actions if isinstance(action, argparse._SubParsersAction)]
    return dict(actions[0].choices)


def options_of(words: list[str]) -> list[str]:
    return [word.lstrip("[").split("=")[0].rstrip("]") for word in words if word.lstrip("[").startswith("--")]


QUOTED = [item for item in SHOWN if kind_of(item.command) == "inflight" and not item.fenced]


@pytest.mark.parametrize("shown", QUOTED, ids=ids(QUOTED))
def test_each_inflight_command_quoted_exists_with_its_options(shown: Shown) -> None:
    _, words = words_of(shown.command)
    commands = inflight_commands()
    assert len(words) > 1 and words[1] in commands, shown
    unknown = [word for word in options_of(words[2:]) if word not in commands[words[1]]._option_string_actions]
    assert not unknown, f"{shown}: {unknown}"


RUN = [item for item in SHOWN if kind_of(item.command) == "inflight" and item.fenced]


@pytest.fixture
def sandbox(tmp_path: Path) -> Iterator[dict[str, str]]:
    """The environment a command shown runs in: the installed `inflight` first on PATH, its state kept in a
    temporary directory (never a file in the checkout), no key of anyone's."""
    env = {key: value for key, value in os.environ.items() if not key.startswith(("INFLIGHT_", "OPENAI_"))}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["INFLIGHT_DATA_DIR"] = str(tmp_path)
    env["INFLIGHT_STATE_URL"] = f"sqlite:///{tmp_path}/inflight.db"
    yield env


@pytest.mark.parametrize("shown", RUN, ids=ids(RUN))
def test_each_inflight_command_shown_runs(shown: Shown, sandbox: dict[str, str], tmp_path: Path) -> None:
    env, words = words_of(shown.command)
    env = sandbox | env
    if words[1] == "serve" or "--serve" in words:
        serves(words, env, tmp_path / "output.log")
        return
    done = subprocess.run(["bash", "-c", shown.command], cwd=ROOT, env=env, capture_output=True, timeout=180)
    assert done.returncode == 0, f"{shown}: {done.returncode}\n{done.stderr.decode()[-2000:]}"
    assert done.stdout.strip(), f"{shown}: printed nothing"


def serves(words: list[str], env: dict[str, str], log: Path) -> None:
    """A server command: it answers /healthz on its port (a free one, not the shown one's) until stopped."""
    port = free_port()
    with log.open("wb") as sink:
        proc = subprocess.Popen([*words, "--port", str(port)], cwd=ROOT, env=env, stdout=sink, stderr=sink)
        try:
            wait_until(lambda: answers(port) or proc.poll() is not None, timeout=60)
            assert proc.poll() is None, log.read_text()[-2000:]
        finally:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    assert proc.returncode in (0, -signal.SIGINT, 130), (proc.returncode, log.read_text()[-2000:])


def answers(port: int) -> bool:
    try:
        return httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


def blocks(language: str) -> list[tuple[str, str]]:
    """The fenced blocks of `language` in README.md and docs/: (document, text)."""
    pattern = re.compile(rf"^```{language}\n(.*?)^```", re.MULTILINE | re.DOTALL)
    return [
        (path.relative_to(ROOT).as_posix(), text) for path in DOCUMENTS for text in pattern.findall(path.read_text())
    ]


YAML = blocks("yaml")


@pytest.mark.parametrize("document, text", YAML, ids=[f"{d}:{t[:40]}" for d, t in YAML])
def test_each_yaml_block_is_a_config_inflight_loads(document: str, text: str, tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(text, encoding="utf-8")
    load_settings(str(config))  # raises, naming the key, on anything it does not take


TOML = blocks("toml")


@pytest.mark.parametrize("document, text", TOML, ids=[f"{d}:{t[:40]}" for d, t in TOML])
def test_each_codex_provider_shown_is_configured_as_the_codex_test_configures_it(document: str, text: str) -> None:
    """The provider's keys are the ones `tests/agents/codex.py` gives the real Codex CLI, with the same values
    where they are not names (its `base_url` is the proxy's, its key variable its own)."""
    shown = tomllib.loads(text)
    source = (ROOT / AGENTS["codex"][0]).read_text(encoding="utf-8")
    start = source.index("[model_providers.")
    tested = tomllib.loads(source[start : source.index('"""', start)].replace("{base_url}", "x"))
    [tested_provider] = tested["model_providers"].values()
    for provider in shown["model_providers"].values():
        assert set(provider) == set(tested_provider), document
        for key in ("wire_api", "supports_websockets"):
            assert provider[key] == tested_provider[key], (document, key)
    assert shown["model_provider"] in shown["model_providers"], document


INSTALL_TEST_EXTRAS = "pip install -e '.[test]'"


def test_each_document_shows_the_benchmarks_install_line_before_their_commands() -> None:
    """A benchmark command copied after the plain install fails on `pytest` or `httpx`: each document that shows
    one shows the test extras' install first (and `.ci/run` runs that line: `test_set_up_and_test_commands...`)."""
    for path in DOCUMENTS:
        text = path.read_text(encoding="utf-8")
        first = text.find("python -m benchmarks.")
        if first >= 0:
            assert 0 <= text.find(INSTALL_TEST_EXTRAS) < first, f"{path.name}: no {INSTALL_TEST_EXTRAS} before {first}"
    assert INSTALL_TEST_EXTRAS in CI_RUN


def imported_modules(path: Path) -> set[str]:
    """The absolute imports of a Python file, dotted, function-local ones included."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.add(node.module)
    return found


def test_the_test_extras_install_what_the_benchmarks_import() -> None:
    """Every distribution the benchmarks import, through the test support code they use, is one the install
    line brings: the project's own dependencies or its `test` extra."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    declared = {
        re.split(r"[<>=\[;! ]", requirement, maxsplit=1)[0].lower().replace("_", "-")
        for requirement in [*project["dependencies"], *project["optional-dependencies"]["test"]]
    }
    pending = list((ROOT / "benchmarks").glob("*.py"))
    seen: set[Path] = set()
    third_party: set[str] = set()
    while pending:
        path = pending.pop()
        if path in seen:
            continue
        seen.add(path)
        for module in imported_modules(path):
            top = module.split(".")[0]
            if top in ("benchmarks", "tests"):
                local = ROOT / Path(*module.split("."))
                candidates = (local.with_suffix(".py"), local / "__init__.py")
                pending += [candidate for candidate in candidates if candidate.is_file()]
            elif top != "inflight" and top not in sys.stdlib_module_names:
                third_party.add(top)
    distributions = importlib.metadata.packages_distributions()
    providers = {top: {name.lower().replace("_", "-") for name in distributions.get(top, [top])} for top in third_party}
    missing = {top: names for top, names in providers.items() if not names & declared}
    assert not missing, missing
