"""`inflight check` (a config validated as `serve` reads it) and `inflight run` (a command given a proxy of its
own, its base URLs pointed at it), each as the operator types it: the real command in a subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import httpx

from tests.support.processes import process
from tests.support.servers import free_port

ROOT = Path(__file__).resolve().parents[1]
# What the command `run` starts says: the variables it was given, and whether the proxy answers meanwhile.
REPORT = """
import json, os, sys, urllib.request
names = ("OPENAI_BASE_URL", "ANTHROPIC_BASE_URL", "GOOGLE_GEMINI_BASE_URL")
origin = os.environ["ANTHROPIC_BASE_URL"]
opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
with opener.open(origin + "/healthz", timeout=10) as answer:
    healthy = answer.status == 200
print(json.dumps({"env": {name: os.environ.get(name) for name in names}, "healthy": healthy, "argv": sys.argv[1:]}))
sys.exit(3)
"""


def inflight(*argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "inflight", *argv],
        cwd=ROOT,
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def healthy(port: int) -> bool:
    try:
        return httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def test_check_a_good_config_says_where_each_format_goes(tmp_path: Path) -> None:
    config = tmp_path / "good.yaml"
    config.write_text("listen: {port: ${CHECK_PORT}}\nupstream: {base_url: http://127.0.0.1:9000/v1}\n")
    done = inflight("check", "--config", str(config), env={"CHECK_PORT": "9123"})  # `${VAR}` as serve expands it
    assert done.returncode == 0, done.stderr
    lines = [" ".join(line.split()) for line in done.stdout.splitlines()]
    assert lines == [
        f"inflight: {config}: valid",
        "listen: http://127.0.0.1:9123/v1",
        "chat_completions -> http://127.0.0.1:9000/v1",
        "responses -> http://127.0.0.1:9000/v1",
        "messages -> http://127.0.0.1:9000/v1",
        "gemini -> http://127.0.0.1:9000",
    ]
    defaults = inflight("check", "--upstream-gemini", "http://127.0.0.1:9100")
    assert defaults.returncode == 0 and "https://api.anthropic.com/v1" in defaults.stdout
    assert "-> http://127.0.0.1:9100" in defaults.stdout.splitlines()[-1]


def test_check_a_bad_config_exits_2_with_the_loaders_message(tmp_path: Path) -> None:
    typo = tmp_path / "typo.yaml"
    typo.write_text("upstream: {base_ur: http://127.0.0.1:9000/v1}\n")
    unset = tmp_path / "unset.yaml"
    unset.write_text("upstream: {api_key: ${INFLIGHT_CHECK_UNSET}}\n")
    exposed = tmp_path / "exposed.yaml"  # loads, but serve refuses to start: so does check
    exposed.write_text("listen: {host: 0.0.0.0}\nupstream: {api_key: sk-held}\n")
    for config, said in (
        (typo, "upstream.base_ur: unknown key"),
        (unset, "INFLIGHT_CHECK_UNSET is not set"),
        (exposed, "Set access.keys"),
    ):
        done = inflight("check", "--config", str(config))
        assert done.returncode == 2 and done.stdout == "", (config, done)
        assert done.stderr.startswith("inflight: config error: ") and said in done.stderr, done.stderr
        assert "Traceback" not in done.stderr


def test_run_points_the_command_at_a_proxy_of_its_own_and_passes_its_exit_code_through(tmp_path: Path) -> None:
    log = tmp_path / "proxy.log"
    done = inflight("run", "--log", str(log), "--", sys.executable, "-c", REPORT, "--flag", "value")
    assert done.returncode == 3, done.stderr
    said = json.loads(done.stdout)
    base = said["env"]["ANTHROPIC_BASE_URL"]
    assert base.startswith("http://127.0.0.1:") and said["healthy"] and said["argv"] == ["--flag", "value"]
    assert said["env"] == {"OPENAI_BASE_URL": f"{base}/v1", "ANTHROPIC_BASE_URL": base, "GOOGLE_GEMINI_BASE_URL": base}
    assert f"inflight run: proxy on {base}/v1 (log {log})" in done.stderr
    assert not healthy(int(base.rpartition(":")[2]))  # stopped, and waited for, before `run` exited


def test_run_uses_the_inflight_already_on_the_configs_port_and_leaves_it_running(tmp_path: Path) -> None:
    port = free_port()
    config = tmp_path / "serve.yaml"
    config.write_text(f"listen: {{port: {port}}}\nupstream: {{base_url: http://127.0.0.1:9/v1}}\n")
    with process([sys.executable, "-m", "inflight", "serve", "--config", str(config)], port):
        done = inflight("run", "--config", str(config), "--", sys.executable, "-c", REPORT)
        assert done.returncode == 3, done.stderr
        assert json.loads(done.stdout)["env"]["OPENAI_BASE_URL"] == f"http://127.0.0.1:{port}/v1"
        assert "using the inflight already on" in done.stderr
        assert healthy(port)


def test_run_on_a_given_port_starts_its_proxy_there(tmp_path: Path) -> None:
    port = free_port()
    log = tmp_path / "proxy.log"
    done = inflight("run", "--port", str(port), "--log", str(log), "--", sys.executable, "-c", REPORT)
    assert done.returncode == 3, done.stderr
    assert json.loads(done.stdout)["env"]["OPENAI_BASE_URL"] == f"http://127.0.0.1:{port}/v1"
    assert f"listening on http://127.0.0.1:{port}/v1" in log.read_text()
    assert not healthy(port)


def test_run_codex_gets_a_provider_pointed_at_the_proxy_on_its_command_line(tmp_path: Path) -> None:
    """A stand-in named `codex` that prints its arguments: the `-c` overrides come first, before `exec`."""
    codex = tmp_path / "codex"
    codex.write_text(f"#!{sys.executable}\nimport json, sys\nprint(json.dumps(sys.argv[1:]))\n")
    codex.chmod(0o755)
    log = str(tmp_path / "proxy.log")
    done = inflight("run", "--log", log, "--", str(codex), "exec", "say hi", env={"OPENAI_API_KEY": "sk-test"})
    assert done.returncode == 0, done.stderr
    argv = json.loads(done.stdout)
    assert argv[-2:] == ["exec", "say hi"] and argv[0] == "-c" and argv[1] == 'model_provider="inflight"'
    overrides = dict(value.split("=", 1) for value in argv[1:-2:2])
    assert overrides["model_providers.inflight.base_url"].startswith('"http://127.0.0.1:')
    assert overrides["model_providers.inflight.base_url"].endswith('/v1"')
    assert overrides["model_providers.inflight.wire_api"] == '"responses"'
    assert overrides["model_providers.inflight.env_key"] == '"OPENAI_API_KEY"'


def test_run_says_what_is_wrong_without_a_traceback(tmp_path: Path) -> None:
    nothing = inflight("run")
    assert nothing.returncode == 1 and "name the command to run" in nothing.stderr
    missing = inflight("run", "--", str(tmp_path / "no-such-agent"))
    assert missing.returncode == 127 and "no-such-agent" in missing.stderr
    bad = tmp_path / "bad.yaml"
    bad.write_text("listen: {port: many}\n")
    refused = inflight("run", "--config", str(bad), "--", sys.executable, "-c", "pass")  # before any proxy starts
    assert refused.returncode == 2 and "config error: listen.port" in refused.stderr
    assert all("Traceback" not in done.stderr for done in (nothing, missing, refused))
