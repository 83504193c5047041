"""`POST /v1/messages` through the proxy with the official `anthropic` client: passed through byte for
byte when it fits, compacted with every thinking block intact and at most 4 breakpoints when it does
not, retried once on either refusal wording; keys as `x-api-key`; each format to its own upstream;
summaries through the Messages API; our own errors in Anthropic's shape."""

from __future__ import annotations

import logging
from typing import Any

import anthropic
import httpx
import orjson
import pytest
from anthropic.types import MessageParam, ThinkingConfigEnabledParam, ToolParam

from inflight.compaction.retrieval import TOOL_NAME
from inflight.formats.context_editing import CLEARED_RESULT
from tests.conftest import ProxyFactory
from tests.support.logs import log_lines
from tests.support.messages import MessagesTaskAgent, thinking_signature
from tests.support.responses import TASK_MARKER
from tests.support.servers import serve
from tests.support.upstream import UpstreamApp

MODEL = "claude-opus-5-5"
EPHEMERAL: dict[str, Any] = {"type": "ephemeral"}
SYSTEM: list[dict[str, Any]] = [
    {"type": "text", "text": "You are an agent."},
    {"type": "text", "text": "Run commands with Bash.", "cache_control": EPHEMERAL},
]
TOOLS: list[ToolParam] = [
    {
        "name": "Bash",
        "description": "Run a shell command.",
        "input_schema": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]},
    }
]
THINKING: ThinkingConfigEnabledParam = {"type": "enabled", "budget_tokens": 1024}


def agent_messages(turns: int, *, lines: int = 60) -> list[dict[str, Any]]:
    """A Claude Code-like history: the task, then `turns` of signed thinking, a Bash call and its result,
    with the moving breakpoint on the last block."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": f"Do the {TASK_MARKER}: run the steps one by one."}]
    for step in range(1, turns + 1):
        thought = f"Step {step - 1} is done, so step {step} comes next."
        output = "\n".join(f"step {step} log line {i}: checked module_{step}_{i}.py" for i in range(lines))
        use = {"type": "tool_use", "id": f"toolu_{step}", "name": "Bash", "input": {"command": f"check step {step}"}}
        messages += [
            {
                "role": "assistant",
                "content": [
                    {"type": "thinking", "thinking": thought, "signature": thinking_signature(thought, step)},
                    {"type": "text", "text": f"Running step {step}."},
                    use,
                ],
            },
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": f"toolu_{step}", "content": f"{output}\nSTEP {step} DONE"}
                ],
            },
        ]
    messages[-1]["content"][-1]["cache_control"] = EPHEMERAL
    return messages


def as_params(messages: list[dict[str, Any]]) -> list[MessageParam]:
    return messages  # type: ignore[return-value]


def breakpoints(value: Any) -> int:
    if isinstance(value, list):
        return sum(breakpoints(item) for item in value)
    if not isinstance(value, dict):
        return 0
    return (value.get("cache_control") is not None) + sum(
        breakpoints(v) for k, v in value.items() if k != "cache_control"
    )


def client_for(base_url: str, key: str = "sk-ant-test") -> anthropic.Anthropic:
    """The SDK pointed at `base_url` (an origin, or the proxy's `/v1` URL less `/v1`: ANTHROPIC_BASE_URL)."""
    return anthropic.Anthropic(base_url=base_url.removesuffix("/v1"), api_key=key, max_retries=0)


def test_a_message_that_fits_passes_through_byte_for_byte(
    upstream: tuple[UpstreamApp, str], start_proxy: ProxyFactory
) -> None:
    app, direct_url = upstream
    app.messages.agent = MessagesTaskAgent(steps=3)
    contents = []
    with start_proxy(direct_url) as proxy_url:
        for base_url in (direct_url, proxy_url):
            with client_for(base_url) as client:
                kwargs: dict[str, Any] = {"model": MODEL, "max_tokens": 4096, "system": SYSTEM, "tools": TOOLS}
                raw = client.messages.with_raw_response.create(messages=as_params(agent_messages(2)), **kwargs)
                contents.append((raw.http_response.content, raw.headers.get("x-inflight-actions")))
                assert raw.parse().content[-1].type == "tool_use"  # the agent goes on: step 3
                with client.messages.stream(
                    messages=as_params(agent_messages(2)), thinking=THINKING, **kwargs
                ) as stream:
                    final = stream.get_final_message()
                assert [b.type for b in final.content] == ["thinking", "text", "tool_use"]
                assert final.usage.input_tokens + (final.usage.cache_read_input_tokens or 0) > 0
    direct, proxied = app.messages_requests()[:2], app.messages_requests()[2:]
    assert [r.body for r in proxied] == [r.body for r in direct]  # the client's exact bytes went up
    assert contents[1] == (bytes(proxied[0].sent), "none")  # and the answer came back as the upstream sent it
    with start_proxy(direct_url) as proxy_url:
        body = {"model": MODEL, "max_tokens": 4096, "messages": agent_messages(2), "tools": TOOLS, "stream": True}
        with httpx.stream("POST", f"{proxy_url}/messages?beta=true", json=body) as response:
            received = b"".join(response.iter_raw())
    assert received == bytes(app.messages_requests()[-1].sent) and received.startswith(b"event: message_start")
    assert app.messages_requests()[-1].query == b"beta=true"


@pytest.mark.parametrize("stream", [False, True])
def test_a_long_conversation_is_compacted_with_every_thinking_block_verbatim(
    upstream: tuple[UpstreamApp, str], start_proxy: ProxyFactory, stream: bool
) -> None:
    app, url = upstream
    app.messages.agent = MessagesTaskAgent(steps=40)
    app.windows[MODEL] = 12_000
    messages = agent_messages(20)
    with start_proxy(url, models={MODEL: {"context_window": 12_000}}) as proxy_url, client_for(proxy_url) as client:
        # 128k asked of a 12k window, as Claude Code asks (streamed: the SDK refuses that much otherwise)
        kwargs: dict[str, Any] = {"model": MODEL, "max_tokens": 128_000 if stream else 8_000, "system": SYSTEM}
        kwargs["tools"] = TOOLS
        if stream:
            with client.messages.stream(messages=as_params(messages), thinking=THINKING, **kwargs) as events:
                reply = events.get_final_message()
                actions = events.response.headers["x-inflight-actions"]
        else:
            raw = client.messages.with_raw_response.create(messages=as_params(messages), thinking=THINKING, **kwargs)
            reply, actions = raw.parse(), raw.headers["x-inflight-actions"]
    assert actions != "none"
    assert reply.content[-1].type == "tool_use" and "step 21" in orjson.dumps(reply.content[-1].model_dump()).decode()
    sent = app.messages_requests()[-1].json()
    assert app.messages.rejected == []  # every thinking block verified, every tool_use with its result
    assistants = [m for m in messages if m["role"] == "assistant"]
    assert all(m in assistants for m in sent["messages"] if m["role"] == "assistant")  # verbatim, or gone whole
    # The client's tools as they came, and `inflight_retrieve` last (`auto`): added once, with the compaction
    assert sent["system"] == SYSTEM and sent["tools"][:-1] == TOOLS and sent["tools"][-1]["name"] == TOOL_NAME
    assert sent["messages"][-2:] == messages[-2:]  # the latest turn, whole, its breakpoint on it
    assert TASK_MARKER in orjson.dumps(sent["messages"][0]).decode()
    assert breakpoints(sent) <= 4
    assert len(orjson.dumps(sent)) < len(orjson.dumps(messages)) / 2


@pytest.mark.parametrize("counts_max_tokens", [False, True], ids=["prompt-is-too-long", "input-and-max-tokens"])
def test_a_refusal_is_retried_once_with_the_window_it_names(
    upstream: tuple[UpstreamApp, str], start_proxy: ProxyFactory, counts_max_tokens: bool
) -> None:
    app, url = upstream
    app.messages.agent = MessagesTaskAgent(steps=40)
    app.messages.counts_max_tokens = counts_max_tokens
    app.windows[MODEL] = 12_000  # the proxy is not told: it finds out from the refusal
    messages = agent_messages(12)
    with start_proxy(url) as proxy_url, client_for(proxy_url) as client:
        raw = client.messages.with_raw_response.create(
            model=MODEL, max_tokens=2_000, messages=as_params(messages), tools=TOOLS, stream=True
        )
        events = [event.type for event in raw.parse()]
    assert raw.headers["x-inflight-retried"] == "1"
    assert events[0] == "message_start" and events[-1] == "message_stop"  # no trace of the refusal
    refused, retried = app.messages_requests()
    assert app.messages.refused == 1 and refused.json()["messages"] == messages
    assert len(retried.body) < len(refused.body) and app.messages.rejected == []


def test_keys_come_as_x_api_key_and_the_upstream_key_goes_as_anthropic_takes_it(
    upstream: tuple[UpstreamApp, str], start_proxy: ProxyFactory
) -> None:
    app, url = upstream
    keys = {"access": {"keys": ["sk-proxy-client"]}, "upstream": {"api_key": "sk-up"}}
    with start_proxy(url, **keys) as proxy_url:
        with client_for(proxy_url, key="sk-proxy-client") as client:
            beta = {"anthropic-beta": "context-management-2025-06-27", "anthropic-version": "2023-06-01"}
            hello: list[MessageParam] = [{"role": "user", "content": "hi"}]
            reply = client.messages.create(model=MODEL, max_tokens=100, messages=hello, extra_headers=beta)
        with client_for(proxy_url, key="sk-wrong") as client, pytest.raises(anthropic.AuthenticationError) as refused:
            client.messages.create(model=MODEL, max_tokens=100, messages=[{"role": "user", "content": "hi"}])
        chat = httpx.post(
            f"{proxy_url}/chat/completions",
            json={"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]},
            headers={"x-api-key": "sk-proxy-client"},
        )
    assert reply.content[0].type == "text"
    assert refused.value.status_code == 401 and refused.value.body == {
        "type": "error",
        "error": {"type": "authentication_error", "message": refused.value.body["error"]["message"]},  # type: ignore[index]
    }
    [sent] = app.messages_requests()
    assert sent.headers["x-api-key"] == "sk-up" and "authorization" not in sent.headers  # the client's key stays here
    assert sent.headers["anthropic-version"] == "2023-06-01"  # Anthropic's own headers pass through
    assert sent.headers["anthropic-beta"] == "context-management-2025-06-27"
    assert chat.status_code == 200 and app.chat_requests()[-1].headers["authorization"] == "Bearer sk-up"
    assert "x-api-key" not in app.chat_requests()[-1].headers


def test_each_format_goes_to_its_own_upstream(upstream: tuple[UpstreamApp, str], start_proxy: ProxyFactory) -> None:
    openai_app, openai_url = upstream
    anthropic_app = UpstreamApp()
    with serve(anthropic_app) as anthropic_url:
        upstreams = {"messages": {"base_url": f"{anthropic_url}/v1", "api_key": "sk-ant-up"}}
        with start_proxy(openai_url, upstream={"api_key": "sk-openai-up"}, upstreams=upstreams) as proxy_url:
            with client_for(proxy_url) as client:
                client.messages.create(model=MODEL, max_tokens=100, messages=[{"role": "user", "content": "hi"}])
                counted = client.messages.count_tokens(model=MODEL, messages=[{"role": "user", "content": "hi"}])
            chat = httpx.post(
                f"{proxy_url}/chat/completions",
                json={"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]},
            )
    assert chat.status_code == 200 and counted.input_tokens > 0
    # the model's window asked of the upstream that serves it, then the message, then the count
    assert [r.path for r in anthropic_app.requests] == ["/v1/models", "/v1/messages", "/v1/messages/count_tokens"]
    assert all(r.headers["x-api-key"] == "sk-ant-up" for r in anthropic_app.requests)
    assert [r.path for r in openai_app.requests] == ["/v1/chat/completions"]
    assert openai_app.requests[0].headers["authorization"] == "Bearer sk-openai-up"


def test_our_own_errors_on_messages_take_anthropics_shape(proxy: str) -> None:
    response = httpx.post(f"{proxy}/messages", content=b"{not json", headers={"content-type": "application/json"})
    assert response.status_code == 400
    body = response.json()
    assert body["type"] == "error" and body["error"]["type"] == "invalid_request_error" and body["error"]["message"]
    with client_for(proxy) as client, pytest.raises(anthropic.NotFoundError):
        client.get("/v2/nothing", cast_to=httpx.Response)


def test_a_summary_for_a_messages_request_is_asked_through_the_messages_api(
    upstream: tuple[UpstreamApp, str], start_proxy: ProxyFactory, caplog: pytest.LogCaptureFixture
) -> None:
    """The upstream's own model summarizes in the API it speaks, with the key as that upstream takes it,
    and the conversation is the one Claude Code's session header names."""
    app, url = upstream
    app.messages.agent = MessagesTaskAgent(steps=60)
    settings = {"summarize": {"background_at": None}}  # made on the turn, so the test can see it used
    models = {MODEL: {"context_window": 12_000}}
    body = {
        "model": MODEL,
        "max_tokens": 4096,
        "messages": agent_messages(90, lines=10),
        "tools": TOOLS,
        "system": SYSTEM,
    }
    headers = {"x-api-key": "sk-ant-client", "x-claude-code-session-id": "5e55-10n", "anthropic-version": "2023-06-01"}
    with (
        caplog.at_level(logging.INFO, logger="inflight"),
        start_proxy(url, models=models, compaction=settings) as proxy_url,
    ):
        response = httpx.post(f"{proxy_url}/messages", json=body, headers=headers, timeout=30)
        [line] = log_lines(caplog, "POST /v1/messages")
    assert response.status_code == 200 and "summarize" in response.headers["x-inflight-actions"]
    assert " key=session:5e55-10n#t" in line  # Claude Code's session, this client's alone
    assert app.summaries and {r.path for r in app.summaries} == {"/v1/messages"}
    asked = app.summaries[0]
    assert asked.json()["system"].startswith("You write the handoff note") and not asked.json()["stream"]
    assert asked.headers["x-api-key"] == "sk-ant-client" and asked.headers["anthropic-version"] == "2023-06-01"
    sent = app.messages_requests()[-1].json()["messages"]
    assert "Summary number" in orjson.dumps(sent[0]).decode()  # joined to the task's turn: roles alternate
    assert [m["role"] for m in sent[:2]] == ["user", "assistant"]
    assert app.messages.rejected == []


EDITS: list[dict[str, Any]] = [
    {
        "type": "clear_tool_uses_20250919",
        "trigger": {"type": "input_tokens", "value": 1_000},
        "keep": {"type": "tool_uses", "value": 2},
    },
    {"type": "clear_thinking_20251015", "keep": {"type": "thinking_turns", "value": 1}},
]


@pytest.mark.parametrize(
    ("stream", "told"), [(False, False), (True, False), (True, True)], ids=["refused", "refused-stream", "told-stream"]
)
def test_context_edits_are_done_by_inflight_for_an_upstream_that_refuses_them(
    upstream: tuple[UpstreamApp, str], start_proxy: ProxyFactory, stream: bool, told: bool
) -> None:
    """Refused ("context_management: Extra inputs are not permitted", as a gateway says it), or told
    (`messages.context_management: inflight`, for an upstream that ignores the field)."""
    app, url = upstream
    app.messages.agent = MessagesTaskAgent(steps=40)
    app.messages.supports_context_management = False
    messages = agent_messages(8)
    replies = []
    config = {"messages": {"context_management": "inflight"}} if told else {}
    with start_proxy(url, **config) as proxy_url, client_for(proxy_url) as client:
        for _ in range(2):
            kwargs: dict[str, Any] = {"model": MODEL, "max_tokens": 4096, "tools": TOOLS, "messages": messages}
            kwargs |= {"context_management": {"edits": EDITS}, "betas": ["context-management-2025-06-27"]}
            if stream:
                with client.beta.messages.stream(**kwargs) as events:
                    replies.append(events.get_final_message())
            else:
                replies.append(client.beta.messages.create(**kwargs))
    sent = app.messages_requests()
    if not told:
        refused = sent.pop(0)
        assert "context_management" in refused.json()
        assert app.messages.rejected == ["context_management: Extra inputs are not permitted"]
    assert len(sent) == 2  # the refusal taught it: the second request went without the field at once
    for request, reply in zip(sent, replies, strict=True):
        body = request.json()
        assert "context_management" not in body and body["tools"] == TOOLS
        cleared = [
            block["content"] == CLEARED_RESULT
            for message in body["messages"]
            for block in message["content"]
            if isinstance(block, dict) and block["type"] == "tool_result"
        ]
        assert cleared == [True] * 6 + [False] * 2  # all but the latest two results
        thinking = [m for m in body["messages"] if m["role"] == "assistant" and m["content"][0]["type"] == "thinking"]
        assert thinking == [messages[-2]]  # the latest turn's only
        assert reply.context_management is not None
        edits = [edit.model_dump() for edit in reply.context_management.applied_edits]
        assert [(e["type"], e.get("cleared_tool_uses"), e.get("cleared_thinking_turns")) for e in edits] == [
            ("clear_tool_uses_20250919", 6, None),
            ("clear_thinking_20251015", None, 7),
        ]
        assert all(e["cleared_input_tokens"] > 0 for e in edits)
        assert reply.content[-1].type == "tool_use"  # the agent goes on: the latest result is whole


def test_more_context_edits_than_inflight_does_get_a_400_and_nothing_is_sent(
    upstream: tuple[UpstreamApp, str], start_proxy: ProxyFactory
) -> None:
    """8,000 no-op edits in a 1 MB body froze every request for 6-7 s when inflight did them on the event loop."""
    app, url = upstream
    noop = {"type": "clear_thinking_20251015", "keep": "all"}
    body = {"model": MODEL, "max_tokens": 64, "messages": agent_messages(4)}
    body["context_management"] = {"edits": [noop] * 9}
    with start_proxy(url, messages={"context_management": "inflight"}) as proxy_url:
        response = httpx.post(f"{proxy_url}/messages", json=body, timeout=30)
    assert response.status_code == 400 and app.messages_requests() == []
    error = response.json()
    assert error["type"] == "error" and error["error"]["type"] == "invalid_request_error"
    assert "context_management.edits" in error["error"]["message"] and "at most 8" in error["error"]["message"]


def test_context_edits_pass_through_to_an_upstream_that_does_them(
    upstream: tuple[UpstreamApp, str], start_proxy: ProxyFactory
) -> None:
    app, url = upstream
    body = {"model": MODEL, "max_tokens": 100, "messages": agent_messages(3), "context_management": {"edits": EDITS}}
    raw = orjson.dumps(body)
    with start_proxy(url) as proxy_url:
        response = httpx.post(f"{proxy_url}/messages", content=raw, headers={"content-type": "application/json"})
    assert response.status_code == 200 and response.content == bytes(app.messages_requests()[-1].sent)
    assert [r.body for r in app.messages_requests()] == [raw]  # as sent: the upstream does them itself


def test_after_input_and_max_tokens_refusal_the_reply_gets_its_whole_room(
    upstream: tuple[UpstreamApp, str], start_proxy: ProxyFactory
) -> None:
    """That wording says the upstream counts `max_tokens` against the window: the budget leaves all of it
    from then on (capped at the configured reserve before, as Anthropic's own models need)."""
    app, url = upstream
    app.messages.agent = MessagesTaskAgent(steps=40)
    app.messages.counts_max_tokens = True
    app.windows[MODEL] = 12_000
    body = {"model": MODEL, "max_tokens": 5_000, "messages": agent_messages(12), "tools": TOOLS}
    with start_proxy(url) as proxy_url:
        first = httpx.post(f"{proxy_url}/messages", json=body, timeout=30)
        second = httpx.post(f"{proxy_url}/messages", json=body, timeout=30)
    assert first.status_code == 200 and first.headers["x-inflight-retried"] == "1"
    assert second.status_code == 200 and second.headers["x-inflight-budget"] == "7000"  # 12,000 - 5,000
    assert app.messages.refused == 1  # the second went compacted to fit, at once


def test_a_request_of_anthropics_clients_outside_messages_goes_to_its_upstream(
    upstream: tuple[UpstreamApp, str], start_proxy: ProxyFactory
) -> None:
    """`GET /v1/models` from Claude Code must not reach the OpenAI upstream with the client's Anthropic key."""
    openai_app, openai_url = upstream
    anthropic_app = UpstreamApp()
    with serve(anthropic_app) as anthropic_url:
        upstreams = {"messages": {"base_url": f"{anthropic_url}/v1"}}
        with (
            start_proxy(openai_url, upstreams=upstreams) as proxy_url,
            client_for(proxy_url, "sk-ant-SECRET") as client,
        ):
            client.models.list()
            httpx.get(f"{proxy_url}/models", headers={"authorization": "Bearer sk-openai"})
    [models] = anthropic_app.requests  # the SDK sends its key as a Bearer token or as x-api-key
    assert models.path == "/v1/models" and "sk-ant-SECRET" in (
        models.headers.get("x-api-key"),
        models.headers.get("authorization", "")[7:],
    )
    [plain] = openai_app.requests
    assert plain.path == "/v1/models" and "sk-ant-SECRET" not in str(plain.headers)


def test_an_error_after_keepalive_comments_is_an_event_the_anthropic_sdk_raises(
    upstream: tuple[UpstreamApp, str], start_proxy: ProxyFactory
) -> None:
    app, url = upstream
    app.summarizer_delay = 1.0
    config: dict[str, Any] = {
        "models": {MODEL: {"context_window": 12_000}},
        "compaction": {"summarize": {"background_at": None, "keepalive_after_s": 0.3}},
    }
    messages = agent_messages(90, lines=10)
    with (
        start_proxy(url, **config) as proxy_url,
        client_for(proxy_url) as client,
        pytest.raises(anthropic.APIStatusError) as raised,
    ):
        stream = client.messages.create(
            model=MODEL,
            max_tokens=4096,
            messages=as_params(messages),
            tools=TOOLS,
            stream=True,
            extra_headers={"x-scenario": "status-503"},
        )
        list(stream)
    assert "upstream says 503" in str(raised.value)


def test_near_a_threshold_the_upstreams_exact_count_decides_when_asked(
    upstream: tuple[UpstreamApp, str], start_proxy: ProxyFactory, caplog: pytest.LogCaptureFixture
) -> None:
    """`messages.count_tokens: near`: the turn is counted by the upstream's `count_tokens`, with the
    client's key and betas, and decided on that count (a band of the whole budget: every turn is near)."""
    app, url = upstream
    app.messages.agent = MessagesTaskAgent(steps=40)
    body = {"model": MODEL, "max_tokens": 4096, "system": SYSTEM, "messages": agent_messages(6), "tools": TOOLS}
    headers = {"x-api-key": "sk-ant-client", "anthropic-beta": "interleaved-thinking-2025-05-14"}
    config: dict[str, Any] = {"models": {MODEL: {"context_window": 12_000}}}
    with caplog.at_level(logging.INFO, logger="inflight"):
        for count_tokens, band in (("near", 1.0), ("near", 0.001), ("off", 1.0)):
            messages = {"count_tokens": count_tokens, "count_tokens_band": band}
            with start_proxy(url, **config, messages=messages) as proxy_url:
                response = httpx.post(f"{proxy_url}/messages", json=body, headers=headers, timeout=30)
            assert response.status_code == 200
    counts = [r for r in app.requests if r.path == "/v1/messages/count_tokens"]
    assert len(counts) == 1  # near: asked; far from every threshold, or off: not
    [asked] = counts
    exact = app.messages.count({**asked.json(), "max_tokens": 1})
    assert set(asked.json()) == {"model", "system", "messages", "tools"}  # the prompt, not the reply's fields
    assert (
        asked.headers["x-api-key"] == "sk-ant-client" and asked.headers["anthropic-beta"] == headers["anthropic-beta"]
    )
    [line, *_] = log_lines(caplog, "POST /v1/messages")
    assert f" exact_count={exact} " in line and f" tokens={exact}/" in line  # decided on the upstream's count


def test_with_client_keys_and_no_messages_upstream_claude_clients_are_told_what_to_set() -> None:
    """With `access.keys` the clients' keys are the proxy's, so none can go to Anthropic: the Messages API
    answers 502 in Anthropic's shape, naming `upstreams.messages`, and nothing is forwarded."""
    from inflight.app import create_app
    from inflight.config import load_settings
    from inflight.http.server import startup_line

    overrides = {"access": {"keys": ["sk-proxy"]}, "upstream": {"api_key": "sk-openai", "connect_timeout_s": 0.5}}
    settings = load_settings(None, overrides=overrides)
    with serve(create_app(settings)) as url, client_for(url, key="sk-proxy") as client:
        with pytest.raises(anthropic.APIStatusError) as refused:
            client.messages.create(model=MODEL, max_tokens=10, messages=[{"role": "user", "content": "hi"}])
        with pytest.raises(anthropic.APIStatusError) as counted:
            client.messages.count_tokens(model=MODEL, messages=[{"role": "user", "content": "hi"}])
    for error in (refused.value, counted.value):
        body = error.response.json()
        assert error.status_code == 502 and body["type"] == "error"
        assert "upstreams.messages" in body["error"]["message"]
    assert "messages -> none (set upstreams.messages)" in startup_line(settings, workers=1)


def test_an_unknown_key_in_a_clients_context_management_is_its_own_400(
    upstream: tuple[UpstreamApp, str], start_proxy: ProxyFactory
) -> None:
    """Anthropic refuses a key inside the field ("context_management.edits.0.bogus: Extra inputs are not
    permitted"): that client gets the 400, and every client's valid edits still go to the upstream, which does them."""
    from tests.support.upstream import Scripted

    app, url = upstream
    unknown = {
        "type": "error",
        "error": {
            "type": "invalid_request_error",
            "message": "context_management.edits.0.bogus: Extra inputs are not permitted",
        },
    }
    app.script.append(Scripted(status=400, body=unknown))
    body = {"model": MODEL, "max_tokens": 100, "messages": agent_messages(3), "context_management": {"edits": EDITS}}
    bad = {**body, "context_management": {"edits": [{**EDITS[0], "bogus": 1}]}}
    good = orjson.dumps(body)
    headers = {"content-type": "application/json", "anthropic-version": "2023-06-01"}
    with start_proxy(url) as proxy_url:
        refused = httpx.post(f"{proxy_url}/messages", json=bad, headers={**headers, "x-api-key": "sk-a"})
        answers = [
            httpx.post(f"{proxy_url}/messages", content=good, headers={**headers, "x-api-key": key})
            for key in ("sk-b", "sk-a")
        ]
    assert refused.status_code == 400 and refused.json() == unknown and "x-inflight-retried" not in refused.headers
    assert all(answer.status_code == 200 for answer in answers)
    _, *forwarded = app.messages_requests()
    assert [request.body for request in forwarded] == [good, good]  # as sent: the upstream does the edits
