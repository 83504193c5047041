"""The agents' own compaction requests answered at once from inflight's summary, through the official clients.

A conversation grows through the proxy until its summary is made ahead; then Claude Code's compaction
request (its prompt after the history) is answered from it, streamed or not, without reaching the
upstream. With no summary ready the summarizer is asked once, with the user's `/compact` instructions.
Look-alikes go upstream byte for byte, and shadow mode only says what it would have answered.
"""

from __future__ import annotations

import logging
from typing import Any, cast

import httpx
import openai
import orjson
import pytest

from tests.conftest import ProxyFactory
from tests.formats.test_agent_compaction import CLAUDE_PROMPT, CODEX_PROMPT, with_instructions
from tests.http.test_archive import archived
from tests.http.test_messages import SYSTEM, TOOLS, agent_messages, as_params, client_for
from tests.http.test_responses import TOOLS as RESPONSES_TOOLS
from tests.http.test_responses import agent_items
from tests.support.logs import log_lines
from tests.support.messages import MessagesTaskAgent
from tests.support.responses import TaskAgent
from tests.support.upstream import UpstreamApp
from tests.support.waiting import wait_until

MODEL = "claude-opus-5-5"
CODEX_MODEL = "gpt-5.5"
WINDOW = 20_000
SESSION = {"x-claude-code-session-id": "5e55-10n"}


def jobs(proxy_url: str) -> dict[str, int]:
    stats = httpx.get(proxy_url.removesuffix("/v1") + "/inflight/stats").json()
    return stats["summary_jobs"]  # type: ignore[no-any-return]


def asking(messages: list[dict[str, Any]], prompt: str = CLAUDE_PROMPT) -> list[dict[str, Any]]:
    """Claude Code's compaction request: its prompt joined to the last user turn, after its tool results."""
    last = messages[-1]
    return [*messages[:-1], {**last, "content": [*last["content"], {"type": "text", "text": prompt}]}]


def grown_until_a_summary_is_made_ahead(proxy_url: str) -> list[dict[str, Any]]:
    """Claude Code's turns, one more each time, until a summary was made ahead for the conversation."""
    with client_for(proxy_url) as client:
        for turns in range(1, 200):
            messages = agent_messages(turns, lines=10)
            client.messages.create(
                model=MODEL,
                max_tokens=4096,
                system=cast(Any, SYSTEM),
                tools=TOOLS,
                messages=as_params(messages),
                extra_headers=SESSION,
            )
            if jobs(proxy_url)["started"]:
                wait_until(lambda: jobs(proxy_url)["landed"] == 1)
                return messages
    raise AssertionError("no summary was made ahead")


@pytest.mark.parametrize("stream", [False, True])
def test_claude_codes_compaction_is_answered_from_the_summary_made_ahead_without_the_upstream(
    upstream: tuple[UpstreamApp, str], start_proxy: ProxyFactory, stream: bool, caplog: pytest.LogCaptureFixture
) -> None:
    app, url = upstream
    app.messages.agent = MessagesTaskAgent(steps=200)
    with (
        caplog.at_level(logging.INFO, logger="inflight"),
        start_proxy(url, models={MODEL: {"context_window": WINDOW}}) as proxy_url,
    ):
        messages = grown_until_a_summary_is_made_ahead(proxy_url)
        forwarded = len(app.messages_requests())
        with client_for(proxy_url) as client:
            kwargs: dict[str, Any] = {"model": MODEL, "max_tokens": 8_000, "system": SYSTEM, "tools": TOOLS}
            kwargs |= {"messages": as_params(asking(messages)), "extra_headers": SESSION}
            if stream:
                with client.messages.stream(**kwargs) as events:
                    reply = events.get_final_message()
                    headers = events.response.headers
            else:
                raw = client.messages.with_raw_response.create(**kwargs)
                reply, headers = raw.parse(), raw.headers
        [line] = log_lines(caplog, "agent_compaction=")
    assert len(app.messages_requests()) == forwarded  # the compaction request never went upstream
    assert app.summary_count == 1  # the summary made ahead, and no other
    actions = headers["x-inflight-actions"].split(",")
    assert actions[0] == "answered-compaction" and "summary-precomputed" in actions
    [block] = reply.content
    assert block.type == "text" and block.text.startswith("<summary>") and block.text.endswith("</summary>")
    assert "Summary number 1" in block.text and "Do the FAKE-TASK" in block.text  # the summary, and the task
    # Claude Code keeps none of the turns it asked to summarize: the handoff carries those after the summary's cut
    assert f"STEP {len(messages) // 2} DONE" in block.text and len(block.text) < 8_000
    assert reply.usage.input_tokens > 0 and reply.usage.output_tokens > 0 and reply.stop_reason == "end_turn"
    assert "agent_compaction=claude-code\\x202.1.328" in line and "agent_compaction_answer=answered" in line


def test_with_nothing_ready_the_summarizer_is_asked_once_with_the_users_compact_instructions(
    upstream: tuple[UpstreamApp, str], start_proxy: ProxyFactory
) -> None:
    app, url = upstream
    prompt = with_instructions(CLAUDE_PROMPT, "focus on the failing tests")
    body = {
        "model": MODEL,
        "max_tokens": 32_000,
        "system": SYSTEM,
        "tools": TOOLS,
        "messages": asking(agent_messages(6)),
    }
    with start_proxy(url, models={MODEL: {"context_window": WINDOW}}) as proxy_url:
        body["messages"] = asking(agent_messages(6), prompt)
        response = httpx.post(f"{proxy_url}/messages", json=body, headers=SESSION, timeout=30)
        metrics = httpx.get(proxy_url.removesuffix("/v1") + "/metrics").text
    assert 'inflight_compactions_total{action="answered-compaction"} 1.0' in metrics
    assert response.status_code == 200 and response.headers["x-inflight-actions"].startswith("answered-compaction")
    assert app.messages_requests() == [] and len(app.summaries) == 1
    assert "focus on the failing tests" in app.summaries[0].body.decode()  # in the summarizer's prompt
    text = response.json()["content"][0]["text"]
    assert "Summary number 1" in text and "following the user's instructions for this summary: focus on the" in text


def test_claude_codes_own_context_in_its_tool_results_reaches_neither_the_summarizer_nor_the_handoff(
    upstream: tuple[UpstreamApp, str], start_proxy: ProxyFactory
) -> None:
    """After it compacts, Claude Code adds its `<system-reminder>`s to the next tool result: they are its own
    context, which it adds again after each compaction, so the summary and the ledger need not say them."""
    app, url = upstream
    reminder = (
        "<system-reminder>\nThe deferred tools are not loaded: calling them directly will fail with "
        "InputValidationError.\nConfigure the harness in .claude/settings.json.\n</system-reminder>"
    )
    messages = agent_messages(10)  # too many turns to carry in the handoff's tail: the summarizer is asked
    for turn in (2, 4):  # the first two steps' results, which the summary replaces
        result = messages[turn]["content"][0]
        messages[turn]["content"][0] = {**result, "content": f"{result['content']}\n\n{reminder}"}
    body = {"model": MODEL, "max_tokens": 32_000, "system": SYSTEM, "tools": TOOLS, "messages": asking(messages)}
    with start_proxy(url, models={MODEL: {"context_window": WINDOW}}) as proxy_url:
        response = httpx.post(f"{proxy_url}/messages", json=body, headers=SESSION, timeout=30)
    assert response.status_code == 200 and response.headers["x-inflight-actions"].startswith("answered-compaction")
    assert app.messages_requests() == [] and len(app.summaries) == 1
    asked = app.summaries[0].body.decode()
    assert "STEP 1 DONE" in asked and "InputValidationError" not in asked and "settings.json" not in asked
    text = response.json()["content"][0]["text"]
    assert "Ledger" in text and "check step 1" in text
    assert "InputValidationError" not in text and "settings.json" not in text


def test_codexs_checkpoint_request_is_answered_with_one_assistant_message_through_the_openai_client(
    upstream: tuple[UpstreamApp, str], start_proxy: ProxyFactory
) -> None:
    app, url = upstream
    app.responses.agent = TaskAgent(steps=60)
    prompt = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": CODEX_PROMPT}]}
    items = agent_items(12, lines=10)  # too many turns to carry in the handoff's tail: a summary is made
    with start_proxy(url, models={CODEX_MODEL: {"context_window": WINDOW}}) as proxy_url:
        client = openai.OpenAI(base_url=proxy_url, api_key="sk-test", max_retries=0)
        raw = client.responses.with_raw_response.create(
            model=CODEX_MODEL, input=cast(Any, [*items, prompt]), tools=RESPONSES_TOOLS, store=False, stream=True
        )
        events: list[Any] = list(raw.parse())
        actions = raw.headers["x-inflight-actions"]
    assert app.responses_requests() == [] and len(app.summaries) == 1
    completed = events[-1]
    assert completed.type == "response.completed" and actions.startswith("answered-compaction")
    [message] = completed.response.output
    assert message.type == "message" and message.role == "assistant"
    text = message.content[0].text
    assert "Summary number 1" in text and "STEP 12 DONE" in text
    assert "Do the FAKE-TASK" not in text  # Codex keeps the user's messages itself
    assert completed.response.usage is not None and completed.response.usage.output_tokens > 0


def test_the_prompts_words_inside_a_tool_result_and_compaction_off_go_upstream_byte_for_byte(
    upstream: tuple[UpstreamApp, str], start_proxy: ProxyFactory
) -> None:
    app, url = upstream
    app.messages.agent = MessagesTaskAgent(steps=60)
    messages = agent_messages(4, lines=5)
    messages[-1]["content"][0]["content"] = CLAUDE_PROMPT  # the agent read a file that holds the prompt
    asking_for_a_summary = [
        *messages[:-1],
        {
            **messages[-1],
            "content": [
                *messages[-1]["content"],
                {"type": "text", "text": "Create a detailed summary of the conversation so far, and of src/app.py."},
            ],
        },
    ]
    with start_proxy(url, models={MODEL: {"context_window": WINDOW}}) as proxy_url:
        for history in (messages, asking_for_a_summary):
            raw = orjson.dumps({"model": MODEL, "max_tokens": 4096, "tools": TOOLS, "messages": history})
            response = httpx.post(f"{proxy_url}/messages", content=raw, headers=SESSION, timeout=30)
            assert response.status_code == 200 and response.headers["x-inflight-actions"] == "none"
            assert app.messages_requests()[-1].body == raw
        off = orjson.dumps({"model": MODEL, "max_tokens": 4096, "tools": TOOLS, "messages": asking(agent_messages(4))})
        response = httpx.post(
            f"{proxy_url}/messages", content=off, headers=SESSION | {"x-inflight-compaction": "off"}, timeout=30
        )
        assert response.headers["x-inflight-actions"] == "none" and app.messages_requests()[-1].body == off
    assert app.summaries == []


def test_shadow_mode_forwards_the_request_and_says_it_would_have_answered_it(
    upstream: tuple[UpstreamApp, str], start_proxy: ProxyFactory
) -> None:
    app, url = upstream
    app.messages.agent = MessagesTaskAgent(steps=60)
    raw = orjson.dumps({"model": MODEL, "max_tokens": 4096, "tools": TOOLS, "messages": asking(agent_messages(4))})
    config = {"models": {MODEL: {"context_window": WINDOW}}, "compaction": {"mode": "shadow"}}
    with start_proxy(url, **config) as proxy_url:
        response = httpx.post(f"{proxy_url}/messages", content=raw, headers=SESSION, timeout=30)
    assert response.status_code == 200 and app.messages_requests()[-1].body == raw
    assert response.headers["x-inflight-actions"] == "none"
    assert response.headers["x-inflight-shadow-actions"].split(",")[0] == "answered-compaction"
    assert app.summaries == []


def test_the_answered_compaction_is_archived_and_marked_as_such(
    upstream: tuple[UpstreamApp, str], start_proxy: ProxyFactory
) -> None:
    app, url = upstream
    body = {"model": MODEL, "max_tokens": 8_000, "tools": TOOLS, "messages": asking(agent_messages(10))}
    config = {"models": {MODEL: {"context_window": WINDOW}}, "archive": {"enabled": True}}
    with start_proxy(url, **config) as proxy_url:
        response = httpx.post(f"{proxy_url}/messages", json=body, headers=SESSION, timeout=30)
        listed = archived(proxy_url, "/inflight/conversations", until=lambda j: j["conversations"])
        (conversation,) = listed["conversations"]
        view = archived(proxy_url, f"/inflight/conversations/{conversation['id']}", until=lambda j: j["compactions"])
    [turn] = view["turns"]
    [compaction] = view["compactions"]
    assert turn["actions"] == response.headers["x-inflight-actions"] and turn["actions"].startswith(
        "answered-compaction"
    )
    assert compaction["id"] == response.headers["x-inflight-compaction-id"]
    assert app.messages_requests() == []


def test_the_compact_endpoint_is_answered_at_once_when_a_summary_was_made_ahead(
    upstream: tuple[UpstreamApp, str], start_proxy: ProxyFactory
) -> None:
    app, url = upstream
    app.responses.agent = TaskAgent(steps=200)
    with start_proxy(url, models={CODEX_MODEL: {"context_window": WINDOW}}) as proxy_url:
        for turns in range(1, 200):  # Codex's turns, one more each time, until a summary is made ahead
            items = agent_items(turns, lines=10)
            body = {"model": CODEX_MODEL, "input": items, "tools": RESPONSES_TOOLS, "store": False}
            httpx.post(f"{proxy_url}/responses", json=body, timeout=30)
            if jobs(proxy_url)["started"]:
                wait_until(lambda: jobs(proxy_url)["landed"] == 1)
                break
        response = httpx.post(f"{proxy_url}/responses/compact", json={"model": CODEX_MODEL, "input": items}, timeout=30)
    assert response.status_code == 200 and response.json()["object"] == "response.compaction"
    actions = response.headers["x-inflight-actions"].split(",")
    assert actions[0] == "answered-compaction" and "summary-precomputed" in actions
    assert [item["type"] for item in response.json()["output"]].count("compaction") == 1
    assert not [r for r in app.requests if r.path.endswith("/compact")]  # the upstream was never asked
    assert app.summary_count == 1


def test_a_compaction_soon_after_the_last_carries_its_summary_and_asks_the_summarizer_nothing(
    upstream: tuple[UpstreamApp, str], start_proxy: ProxyFactory
) -> None:
    """Claude Code installs the handoff as the start of its new conversation, runs two steps and compacts again:
    the answer is the earlier summary and every turn since, with no summarizer call."""
    app, url = upstream
    history = agent_messages(12)
    with start_proxy(url, models={MODEL: {"context_window": WINDOW}}) as proxy_url:
        body = {"model": MODEL, "max_tokens": 8_000, "tools": TOOLS, "messages": asking(history)}
        first = httpx.post(f"{proxy_url}/messages", json=body, headers=SESSION, timeout=30).json()
        handoff = first["content"][0]["text"].removeprefix("<summary>\n").removesuffix("\n</summary>")
        installed = {"role": "user", "content": f"This session is being continued.\n\nSummary:\n{handoff}\n\nGo on."}
        later = [installed, *agent_messages(14)[25:]]  # steps 13 and 14, after the summary
        body = {"model": MODEL, "max_tokens": 8_000, "tools": TOOLS, "messages": asking(later)}
        response = httpx.post(f"{proxy_url}/messages", json=body, headers=SESSION, timeout=30)
    assert app.messages_requests() == [] and len(app.summaries) == 1  # only the first compaction's summary
    assert response.status_code == 200 and response.headers["x-inflight-actions"] == "answered-compaction"
    text = response.json()["content"][0]["text"]
    assert text.count("Summary number 1") == 1 and text.count("Do the FAKE-TASK") == 1
    assert "STEP 12 DONE" in text and "STEP 13 DONE" in text and "STEP 14 DONE" in text
    assert "This session is being continued" not in text  # the agent's own words around the handoff are not nested


def test_codexs_compaction_trigger_is_answered_with_one_sealed_compaction_item_that_opens_on_the_next_turn(
    upstream: tuple[UpstreamApp, str], start_proxy: ProxyFactory
) -> None:
    """Codex with OpenAI as its provider (`remote_compaction_v2`) ends a request with a `compaction_trigger` item and
    installs the one `compaction` item it is answered; inflight seals its summary into it and opens it again."""
    app, url = upstream
    app.responses.agent = TaskAgent(steps=60)
    items = agent_items(12, lines=10)
    trigger = {"type": "compaction_trigger"}
    beta = {"x-codex-beta-features": "remote_compaction_v2"}
    with start_proxy(url, models={CODEX_MODEL: {"context_window": WINDOW}}) as proxy_url:
        client = openai.OpenAI(base_url=proxy_url, api_key="sk-test", max_retries=0)
        raw = client.responses.with_raw_response.create(
            model=CODEX_MODEL,
            input=cast(Any, [*items, trigger]),
            tools=RESPONSES_TOOLS,
            store=False,
            stream=True,
            extra_headers=beta,
        )
        events: list[Any] = list(raw.parse())
        assert app.responses_requests() == [] and len(app.summaries) == 1  # answered here, from one summary
        assert raw.headers["x-inflight-actions"].startswith("answered-compaction")
        completed = events[-1]
        assert completed.type == "response.completed"
        [item] = [event.item for event in events if event.type == "response.output_item.done"]
        output = [entry.model_dump() if hasattr(entry, "model_dump") else entry for entry in completed.response.output]
        assert [entry["type"] for entry in output] == ["compaction"]
        sealed = output[0]["encrypted_content"]
        assert sealed.startswith("inflight2.") and "Summary number 1" not in sealed and item.type == "compaction"
        users = [entry for entry in items if entry.get("role") == "user"]  # Codex keeps the user's messages
        step = agent_items(13, lines=10)[-2:]  # its next call and output
        client.responses.create(
            model=CODEX_MODEL, input=cast(Any, [*users, output[0], *step]), tools=RESPONSES_TOOLS, store=False
        )
    sent = app.responses_requests()[-1].body.decode()
    assert "Summary number 1" in sent and "inflight2." not in sent  # opened for the upstream, which never sees it


def test_a_streamed_compaction_request_waiting_for_its_summary_is_kept_alive_then_answered(
    upstream: tuple[UpstreamApp, str], start_proxy: ProxyFactory
) -> None:
    """With `summarize.keepalive_after_s`, a streaming agent waiting for the summary its compaction needs gets its
    stream's headers and comment lines at once (so it does not time out), then the answer as usual."""
    app, url = upstream
    app.summarizer_delay = 1.0  # the summary takes at least a second: the keep-alive comes first, whatever the load
    config: dict[str, Any] = {
        "models": {MODEL: {"context_window": WINDOW}},
        "compaction": {"summarize": {"keepalive_after_s": 0.2}},
    }
    body = {"model": MODEL, "max_tokens": 8_000, "tools": TOOLS, "messages": asking(agent_messages(12)), "stream": True}
    with start_proxy(url, **config) as proxy_url:
        with httpx.stream("POST", f"{proxy_url}/messages", json=body, headers=SESSION, timeout=30) as response:
            raw = b"".join(response.iter_bytes())
            headers = response.headers
        with client_for(proxy_url) as client:  # the SDK reads such a stream as any other
            kwargs: dict[str, Any] = {"model": MODEL, "max_tokens": 8_000, "tools": TOOLS, "extra_headers": SESSION}
            with client.messages.stream(messages=as_params(asking(agent_messages(12))), **kwargs) as events:
                reply = events.get_final_message()
    assert app.messages_requests() == [] and headers["content-type"].startswith("text/event-stream")
    assert raw.startswith(b": inflight is compacting") and b"event: message_stop" in raw
    assert b"<summary>" in raw and b"Summary number 1" in raw
    assert reply.content[0].type == "text" and reply.content[0].text.startswith("<summary>")
