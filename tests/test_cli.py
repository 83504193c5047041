"""The `inflight` command: offline commands that leave the configured store alone, `--help`, and `health`
against a real server."""

from __future__ import annotations

import re
import socket
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest
import redis

from inflight.cli import build_parser, main
from tests.support.processes import process
from tests.support.redis import redis_server
from tests.support.servers import free_port

ROOT = Path(__file__).resolve().parents[1]
TRACE = str(ROOT / "tests" / "fixtures" / "traces" / "swe_function_calling_simple.json")  # 1,964 tokens
# A 4,000-token window: a budget of 3,000, which a forced compaction of TRACE masks and digests.
CONFIG = 'models: {"*": {context_window: 4000}}\nstate: {url: "${INFLIGHT_STATE_URL}"}\narchive: {enabled: true}\n'


@pytest.fixture
def config(tmp_path: Path) -> Path:
    path = tmp_path / "inflight.yaml"
    path.write_text(CONFIG)
    return path


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def offline_runs(capsys: pytest.CaptureFixture[str], config: Path, *state: str) -> list[tuple[int, str, str]]:
    """`compact` twice, `count`, and `eval` twice, as an operator trying settings would run them."""
    compact = ("compact", TRACE, "--config", str(config), "--no-llm", "--force", *state)
    evaluate = ("eval", TRACE, "--window", "2000", "--config", str(config), "--json", *state)
    count = ("count", TRACE, "--config", str(config), *state)
    return [run(capsys, *argv) for argv in (compact, compact, count, evaluate, evaluate)]


def sqlite_keys(path: Path) -> list[str]:
    with sqlite3.connect(path) as db:
        return [key for (key,) in db.execute("SELECT key FROM records")]


def test_offline_commands_leave_the_configured_sqlite_store_alone_and_repeat_themselves(
    tmp_path: Path, config: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The config's store (here from `INFLIGHT_STATE_URL`, the archive on) is the live proxy's: a forced
    compaction's record written there would be served to the live conversation. Before, the second
    `compact` found the first one's record and printed `summary-cached`."""
    live = tmp_path / "live.db"
    monkeypatch.setenv("INFLIGHT_STATE_URL", f"sqlite:///{live}")
    first, second, counted, eval_first, eval_second = offline_runs(capsys, config)
    assert first[0] == counted[0] == eval_first[0] == 0, (first, counted, eval_first)
    assert "actions mask,fallback" in first[2] and first == second
    assert "prompt tokens" in counted[1]
    assert orjson.loads(eval_first[1])["compacted_requests"] > 0 and eval_first == eval_second
    assert not live.exists() and sorted(p.name for p in tmp_path.iterdir()) == ["inflight.yaml"]


def test_offline_commands_leave_the_configured_redis_alone(
    config: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    with redis_server() as url:
        monkeypatch.setenv("INFLIGHT_STATE_URL", url)
        runs = offline_runs(capsys, config)
        client = redis.Redis.from_url(url)
        try:
            untouched = client.dbsize()
            offline_runs(capsys, config, "--state", url)  # asked for, they write there
            written = client.dbsize()
        finally:
            client.close()
    assert [code for code, _, _ in runs] == [0] * 5
    assert untouched == 0 and written > 0


def test_state_option_keeps_the_records_where_it_says(
    tmp_path: Path, config: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    live, own = tmp_path / "live.db", tmp_path / "own.db"
    monkeypatch.setenv("INFLIGHT_STATE_URL", f"sqlite:///{live}")
    first, second, _, eval_first, _ = offline_runs(capsys, config, "--state", f"sqlite:///{own}")
    assert "actions mask,fallback" in first[2]
    assert "actions summary-cached" in second[2]  # the second run found the first one's record there
    assert eval_first[0] == 0 and len(sqlite_keys(own)) > 1  # compact's record and eval's
    assert not live.exists()


def test_a_relative_state_path_resolves_under_the_data_directory(
    tmp_path: Path, config: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    work, data = tmp_path / "work", tmp_path / "data"
    work.mkdir()
    data.mkdir()
    monkeypatch.chdir(work)
    monkeypatch.setenv("INFLIGHT_STATE_URL", "memory://")
    monkeypatch.setenv("INFLIGHT_DATA_DIR", str(data))
    code, _, err = run(
        capsys, "compact", TRACE, "--config", str(config), "--no-llm", "--force", "--state", "sqlite:///own.db"
    )
    assert code == 0, err
    assert len(sqlite_keys(data / "own.db")) == 1 and list(work.iterdir()) == []


def test_offline_commands_never_read_the_configured_store(
    tmp_path: Path, config: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The live store holds this conversation's record (as a live proxy, or a `--state` run, leaves it): a
    `compact` that reads it says `summary-cached`, one that does not compacts afresh."""
    live = tmp_path / "live.db"
    compact = ("compact", TRACE, "--config", str(config), "--no-llm", "--force")
    monkeypatch.setenv("INFLIGHT_STATE_URL", "memory://")
    filled = run(capsys, *compact, "--state", f"sqlite:///{live}")
    control = run(capsys, *compact, "--state", f"sqlite:///{live}")  # one that reads the store: the record
    monkeypatch.setenv("INFLIGHT_STATE_URL", f"sqlite:///{live}")
    offline = run(capsys, *compact)
    assert sqlite_keys(live) and "summary-cached" in control[2], control
    assert "summary-cached" not in offline[2] and offline == filled


def test_help_names_every_command_with_what_it_does(capsys: pytest.CaptureFixture[str]) -> None:
    """Each command is in the description and has its line of help (a command added without `help=` has none:
    `eval` once went missing so)."""
    parser = build_parser()
    with pytest.raises(SystemExit):
        parser.parse_args(["--help"])
    shown = capsys.readouterr().out
    description = shown.split("\n\n")[1]  # the paragraph after the usage line
    helped = set(re.findall(r"^    (\w+) +\S", shown, re.MULTILINE))
    commands = {"demo", "serve", "check", "run", "health", "count", "compact", "eval"}
    assert helped == commands, helped
    assert all(name in description for name in commands), description


@pytest.fixture
def listening(tmp_path: Path) -> Iterator[tuple[Path, int]]:
    """A real `inflight serve` on the port its config names (no --port): yields the config and the port."""
    port = free_port()
    config = tmp_path / "serve.yaml"
    config.write_text(f"listen: {{host: 0.0.0.0, port: {port}}}\nupstream: {{base_url: http://127.0.0.1:9/v1}}\n")
    with process([sys.executable, "-m", "inflight", "serve", "--config", str(config)], port):
        yield config, port


def test_health_follows_the_port_the_config_names(
    listening: tuple[Path, int], capsys: pytest.CaptureFixture[str]
) -> None:
    config, port = listening
    code, out, _ = run(capsys, "health", "--config", str(config))
    assert code == 0 and out.strip() == f"inflight: http://127.0.0.1:{port}/healthz: 200"  # 0.0.0.0: asked on loopback
    assert run(capsys, "health", "--port", str(port))[0] == 0  # --port as serve takes it


def test_health_fails_when_nothing_answers(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "inflight.yaml"
    config.write_text(f"listen: {{port: {free_port()}}}\n")
    code, _, err = run(capsys, "health", "--config", str(config), "--timeout", "5")
    assert code == 1 and "refused" in err.lower()


def test_compact_sends_as_the_proxy_would_unless_forced(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """TRACE fits a 4,000-token window: the proxy forwards it as it came, and so does `compact`; `--force`
    compacts it anyway, and a shadow config prints the body unchanged and says what it would have sent."""
    roomy, tight, shadow = (tmp_path / name for name in ("roomy.yaml", "tight.yaml", "shadow.yaml"))
    roomy.write_text('models: {"*": {context_window: 4000}}\n')
    tight.write_text('models: {"*": {context_window: 2000}}\n')
    shadow.write_text('models: {"*": {context_window: 2000}}\ncompaction: {mode: shadow}\n')
    original = orjson.loads(Path(TRACE).read_bytes())
    fits = run(capsys, "compact", TRACE, "--config", str(roomy), "--no-llm")
    forced = run(capsys, "compact", TRACE, "--config", str(roomy), "--no-llm", "--force")
    over = run(capsys, "compact", TRACE, "--config", str(tight), "--no-llm")
    shadowed = run(capsys, "compact", TRACE, "--config", str(shadow), "--no-llm")
    assert fits[0] == 0 and "nothing to do" in fits[2] and orjson.loads(fits[1]) == original
    assert "actions mask,fallback" in forced[2] and orjson.loads(forced[1]) != original
    # Compacted, its placeholders name handles (`inflight_retrieve`), which shadow mode never adds.
    # The tool's own definition (about 110 tokens) is counted in what a compacted request holds.
    assert "2,073 -> 1,544 tokens" in over[2] and orjson.loads(over[1]) != original
    assert shadowed[0] == 0 and orjson.loads(shadowed[1]) == original
    assert "compaction.mode is shadow: sent as it came; compaction would have sent 1,467 of 1,964" in shadowed[2]
    assert re.search(r"; \d+ messages? summarized; 0 summarizer calls", forced[2]), forced[2]


def test_eval_numbers_turns_from_one_as_the_demo_does(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "eval", TRACE, "--window", "2000")
    turns = [int(line.split("|")[2]) for line in out.splitlines() if line.startswith("| swe_function_calling_simple |")]
    assert code == 0 and turns and min(turns) >= 1
    assert re.search(r"^\d+ compacted requests?: ", out, re.M) and "1 compacted requests" not in out


def test_eval_says_what_inflight_retrieve_can_read_back_of_the_facts_lost(capsys: pytest.CaptureFixture[str]) -> None:
    """At 2,000 tokens the ledger loses facts; those of the three agents that offer tools are all in originals a
    handle names (one call per compaction), the text-action agent's are not (no tools: no tool is added)."""
    traces = sorted(str(path) for path in Path(TRACE).parent.glob("*.json"))
    code, out, _ = run(capsys, "eval", *traces, "--window", "2000")
    assert code == 0
    assert "facts lost 65: 33 can be read back (inflight_retrieve), in 6 retrievals" in out
    rows = [line.split("|") for line in out.splitlines() if line.startswith("| swe_marshmallow_text_actions |")]
    rows = [row for row in rows if len(row) == 14]  # the compacted requests' table, not the prompt cache's
    assert rows and all(row[12].strip().endswith(": 0 (0)") for row in rows)


def test_serve_on_a_busy_port_says_so_in_one_line_and_never_that_it_listens() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        command = [
            sys.executable,
            "-m",
            "inflight",
            "serve",
            "--port",
            str(port),
            "--upstream",
            "http://127.0.0.1:9/v1",
        ]
        done = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False, cwd=ROOT)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        f"inflight: port {port} on 127.0.0.1 is in use (another inflight or another server listens there): stop "
        "it, or give this one another --port"
    ]
    assert "listening" not in done.stdout + done.stderr


def test_serve_warns_of_an_upstream_url_without_v1() -> None:
    from inflight.config import load_settings
    from inflight.http.server import upstream_warnings

    bare = load_settings(None, overrides={"upstream": {"base_url": "http://127.0.0.1:8080"}})
    [warning] = upstream_warnings(bare)
    assert "upstream.base_url: http://127.0.0.1:8080 has no /v1" in warning
    for url in ("http://127.0.0.1:8080/v1", "https://openrouter.ai/api/v1", "https://host/v1beta/openai"):
        assert upstream_warnings(load_settings(None, overrides={"upstream": {"base_url": url}})) == []


def test_serve_warns_of_a_gemini_upstream_url_with_a_version_and_not_of_its_origin() -> None:
    from inflight.config import load_settings
    from inflight.http.server import upstream_warnings

    def warnings(gemini: str) -> list[str]:
        overrides = {
            "upstream": {"base_url": "http://127.0.0.1:8080/v1"},
            "upstreams": {"gemini": {"base_url": gemini}},
        }
        return upstream_warnings(load_settings(None, overrides=overrides))

    assert warnings("https://generativelanguage.googleapis.com") == []  # its paths carry /v1beta
    [warning] = warnings("https://generativelanguage.googleapis.com/v1beta")
    assert "upstreams.gemini.base_url" in warning and "/v1beta/v1beta/X" in warning
