"""`log.format: json`: every line of `inflight serve` one JSON object (`time`, `level`, `logger`, `message`), a
request line's fields as keys of their own; `text` (the default) stays the line it was."""

from __future__ import annotations

import logging
import subprocess
import sys
from pathlib import Path

import httpx
import orjson
import pytest

from inflight.config import load_settings
from inflight.http.exchange import Exchange, LineFields
from inflight.http.server import LOG_FORMAT, JsonFormatter, LineFormatter, log_formatter
from tests.support.processes import wait_for_port
from tests.support.servers import free_port
from tests.support.upstream import UpstreamApp
from tests.support.waiting import wait_until


def request_record(caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> logging.LogRecord:
    monkeypatch.setattr(LineFields, "wanted", True)  # as `log.format: json` sets it
    caplog.set_level(logging.INFO, logger="inflight")
    exchange = Exchange("POST", "/v1/chat/completions")
    exchange.status = 200
    exchange.note_all({"model": "gpt 4o\n", "tokens": "3/100", "window": 128000, "retried": True})
    exchange.finish()
    [record] = [r for r in caplog.records if r.getMessage().startswith("POST /v1/chat/completions 200")]
    return record


def test_a_request_line_as_json_has_its_fields_as_keys(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    record = request_record(caplog, monkeypatch)
    entry = orjson.loads(JsonFormatter().format(record))
    assert entry["level"] == "INFO" and entry["logger"] == "inflight"
    assert entry["message"] == record.getMessage()
    assert entry["time"].endswith("Z") and entry["time"][10] == "T"
    assert (entry["method"], entry["path"], entry["status"]) == ("POST", "/v1/chat/completions", 200)
    assert entry["model"] == "gpt 4o\n" and entry["window"] == 128000 and entry["retried"] is True
    assert entry["proxy_ms"] is None and entry["upstream_ms"] is None and isinstance(entry["total_ms"], float)
    assert "queue_ms" not in entry  # as on the text line: only when it waited for a lane


def test_the_text_line_is_as_it_was(caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    record = request_record(caplog, monkeypatch)
    line = LineFormatter(LOG_FORMAT).format(record)
    assert " INFO inflight: POST /v1/chat/completions 200 model=gpt\\x204o\\n tokens=3/100 window=128000" in line
    assert "\n" not in line and "{" not in line
    assert isinstance(log_formatter(load_settings(None, overrides={"log": {"format": "json"}})), JsonFormatter)
    assert LineFields.wanted
    assert isinstance(log_formatter(load_settings(None)), LineFormatter)
    assert not LineFields.wanted  # a text log builds no fields for a request's line


def test_a_traceback_stays_on_its_line() -> None:
    try:
        raise ValueError("boom")
    except ValueError:
        record = logging.LogRecord("inflight", logging.ERROR, __file__, 1, "failed %s", ("x",), sys.exc_info())
    line = JsonFormatter().format(record)
    assert "\n" not in line
    entry = orjson.loads(line)
    assert entry["message"] == "failed x" and "ValueError: boom" in entry["exception"]


def test_serve_writes_every_line_as_json(tmp_path: Path, upstream: tuple[UpstreamApp, str]) -> None:
    port = free_port()
    config = tmp_path / "config.yaml"
    config.write_text(f"listen: {{port: {port}}}\nupstream: {{base_url: '{upstream[1]}'}}\nlog: {{format: json}}\n")
    stderr = tmp_path / "stderr.log"
    with open(stderr, "wb") as sink:
        proc = subprocess.Popen(
            [sys.executable, "-m", "inflight", "serve", "--config", str(config)], stdout=sink, stderr=sink
        )
        try:
            wait_for_port(port)
            base = f"http://127.0.0.1:{port}"
            assert httpx.get(f"{base}/nowhere", timeout=10).status_code == 404
            chat = {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}
            assert httpx.post(f"{base}/v1/chat/completions", json=chat, timeout=30).status_code == 200
            wait_until(lambda: b"POST /v1/chat/completions 200" in stderr.read_bytes())
        finally:
            proc.terminate()
            proc.wait(timeout=30)
    lines = stderr.read_bytes().decode().splitlines()
    entries = [orjson.loads(line) for line in lines]  # every line, uvicorn's own too
    assert all({"time", "level", "logger", "message"} <= entry.keys() for entry in entries)
    assert any(entry["logger"].startswith("uvicorn") for entry in entries)
    assert entries[0]["message"].startswith("inflight ") and "listening on" in entries[0]["message"]
    [missing] = [e for e in entries if e.get("path") == "/nowhere"]
    assert missing["status"] == 404 and missing["error"] == "not_found" and missing["method"] == "GET"
    [chat_line] = [e for e in entries if e.get("path") == "/v1/chat/completions"]
    assert chat_line["status"] == 200 and chat_line["model"] == "gpt-4o"
    assert isinstance(chat_line["upstream_ms"], float)
