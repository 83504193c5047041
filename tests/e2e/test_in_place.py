"""End to end: a background summary asked in place hits llama.cpp's prompt cache.

When the summarizer is the upstream's own model, the summary request is the conversation as last
sent plus one instruction, so the server finds the whole conversation in its KV cache and only
reads the instruction. llama-cpp-python reports that in its log (`N prefix-match hit`); this
test reads it for the summary request and prints it.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from pathlib import Path
from typing import Any

import pytest

from inflight.app import create_app
from inflight.config import load_settings
from tests.e2e.agent import N_CTX, llama_server, run_agent, tool_outputs
from tests.e2e.test_llamacpp import Recorder, _available
from tests.support.servers import free_port, serve

pytestmark = pytest.mark.e2e

if not _available():
    pytest.skip("llama-cpp-python[server] or the SmolLM2 model is not installed", allow_module_level=True)

PREFIX_HIT = re.compile(rb"Llama\.generate: (\d+) prefix-match hit, remaining (\d+) prompt tokens")


class LoggedRecorder(Recorder):
    """One request at a time, each with the server's log lines written while it was served."""

    def __init__(self, target: str, log: Path) -> None:
        super().__init__(target)
        self.log = log
        self.lock = asyncio.Lock()
        self.logs: list[bytes] = []

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        async with self.lock:
            before = self.log.stat().st_size
            count = len(self.bodies)
            await super().__call__(scope, receive, send)
            if len(self.bodies) > count:
                self.logs.append(self.log.read_bytes()[before:])


def test_a_summary_asked_in_place_is_read_from_the_servers_cache(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    log = tmp_path / "server.log"
    # A summary job starts early (15% of the budget) and asks for a short note, so that the conversation
    # and the instruction fit the 2,048-token window together: the condition for asking in place. Three outputs
    # are all the agent's recent work by default (the newest five are never summarized): here only the newest is.
    compaction = {
        "summarize": {"background_at": 0.15, "max_summary_tokens": 64, "keep_recent_tokens": 0},
        "mask": {"keep_tool_results": 1, "keep_tool_results_min": 1},
    }
    with llama_server(free_port(), log) as server:
        recorder = LoggedRecorder(server.url, log)
        with serve(recorder) as recorder_url:
            overrides = {
                "upstream": {"base_url": recorder_url + "/v1"},
                "models": {"smollm2": {"context_window": N_CTX}},
                "compaction": compaction,
            }
            settings = load_settings(None, overrides=overrides)
            with caplog.at_level(logging.INFO, logger="inflight"), serve(create_app(settings)) as proxy_url:
                outputs = [(t, p, out[:1000]) for t, p, out in tool_outputs()[:3]]
                turns = run_agent(proxy_url + "/v1", outputs, server=server)
                deadline = time.monotonic() + 120
                while not answered_in_place(recorder) and time.monotonic() < deadline:
                    time.sleep(0.2)
    assert all(turn.ok for turn in turns)
    index = next(i for i, body in enumerate(recorder.bodies) if is_in_place(body))
    summary, previous = recorder.bodies[index], recorder.bodies[index - 1]
    assert summary["messages"][:-1] == previous["messages"]  # the conversation exactly as last sent
    assert summary["tools"] == previous["tools"] and summary["tool_choice"] == "none"
    hits = PREFIX_HIT.findall(recorder.logs[index])
    cached, fresh = (int(hits[0][0]), int(hits[0][1])) if hits else (0, 0)
    print(f"\n[in-place summary] llama.cpp read {cached} prompt tokens from its cache and evaluated {fresh}")
    assert cached > 200  # the conversation (system prompt, task, one file) came from the cache


def answered_in_place(recorder: LoggedRecorder) -> bool:
    """An in-place summary request went to the server, and its answer (and log lines) came back."""
    return len(recorder.logs) == len(recorder.bodies) and any(is_in_place(body) for body in recorder.bodies)


def is_in_place(body: dict[str, Any]) -> bool:
    last = body["messages"][-1].get("content")
    return isinstance(last, str) and last.startswith("You write the handoff note")
