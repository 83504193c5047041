"""The Gemini API through the proxy (`/v1beta/models/{model}:generateContent` and `:streamGenerateContent`):
passed through byte for byte when it fits, compacted with every signed turn verbatim when it does not, retried
once on Gemini's refusal; keys as `x-goog-api-key`; summaries through the Gemini API; the upstream's exact count
near a threshold; our own errors in Google's shape. (The real Gemini CLI is driven in `tests/agents/`.)"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import orjson
import pytest

from inflight.formats.agent_prompts import GEMINI_CLI
from inflight.formats.retrieve_tool import GeminiShape
from tests.conftest import ProxyFactory
from tests.http.test_archive import archived
from tests.support.gemini import FakeGemini, GeminiTaskAgent, part_signature
from tests.support.logs import log_lines
from tests.support.responses import TASK_MARKER
from tests.support.servers import serve
from tests.support.upstream import UpstreamApp

MODEL = "gemini-2.5-pro"
KEY = {"x-goog-api-key": "gemini-client-key"}
TOOLS = [
    {
        "functionDeclarations": [
            {
                "name": "run_shell_command",
                "description": "Run a shell command.",
                "parametersJsonSchema": {"type": "object", "properties": {"command": {"type": "string"}}},
            }
        ]
    }
]
SYSTEM = {"role": "user", "parts": [{"text": "You are an agent. Run commands with run_shell_command."}]}


def agent_contents(turns: int, *, lines: int = 60) -> list[dict[str, Any]]:
    """A Gemini CLI-like history: the task, then `turns` of a signed shell call and its response."""
    contents: list[dict[str, Any]] = [
        {"role": "user", "parts": [{"text": f"Do the {TASK_MARKER}: run the steps one by one."}]}
    ]
    for step in range(1, turns + 1):
        call: dict[str, Any] = {
            "functionCall": {"id": f"c{step}", "name": "run_shell_command", "args": {"command": f"step {step}"}}
        }
        call["thoughtSignature"] = part_signature(call, step)
        output = "\n".join(f"step {step} log line {i}: checked module_{step}_{i}.py" for i in range(lines))
        response: dict[str, Any] = {"functionResponse": {"id": f"c{step}", "name": "run_shell_command"}}
        response["functionResponse"]["response"] = {"output": f"{output}\nSTEP {step} DONE"}
        contents += [{"role": "model", "parts": [call]}, {"role": "user", "parts": [response]}]
    return contents


def body_of(contents: list[dict[str, Any]]) -> dict[str, Any]:
    config = {"maxOutputTokens": 2_000, "thinkingConfig": {"includeThoughts": True}}
    return {"contents": contents, "systemInstruction": SYSTEM, "tools": TOOLS, "generationConfig": config}


@contextmanager
def gemini_proxy(start_proxy: ProxyFactory, url: str, **overrides: Any) -> Iterator[str]:
    """A proxy whose Gemini API goes to the fake's origin (`url` less `/v1`: Google's paths start at `/v1beta`);
    yields the proxy's origin."""
    upstreams = {"gemini": {"base_url": url.removesuffix("/v1"), **overrides.pop("gemini_upstream", {})}}
    with start_proxy(url, upstreams=upstreams, **overrides) as proxy_url:
        yield proxy_url.removesuffix("/v1")


def generate(origin: str, body: dict[str, Any], *, stream: bool, headers: dict[str, str] = KEY) -> httpx.Response:
    method = "streamGenerateContent?alt=sse" if stream else "generateContent"
    return httpx.post(f"{origin}/v1beta/models/{MODEL}:{method}", json=body, headers=headers, timeout=60)


def test_a_request_that_fits_passes_through_byte_for_byte(
    upstream: tuple[UpstreamApp, str], start_proxy: ProxyFactory
) -> None:
    app, url = upstream
    app.gemini.agent = GeminiTaskAgent(steps=5)
    body = body_of(agent_contents(2))
    with gemini_proxy(start_proxy, url) as origin:
        answers = [generate(origin, body, stream=stream) for stream in (False, True)]
    whole, streamed = answers
    assert [a.headers["x-inflight-actions"] for a in answers] == ["none", "none"]
    sent = app.gemini_requests()
    assert [r.body for r in sent] == [orjson.dumps(body)] * 2  # the client's exact bytes went up
    assert [whole.content, streamed.content] == [bytes(r.sent) for r in sent]  # and the answers came back as sent
    assert sent[1].query == b"alt=sse" and streamed.content.startswith(b"data: {")
    assert "step 3" in orjson.dumps(whole.json()["candidates"][0]["content"]).decode()


def test_the_estimate_is_calibrated_from_usage_metadata(
    upstream: tuple[UpstreamApp, str], start_proxy: ProxyFactory, caplog: pytest.LogCaptureFixture
) -> None:
    """Gemini's tokenizer is not public: the o200k_base estimate is corrected by `promptTokenCount`, streamed or
    not (the fake counts each part's JSON, more than the estimate)."""
    app, url = upstream
    app.gemini.agent = GeminiTaskAgent(steps=40)
    with caplog.at_level(logging.INFO, logger="inflight"), gemini_proxy(start_proxy, url) as origin:
        for turns, stream in ((2, True), (3, False), (4, True)):
            generate(origin, body_of(agent_contents(turns)), stream=stream)
        lines = log_lines(caplog, f"POST /v1beta/models/{MODEL}:")
    ratios = [float(line.split(" calibration=")[1].split()[0]) for line in lines]
    assert ratios[0] == 1.0 and ratios[-1] > 1.01
    assert not [r for r in app.requests if r.method == "GET"]  # no model list asked of Gemini's upstream


@pytest.mark.parametrize("stream", [False, True])
def test_a_long_conversation_is_compacted_with_every_signed_turn_verbatim(
    upstream: tuple[UpstreamApp, str], start_proxy: ProxyFactory, stream: bool
) -> None:
    app, url = upstream
    app.gemini.agent = GeminiTaskAgent(steps=40)
    app.windows[MODEL] = 12_000
    contents = agent_contents(20)
    with gemini_proxy(start_proxy, url, models={MODEL: {"context_window": 12_000}}) as origin:
        answer = generate(origin, body_of(contents), stream=stream)
    assert answer.status_code == 200 and answer.headers["x-inflight-actions"] != "none"
    assert "step 21" in answer.text  # the agent went on from the latest turn
    sent = app.gemini_requests()[-1].json()
    assert app.gemini.rejected == [] and app.gemini.refused == 0  # every signature verified, every call answered
    models = [c for c in contents if c["role"] == "model"]
    assert all(c in models for c in sent["contents"] if c["role"] == "model")  # verbatim, or gone whole
    assert sent["systemInstruction"] == SYSTEM and sent["tools"] == [*TOOLS, GeminiShape.definition]
    assert sent["contents"][-2:] == contents[-2:]
    assert TASK_MARKER in orjson.dumps(sent["contents"][0]).decode()
    assert FakeGemini().count(sent) <= 12_000 - 2_000


def test_a_refusal_is_retried_once_with_the_window_it_names(
    upstream: tuple[UpstreamApp, str], start_proxy: ProxyFactory
) -> None:
    app, url = upstream
    app.gemini.agent = GeminiTaskAgent(steps=40)
    app.windows[MODEL] = 12_000  # the proxy is not told: it finds out from the refusal
    contents = agent_contents(12)
    with gemini_proxy(start_proxy, url) as origin:
        answer = generate(origin, body_of(contents), stream=True)
    assert answer.headers["x-inflight-retried"] == "1" and answer.status_code == 200
    assert answer.text.startswith("data: {") and "error" not in answer.text  # no trace of the refusal
    refused, retried = app.gemini_requests()
    assert app.gemini.refused == 1 and refused.json()["contents"] == contents
    assert len(retried.body) < len(refused.body) and app.gemini.rejected == []


def test_keys_come_as_x_goog_api_key_and_the_upstream_key_goes_as_google_takes_it(
    upstream: tuple[UpstreamApp, str], start_proxy: ProxyFactory
) -> None:
    app, url = upstream
    overrides = {"access": {"keys": ["proxy-client-key"]}, "upstream": {"api_key": "sk-up"}}
    overrides["gemini_upstream"] = {"api_key": "google-up-key"}
    hello = {"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}
    with gemini_proxy(start_proxy, url, **overrides) as origin:
        accepted = generate(origin, hello, stream=False, headers={"x-goog-api-key": "proxy-client-key"})
        refused = generate(origin, hello, stream=False, headers={"x-goog-api-key": "wrong"})
    assert accepted.status_code == 200
    (sent,) = app.gemini_requests()
    assert sent.headers["x-goog-api-key"] == "google-up-key" and "authorization" not in sent.headers
    assert refused.status_code == 401
    error = refused.json()["error"]
    assert (error["code"], error["status"]) == (401, "UNAUTHENTICATED") and "proxy-client-key" not in refused.text


def test_a_summary_is_asked_through_the_gemini_api(
    upstream: tuple[UpstreamApp, str], start_proxy: ProxyFactory
) -> None:
    app, url = upstream
    app.gemini.agent = GeminiTaskAgent(steps=40)
    app.windows[MODEL] = 12_000
    settings = {"summarize": {"background_at": None}}  # made on the turn, so the test can see it used
    with gemini_proxy(start_proxy, url, models={MODEL: {"context_window": 12_000}}, compaction=settings) as origin:
        answer = generate(origin, body_of(agent_contents(90, lines=10)), stream=False)
    assert answer.status_code == 200 and "summarize" in answer.headers["x-inflight-actions"]
    assert app.summaries and {r.path for r in app.summaries} == {f"/v1beta/models/{MODEL}:generateContent"}
    asked = app.summaries[0]
    assert asked.headers["x-goog-api-key"] == KEY["x-goog-api-key"] and "alt" not in asked.query.decode()
    sent = app.gemini_requests()[-1].json()["contents"]
    assert "Summary number" in orjson.dumps(sent[0]).decode()  # joined to the task's turn: roles alternate
    assert [c["role"] for c in sent[:2]] == ["user", "model"] and app.gemini.rejected == []


def test_near_a_threshold_the_upstreams_exact_count_decides_when_asked(
    upstream: tuple[UpstreamApp, str], start_proxy: ProxyFactory
) -> None:
    """`gemini.count_tokens: near`: the turn is counted by the upstream's `countTokens` (with the client's key)
    when the estimate is near a threshold; never with the setting off."""
    app, url = upstream
    app.gemini.agent = GeminiTaskAgent(steps=40)
    for count_tokens in ("near", "off"):
        settings = {"gemini": {"count_tokens": count_tokens, "count_tokens_band": 1.0}}
        with gemini_proxy(start_proxy, url, models={MODEL: {"context_window": 12_000}}, **settings) as origin:
            generate(origin, body_of(agent_contents(2)), stream=False)
    counts = [r for r in app.requests if r.path.endswith(":countTokens")]
    assert len(counts) == 1 and counts[0].path == f"/v1beta/models/{MODEL}:countTokens"
    assert counts[0].headers["x-goog-api-key"] == KEY["x-goog-api-key"]
    assert counts[0].json()["generateContentRequest"]["contents"] == agent_contents(2)


def test_our_own_errors_on_the_gemini_api_take_googles_shape(
    upstream: tuple[UpstreamApp, str], start_proxy: ProxyFactory
) -> None:
    _, url = upstream
    with gemini_proxy(start_proxy, url, limits={"max_body_bytes": 1024}) as origin:
        answer = generate(origin, body_of(agent_contents(3)), stream=True)
    assert answer.status_code == 413
    error = answer.json()["error"]
    assert set(error) == {"code", "message", "status"} and error["code"] == 413


COMPRESSION_SYSTEM = {
    "parts": [
        {
            "text": "You are a specialized system component responsible for distilling chat history into a "
            "structured XML <state_snapshot>.\n\n(the rest of Gemini CLI's prompt)"
        }
    ]
}


def test_gemini_clis_compression_and_its_verification_are_answered_from_one_summary_without_the_upstream(
    upstream: tuple[UpstreamApp, str], start_proxy: ProxyFactory
) -> None:
    """Its snapshot request, then the same with the snapshot it got and a request to verify it: both answered
    with inflight's summary as a `<state_snapshot>`, made once; nothing reaches the upstream's model."""
    app, url = upstream
    history = agent_contents(12, lines=10)
    (prompt, verify) = GEMINI_CLI[0].asks[0], GEMINI_CLI[0].verify
    asked = {
        "contents": [*history, {"role": "user", "parts": [{"text": prompt}]}],
        "systemInstruction": COMPRESSION_SYSTEM,
    }
    with gemini_proxy(start_proxy, url, models={MODEL: {"context_window": 20_000}}) as origin:
        first = generate(origin, asked, stream=False)
        snapshot = first.json()["candidates"][0]["content"]["parts"][0]["text"]
        contents = [*history, {"role": "model", "parts": [{"text": snapshot}]}]
        checked = {
            "contents": [*contents, {"role": "user", "parts": [{"text": verify}]}],
            "systemInstruction": COMPRESSION_SYSTEM,
        }
        second = generate(origin, checked, stream=False)
    assert [r.headers["x-inflight-actions"].split(",")[0] for r in (first, second)] == ["answered-compaction"] * 2
    assert app.gemini_requests() == [] and len(app.summaries) == 1
    assert snapshot.startswith("<state_snapshot>") and "Summary number 1" in snapshot and TASK_MARKER in snapshot
    assert second.json()["candidates"][0]["content"]["parts"][0]["text"] == snapshot
    assert first.json()["usageMetadata"]["candidatesTokenCount"] > 0


def test_a_key_in_the_query_goes_upstream_as_the_header_and_into_no_log_line(
    upstream: tuple[UpstreamApp, str], start_proxy: ProxyFactory, caplog: pytest.LogCaptureFixture
) -> None:
    app, url = upstream
    hello = {"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}
    with caplog.at_level(logging.DEBUG, logger="inflight"), gemini_proxy(start_proxy, url) as origin:
        answer = httpx.post(f"{origin}/v1beta/models/{MODEL}:generateContent?key=query-secret", json=hello)
        [line] = log_lines(caplog, f"POST /v1beta/models/{MODEL}:generateContent")
    (sent,) = app.gemini_requests()
    assert answer.status_code == 200 and sent.query == b"" and sent.headers["x-goog-api-key"] == "query-secret"
    assert "query-secret" not in caplog.text and f"model={MODEL}" in line


@pytest.mark.parametrize("stream", [False, True])
def test_a_key_in_the_query_is_checked_and_replaced_by_the_held_key_like_the_header(
    upstream: tuple[UpstreamApp, str], start_proxy: ProxyFactory, caplog: pytest.LogCaptureFixture, stream: bool
) -> None:
    app, url = upstream
    overrides: dict[str, Any] = {"access": {"keys": ["proxy-client-key"], "admin_keys": ["admin-key"]}}
    overrides["upstream"] = {"api_key": "sk-up"}
    overrides |= {"gemini_upstream": {"api_key": "google-up-key"}, "archive": {"enabled": True}}
    hello = {"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}
    method = "streamGenerateContent?alt=sse&" if stream else "generateContent?"
    with caplog.at_level(logging.DEBUG, logger="inflight"), gemini_proxy(start_proxy, url, **overrides) as origin:
        accepted = httpx.post(f"{origin}/v1beta/models/{MODEL}:{method}key=proxy-client-key", json=hello)
        refused = httpx.post(f"{origin}/v1beta/models/{MODEL}:{method}key=wrong-key", json=hello)
        counted = httpx.post(f"{origin}/v1beta/models/{MODEL}:countTokens?key=proxy-client-key", json=hello)
        listed = archived(origin, "/inflight/conversations", until=lambda j: j["conversations"], key="admin-key")
        (conversation,) = listed["conversations"]
        turns = archived(origin, f"/inflight/conversations/{conversation['id']}", key="admin-key")
    assert accepted.status_code == 200 and counted.status_code == 200
    sent, count = app.gemini_requests()[0], app.requests[-1]
    for forwarded in (sent, count):  # the held key as Google takes it; the client's key nowhere
        assert forwarded.headers["x-goog-api-key"] == "google-up-key" and b"key=" not in forwarded.query
    assert sent.query == (b"alt=sse" if stream else b"")
    assert refused.status_code == 401 and refused.json()["error"]["status"] == "UNAUTHENTICATED"
    assert len(app.gemini_requests()) == 1  # the refused one went nowhere
    assert "proxy-client-key" not in caplog.text and "wrong-key" not in caplog.text
    assert b"proxy-client-key" not in orjson.dumps(turns) and turns["turns"]


def test_with_client_keys_and_no_gemini_upstream_gemini_clients_are_told_what_to_set() -> None:
    """With the default upstream OpenAI's and `access.keys`, no client key can go to Google: the Gemini API
    answers 502 in Google's shape, naming `upstreams.gemini`, and nothing is forwarded."""
    from inflight.app import create_app
    from inflight.config import load_settings
    from inflight.http.server import startup_line

    overrides = {"access": {"keys": ["proxy-key"]}, "upstream": {"api_key": "sk-openai", "connect_timeout_s": 0.5}}
    settings = load_settings(None, overrides=overrides)
    hello = {"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}
    with serve(create_app(settings)) as origin:
        answer = generate(origin, hello, stream=True, headers={"x-goog-api-key": "proxy-key"})
    assert answer.status_code == 502 and "upstreams.gemini" in answer.json()["error"]["message"]
    assert answer.json()["error"]["status"] == "UNAVAILABLE"
    assert "gemini -> none (set upstreams.gemini)" in startup_line(settings, workers=1)
