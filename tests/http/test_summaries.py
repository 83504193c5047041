"""What the summarizer is asked (the task, the ledger, a handoff prompt) and which replies are kept."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from tests.compaction.test_compactor import agent_conversation
from tests.conftest import ProxyFactory
from tests.support.upstream import UpstreamApp

WINDOW = {"models": {"gpt-4o": {"context_window": 4000}}}
GOOD = (
    '## Task\n"Fix the failing test in src/app.py."\n## State of the work\nFound the cause.\n## Files and changes\n'
    "- src/app.py: parser fixed.\n## Commands, tests and results\n- `pytest -q`: 3 passed.\n"
    "## Errors and approaches ruled out\n- none.\n## Next step\nRun the full suite."
)


def task_conversation() -> list[dict[str, Any]]:
    messages = agent_conversation(120, output_lines=5)
    # A demonstration first, then the issue: both are the head, and the issue is what the agent solves.
    return [messages[0], {"role": "user", "content": "Demonstration: how to solve an issue. " * 20}, *messages[1:]]


def post(proxy_url: str, messages: list[dict[str, Any]]) -> httpx.Response:
    return httpx.post(f"{proxy_url}/chat/completions", json={"model": "gpt-4o", "messages": messages}, timeout=30)


@pytest.mark.parametrize(
    ("reply", "reason"),
    [
        (("OK", "stop"), "length"),
        ((GOOD[:200], "length"), "truncated"),
        (("I have summarized the conversation above carefully and it covers everything. " * 3, "stop"), "sections"),
        (
            ("\n".join(f"## {h}\n" for h in ["Task"]) + "0:0 output line with some words in it\n" * 5, "stop"),
            "sections",
        ),
    ],
    ids=["ok", "cut-off", "no-sections", "copy-of-input-without-sections"],
)
def test_a_bad_summary_is_refused_said_and_never_cached(
    upstream: tuple[UpstreamApp, str], start_proxy: ProxyFactory, reply: tuple[str, str], reason: str
) -> None:
    app, url = upstream
    app.summarizer_reply = reply
    messages = task_conversation()
    with start_proxy(url, **WINDOW) as proxy_url:
        first = post(proxy_url, messages)
        app.summarizer_reply = None  # the summarizer recovers: the next turn must not reuse the bad reply
        assert post(proxy_url, [*messages, {"role": "user", "content": "Go on."}]).status_code == 200
    actions = first.headers["x-inflight-actions"].split(",")
    assert f"summary-rejected-{reason}" in actions and "fallback" in actions
    forwarded = [orjson.loads(r.body)["messages"] for r in app.chat_requests()]
    assert reply[0] not in str(forwarded[0]) and "no summary could be made" in str(forwarded[0])
    assert reply[0] not in str(forwarded[1])


def test_a_copy_of_the_input_is_refused() -> None:
    from inflight.compaction.summary_job import load_prompt
    from inflight.compaction.validation import headings, rejection

    transcript = "\n".join(f"line {i}: some tool output that is long enough" for i in range(40))
    copy = "\n".join(
        f"## {h}\n" + f"line {i}: some tool output that is long enough" for i, h in enumerate(headings(load_prompt()))
    )
    assert rejection(copy, finish_reason="stop", transcript=transcript, sections=headings(load_prompt())) == "copy"
    assert rejection(GOOD, finish_reason="stop", transcript=transcript, sections=headings(load_prompt())) is None


def test_the_summarizer_sees_the_task_and_a_handoff_prompt(
    upstream: tuple[UpstreamApp, str], start_proxy: ProxyFactory
) -> None:
    app, url = upstream
    messages = task_conversation()
    with start_proxy(url, **WINDOW) as proxy_url:
        response = post(proxy_url, messages)
    assert response.status_code == 200 and "summarize" in response.headers["x-inflight-actions"]
    system, user = orjson.loads(app.summaries[0].body)["messages"]
    assert "Another instance of the agent continues" in system["content"]
    assert "An example of a good note" in system["content"] and "Never invent tool" in system["content"]
    assert "<task>" in user["content"] and "Fix the failing test in src/app.py." in user["content"]
    sent = orjson.loads(app.chat_requests()[-1].body)["messages"]
    assert sent[:3] == messages[:3]  # the system prompt, the demonstration and the task, all kept


def test_the_prompt_can_be_replaced_from_the_config(
    upstream: tuple[UpstreamApp, str], start_proxy: ProxyFactory, tmp_path: Path
) -> None:
    app, url = upstream
    from inflight.compaction.summary_job import load_prompt

    prompt = tmp_path / "prompt.md"
    prompt.write_text(load_prompt().replace("You write the handoff note", "You write the handoff note (ours)"))
    overrides = {**WINDOW, "compaction": {"summarize": {"prompt_file": str(prompt)}}}
    with start_proxy(url, **overrides) as proxy_url:
        assert post(proxy_url, task_conversation()).status_code == 200
    assert "(ours)" in orjson.loads(app.summaries[0].body)["messages"][0]["content"]


def test_a_summarizer_elsewhere_is_sized_by_its_own_window(
    upstream: tuple[UpstreamApp, str], start_proxy: ProxyFactory
) -> None:
    from tests.support.servers import serve

    _app, url = upstream
    summarizer = UpstreamApp()
    summarizer.models_body = {"object": "list", "data": [{"id": "small-sum", "object": "model", "max_model_len": 3000}]}
    with serve(summarizer) as summarizer_url:
        overrides = {
            **WINDOW,
            "models": {"gpt-4o": {"context_window": 16_000}},
            "compaction": {"summarize": {"base_url": summarizer_url + "/v1", "model": "small-sum"}},
        }
        with start_proxy(url, **overrides) as proxy_url:
            messages = agent_conversation(400, output_lines=5)
            response = post(proxy_url, messages)
    assert response.status_code == 200 and "summarize" in response.headers["x-inflight-actions"]
    from inflight.tokens import TokenCounter

    counter = TokenCounter()
    assert len(summarizer.summaries) > 1  # 3,000 tokens cannot take the whole middle at once: it was chunked
    for request in summarizer.summaries:
        body = orjson.loads(request.body)
        assert counter.count_request(body, "o200k_base").total + body["max_tokens"] <= 3000


def test_a_summarizer_too_small_for_the_job_is_not_asked(
    upstream: tuple[UpstreamApp, str], start_proxy: ProxyFactory
) -> None:
    app, url = upstream
    overrides = {
        "models": {"gpt-4o": {"context_window": 16_000}, "tiny-sum": {"context_window": 1_000}},
        "compaction": {"summarize": {"model": "tiny-sum"}},
    }
    with start_proxy(url, **overrides) as proxy_url:
        response = post(proxy_url, agent_conversation(400, output_lines=5))
    assert response.status_code == 200 and "fallback" in response.headers["x-inflight-actions"]
    assert app.summaries == []  # a request it would refuse is never sent: the ledger stands in at once


def test_a_summarizer_elsewhere_gets_the_credentials_in_its_url(
    upstream: tuple[UpstreamApp, str], start_proxy: ProxyFactory
) -> None:
    """`user:password` in `summarize.base_url` is sent as Basic auth, to its `/models` and its summaries
    alike (as httpx did when it sent these calls), never as part of the URL."""
    import base64

    from tests.support.servers import serve

    _app, url = upstream
    summarizer = UpstreamApp()
    summarizer.models_body = {"object": "list", "data": [{"id": "sum", "object": "model", "max_model_len": 64000}]}
    with serve(summarizer) as summarizer_url:
        with_credentials = summarizer_url.replace("http://", "http://sum%40user:s3cret@") + "/v1"
        overrides = {
            **WINDOW,
            "compaction": {"summarize": {"base_url": with_credentials, "model": "sum", "api_key": "sk-not-this"}},
        }
        with start_proxy(url, **overrides) as proxy_url:
            response = post(proxy_url, task_conversation())
    assert response.status_code == 200 and "summarize" in response.headers["x-inflight-actions"]
    expected = "Basic " + base64.b64encode(b"sum@user:s3cret").decode()
    asked = [r for r in summarizer.requests if r.path in ("/v1/models", "/v1/chat/completions")]
    assert {r.path for r in asked} == {"/v1/models", "/v1/chat/completions"}
    assert all(r.headers.get("authorization") == expected for r in asked)
    assert all("s3cret" not in r.raw_path.decode() and "s3cret" not in r.headers["host"] for r in asked)


def test_a_summarizer_elsewhere_never_gets_a_clients_key(
    upstream: tuple[UpstreamApp, str], start_proxy: ProxyFactory
) -> None:
    """With `summarize.base_url` and no key for it, the summaries go without credentials: a Claude client's
    `x-api-key` and an OpenAI client's bearer token go only to the upstream of their requests."""
    from tests.http.test_messages import MODEL, agent_messages
    from tests.support.servers import serve

    app, url = upstream
    summarizer = UpstreamApp()
    with serve(summarizer) as summarizer_url:
        overrides = {
            "models": {
                "gpt-4o": {"context_window": 4000},
                MODEL: {"context_window": 12_000},
                "sum": {"context_window": 64_000},
            },
            "compaction": {"summarize": {"base_url": summarizer_url + "/v1", "model": "sum", "background_at": None}},
        }
        with start_proxy(url, **overrides) as proxy_url:
            claude = httpx.post(
                f"{proxy_url}/messages",
                json={"model": MODEL, "max_tokens": 4096, "messages": agent_messages(90, lines=10)},
                headers={"x-api-key": "sk-ant-client-secret", "anthropic-version": "2023-06-01"},
                timeout=30,
            )
            openai = httpx.post(
                f"{proxy_url}/chat/completions",
                json={"model": "gpt-4o", "messages": task_conversation()},
                headers={"authorization": "Bearer sk-openai-client-secret"},
                timeout=30,
            )
    assert claude.status_code == 200 and "summarize" in claude.headers["x-inflight-actions"]
    assert openai.status_code == 200 and "summarize" in openai.headers["x-inflight-actions"]
    assert summarizer.summaries and summarizer.requests
    for request in summarizer.requests:
        assert "x-api-key" not in request.headers and "authorization" not in request.headers
        assert b"client-secret" not in b"".join(value for _, value in request.raw_headers)
    assert app.messages_requests()[-1].headers["x-api-key"] == "sk-ant-client-secret"  # its own upstream's
