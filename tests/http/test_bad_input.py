"""Input that used to crash or stall the proxy: it is served, forwarded, or refused in OpenAI's shape."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import httpx
import orjson

from tests.support.upstream import UpstreamApp


def test_a_million_spaces_is_counted_and_served(upstream: tuple[UpstreamApp, str], proxy: str) -> None:
    body = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": " " * 1_000_000 + "?"}]}
    response = httpx.post(f"{proxy}/chat/completions", json=body, headers={"x-inflight-compaction": "off"}, timeout=30)
    assert response.status_code == 200
    assert int(response.headers["x-inflight-prompt-tokens"]) > 1000
    assert "x-inflight-count" not in response.headers  # counted by the tokenizer, not estimated


def test_the_count_command_counts_it_too(tmp_path: Path) -> None:
    request = tmp_path / "spaces.json"
    request.write_bytes(orjson.dumps({"model": "gpt-4o", "messages": [{"role": "user", "content": " " * 1_000_000}]}))
    result = subprocess.run(
        [sys.executable, "-m", "inflight", "count", str(request), "--json"], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert orjson.loads(result.stdout)["prompt_tokens"] > 1000


def test_json_that_only_the_upstream_may_accept_is_forwarded_untouched(
    upstream: tuple[UpstreamApp, str], proxy: str
) -> None:
    app, _ = upstream
    body = b'{"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "half a pair: \\ud800"}]}'
    response = httpx.post(f"{proxy}/chat/completions", content=body, headers={"content-type": "application/json"})
    assert app.requests[-1].body == body
    assert response.content == bytes(app.requests[-1].sent)


def test_the_proxys_own_404_and_405_are_openai_shaped(proxy: str) -> None:
    base = proxy.removesuffix("/v1")
    missing = httpx.get(f"{base}/v2/models")
    wrong = httpx.post(f"{base}/healthz")
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "not_found"
    assert wrong.status_code == 405 and wrong.json()["error"]["code"] == "method_not_allowed"
    assert "GET" in wrong.headers["allow"]


def test_options_still_reaches_the_upstream_for_cors(upstream: tuple[UpstreamApp, str], proxy: str) -> None:
    app, _ = upstream
    httpx.options(
        f"{proxy}/chat/completions", headers={"origin": "https://app.example", "access-control-request-method": "POST"}
    )
    assert app.requests[-1].method == "OPTIONS" and app.requests[-1].path == "/v1/chat/completions"


def test_the_command_line_says_what_it_is_and_what_its_flags_do() -> None:
    def run(*args: str) -> str:
        command = [sys.executable, "-m", "inflight", *args]
        return subprocess.run(command, capture_output=True, text=True, timeout=60, check=True).stdout

    assert run("--version").startswith("inflight ")
    helptext = " ".join(run("serve", "--help").split())
    for phrase in ("address to listen on", "port to listen on", "upstream base URL", "log verbosity"):
        assert phrase in helptext
