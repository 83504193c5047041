"""End to end: a real llama.cpp server, the official client, and an agent conversation 3-5x its window.

Run by `.ci/run` after the default suite (`pytest -m e2e`). Needs llama-cpp-python[server] and the
SmolLM2 GGUF file (see `.ci/run`); skipped when they are missing, unless INFLIGHT_E2E_REQUIRED=1.
"""

from __future__ import annotations

import importlib.util
import logging
import os
from collections.abc import Iterator
from typing import Any

import httpx
import orjson
import pytest

from inflight.app import create_app
from inflight.compaction.conversation import problems
from inflight.config import load_settings
from inflight.tokens import TokenCounter
from tests.e2e.agent import N_CTX, ModelServer, Turn, llama_server, model_path, run_agent, tool_outputs
from tests.support.servers import free_port, read_body, serve

pytestmark = pytest.mark.e2e


def _available() -> bool:
    # find_spec, not import: importing llama_cpp here would load the native library into the test process.
    return importlib.util.find_spec("llama_cpp") is not None and model_path().exists()


if not _available():
    if os.environ.get("INFLIGHT_E2E_REQUIRED") == "1":
        raise RuntimeError(f"e2e needs llama-cpp-python[server] and {model_path()}")
    pytest.skip("llama-cpp-python[server] or the SmolLM2 model is not installed", allow_module_level=True)


class Recorder:
    """A pass-through between inflight and the server that keeps every request body the server received."""

    def __init__(self, target: str) -> None:
        self.target = target
        self.bodies: list[dict[str, Any]] = []

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        body = await read_body(receive)
        if scope["path"].endswith("/chat/completions"):
            self.bodies.append(orjson.loads(body))
        headers = {k.decode(): v.decode() for k, v in scope["headers"] if k.lower() not in (b"host", b"content-length")}
        url = self.target + scope["path"].removeprefix("/v1")
        async with httpx.AsyncClient(timeout=600) as client:
            response = await client.request(scope["method"], url, content=body or None, headers=headers)
        out = [
            (k.encode(), v.encode())
            for k, v in response.headers.items()
            if k.lower() not in ("content-length", "transfer-encoding", "content-encoding")
        ]
        out.append((b"content-length", str(len(response.content)).encode()))
        await send({"type": "http.response.start", "status": response.status_code, "headers": out})
        await send({"type": "http.response.body", "body": response.content})

    def chats(self) -> list[dict[str, Any]]:
        return [b for b in self.bodies if not is_summary(b)]

    def summaries(self) -> list[dict[str, Any]]:
        return [b for b in self.bodies if is_summary(b)]


def is_summary(body: dict[str, Any]) -> bool:
    """The summary prompt opens the system message, or (a summary asked in place) the last message."""
    ends = [body["messages"][0].get("content"), body["messages"][-1].get("content")]
    return any(isinstance(text, str) and text.startswith("You write the handoff note") for text in ends)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ModelServer]:
    with llama_server(free_port(), tmp_path_factory.mktemp("llama") / "server.log") as running:
        yield running


@pytest.fixture(scope="module")
def outputs() -> list[tuple[str, str, str]]:
    return tool_outputs()


def conversation_tokens(outputs: list[tuple[str, str, str]]) -> int:
    text = "".join(output for _, _, output in outputs)
    return len(TokenCounter().encoding("o200k_base").encode_ordinary(text))


def report(label: str, turns: list[Turn], recorder: Recorder | None = None) -> None:
    actions = [t.headers.get("x-inflight-actions", "-") for t in turns]
    hits = sum(1 for a in actions if "summary-cached" in a and "summarize" not in a)
    sent = sum(int(t.headers.get("x-inflight-tokens-after", 0)) for t in turns)
    without = sum(int(t.headers.get("x-inflight-tokens-before", 0)) for t in turns)
    summaries = len(recorder.summaries()) if recorder else 0
    print(
        f"\n[{label}] turns={len(turns)} ok={sum(t.ok for t in turns)} summarizer_calls={summaries} "
        f"record_hits={hits} tokens_sent={sent} tokens_without={without} actions={actions}"
    )


def test_direct_the_agent_dies_of_context_length(server: ModelServer, outputs: list[tuple[str, str, str]]) -> None:
    assert conversation_tokens(outputs) > 3 * N_CTX  # the conversation grows well past the window
    turns = run_agent(server.url, outputs, server=server)
    report("direct", turns)
    assert not turns[-1].ok
    assert turns[-1].error in ("400 context_length_exceeded", "empty stream")
    assert 1 <= len(turns) - 1 < len(outputs)


def through_inflight(
    server: ModelServer, outputs: list[tuple[str, str, str]], models: dict[str, Any], caplog: pytest.LogCaptureFixture
) -> tuple[list[Turn], Recorder]:
    recorder = Recorder(server.url)
    with serve(recorder) as recorder_url:
        settings = load_settings(None, overrides={"upstream": {"base_url": recorder_url + "/v1"}, "models": models})
        with caplog.at_level(logging.INFO, logger="inflight"), serve(create_app(settings)) as proxy_url:
            turns = run_agent(proxy_url + "/v1", outputs, server=server, stop_on_failure=False)
    return turns, recorder


def assert_served_and_valid(turns: list[Turn], recorder: Recorder, outputs: list[tuple[str, str, str]]) -> None:
    assert [t.error for t in turns] == [""] * len(outputs)
    for body in recorder.chats():
        assert problems(body["messages"]) == []
        assert body["messages"][0]["role"] == "system"
    assert all(body["tools"] for body in recorder.chats())


def test_through_inflight_every_turn_succeeds(
    server: ModelServer, outputs: list[tuple[str, str, str]], caplog: pytest.LogCaptureFixture
) -> None:
    turns, recorder = through_inflight(server, outputs, {"smollm2": {"context_window": N_CTX}}, caplog)
    report("inflight, window configured", turns, recorder)
    assert_served_and_valid(turns, recorder, outputs)
    actions = [t.headers["x-inflight-actions"] for t in turns]
    assert any("summarize" in a or "fallback" in a for a in actions)
    assert any("summary-cached" in a for a in actions)  # later turns reuse the record
    assert len(recorder.summaries()) < len(turns)  # not one summary per turn


def test_without_a_configured_window_it_learns_from_the_first_refusal(
    server: ModelServer, outputs: list[tuple[str, str, str]], caplog: pytest.LogCaptureFixture
) -> None:
    turns, recorder = through_inflight(server, outputs, {}, caplog)
    report("inflight, window learned", turns, recorder)
    assert_served_and_valid(turns, recorder, outputs)
    retried = [t for t in turns if t.headers.get("x-inflight-retried") == "1"]
    assert retried and "retry" in retried[0].headers["x-inflight-actions"]
    assert "learned window for smollm2: 2048 tokens" in caplog.text
    later = turns[turns.index(retried[0]) + 1 :]
    assert all(t.headers["x-inflight-context-window"] == str(N_CTX) for t in later)
