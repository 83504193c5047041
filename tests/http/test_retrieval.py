"""Reversible compaction through the proxy: a compacted conversation offers `inflight_retrieve`, the proxy answers
the model's calls itself, and the client (the official `openai` and `anthropic` clients) gets one answer with no
trace of the tool, streaming or not, in every wire format."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import openai
import orjson
import pytest
from anthropic.types import Message
from openai.types.responses import ResponseCompletedEvent, ResponseTextDeltaEvent

from inflight.compaction.retrieval import TOOL_NAME
from inflight.tokens import TokenCounter
from tests.compaction.test_compactor import agent_conversation
from tests.conftest import ProxyFactory
from tests.http.test_archive import archived
from tests.http.test_gemini import MODEL as GEMINI
from tests.http.test_gemini import agent_contents, body_of, gemini_proxy, generate
from tests.http.test_metrics import scrape
from tests.support.retriever import LOOKING, RetrievingModel, chat, digest_of
from tests.support.servers import serve
from tests.support.upstream import Scripted, UpstreamApp

MODEL = "gpt-4o"
WINDOW = {"models": {MODEL: {"context_window": 8000}}, "discover_context_window": False}
BASH: Any = {"type": "function", "function": {"name": "bash", "parameters": {"type": "object"}}}


@pytest.fixture
def retrieving() -> Iterator[tuple[UpstreamApp, str]]:
    app = UpstreamApp()
    app.retriever = RetrievingModel()
    with serve(app) as url:
        yield app, url + "/v1"


def chat_conversation(turns: int = 12, *, tag: str = "") -> Any:
    messages = agent_conversation(turns, output_lines=60)
    for message in messages:
        if message["role"] == "tool":
            message["content"] = tag + message["content"]
    return messages


def outputs(messages: list[dict[str, Any]]) -> list[str]:
    return [m["content"] for m in messages if m["role"] == "tool"]


def responses_input(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = [{"role": "user", "content": messages[1]["content"]}]
    for message in messages[2:]:
        if message["role"] == "assistant":
            call = message["tool_calls"][0]
            function = call["function"]
            items.append(
                {"type": "function_call", "call_id": call["id"], "name": "bash", "arguments": function["arguments"]}
            )
        else:
            items.append(
                {"type": "function_call_output", "call_id": message["tool_call_id"], "output": message["content"]}
            )
    return items


def anthropic_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = [{"role": "user", "content": messages[1]["content"]}]
    for message in messages[2:]:
        if message["role"] == "assistant":
            call = message["tool_calls"][0]
            use = {
                "type": "tool_use",
                "id": call["id"],
                "name": "bash",
                "input": orjson.loads(call["function"]["arguments"]),
            }
            out.append({"role": "assistant", "content": [{"type": "text", "text": message["content"]}, use]})
        else:
            result = {"type": "tool_result", "tool_use_id": message["tool_call_id"], "content": message["content"]}
            out.append({"role": "user", "content": [result]})
    return out


def expected(messages: list[dict[str, Any]]) -> str:
    """What the model says after reading back the first masked output (the first handle in the request)."""
    return f"digest:{digest_of(outputs(messages)[0])}"


def upstream_conversations(app: UpstreamApp) -> list[Any]:
    return [r.json() for r in app.requests if r.method == "POST" and r not in app.summaries]


@pytest.mark.parametrize("stream", [False, True])
def test_chat_completions_reads_back_a_masked_output(
    retrieving: tuple[UpstreamApp, str], start_proxy: ProxyFactory, stream: bool
) -> None:
    app, url = retrieving
    messages = chat_conversation()
    with (
        start_proxy(url, **WINDOW) as proxy_url,
        openai.OpenAI(base_url=proxy_url, api_key="sk-a", max_retries=0) as client,
    ):
        if stream:
            chunks = list(
                client.chat.completions.create(
                    model=MODEL,
                    messages=messages,
                    tools=[BASH],
                    stream=True,
                    stream_options={"include_usage": True},
                )
            )
            text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
            assert not any(c.choices and c.choices[0].delta.tool_calls for c in chunks)
            finishes = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
            assert finishes == ["stop"]
            usage = chunks[-1].usage
        else:
            reply = client.chat.completions.create(model=MODEL, messages=messages, tools=[BASH])
            text = reply.choices[0].message.content or ""
            assert reply.choices[0].message.tool_calls is None and reply.choices[0].finish_reason == "stop"
            usage = reply.usage
    assert text.startswith(LOOKING) and expected(messages) in text
    assert usage is not None and usage.prompt_tokens == 200  # both rounds' prompts
    first, second = upstream_conversations(app)
    assert first["tools"][-1]["function"]["name"] == TOOL_NAME
    assert second["messages"][-1]["content"] == outputs(messages)[0]  # the original, byte for byte


@pytest.mark.parametrize("stream", [False, True])
def test_the_responses_api_reads_back_a_masked_output(
    retrieving: tuple[UpstreamApp, str], start_proxy: ProxyFactory, stream: bool
) -> None:
    app, url = retrieving
    messages = chat_conversation()
    tools = [{"type": "function", "name": "bash", "parameters": {"type": "object"}}]
    items = responses_input(messages)
    with (
        start_proxy(url, **WINDOW) as proxy_url,
        openai.OpenAI(base_url=proxy_url, api_key="sk-a", max_retries=0) as client,
    ):
        if stream:
            events = list(client.responses.create(model=MODEL, input=items, tools=tools, stream=True))  # type: ignore[arg-type]
            text = "".join(e.delta for e in events if isinstance(e, ResponseTextDeltaEvent))
            assert not any(str(getattr(e, "type", "")).startswith("response.function_call") for e in events)
            completed = [e for e in events if isinstance(e, ResponseCompletedEvent)]
            assert len(completed) == 1
            reply = completed[0].response
            assert [getattr(e, "sequence_number", None) for e in events] == list(range(len(events)))
        else:
            reply = client.responses.create(model=MODEL, input=items, tools=tools)  # type: ignore[arg-type]
            text = reply.output_text
    assert text.startswith(LOOKING) and expected(messages) in text
    assert all(item.type == "message" for item in reply.output)
    assert reply.usage is not None and reply.usage.input_tokens == 200
    first, second = upstream_conversations(app)
    assert first["tools"][-1]["name"] == TOOL_NAME
    assert second["input"][-1]["output"] == outputs(messages)[0]


@pytest.mark.parametrize("stream", [False, True])
def test_anthropic_messages_reads_back_a_masked_output(
    retrieving: tuple[UpstreamApp, str], start_proxy: ProxyFactory, stream: bool
) -> None:
    app, url = retrieving
    messages = chat_conversation()
    tools: list[Any] = [{"name": "bash", "description": "Run it.", "input_schema": {"type": "object"}}]
    history: list[Any] = anthropic_messages(messages)
    tool = {"compaction": {"retrieval": "tool"}}  # as `auto` does: offered in every format with the tool's shape
    with start_proxy(url, **WINDOW, **tool) as proxy_url:
        client = anthropic.Anthropic(base_url=proxy_url.removesuffix("/v1"), api_key="sk-ant-a", max_retries=0)
        reply: Message
        if stream:
            with client.messages.stream(model=MODEL, max_tokens=1000, messages=history, tools=tools) as events:
                reply = events.get_final_message()
        else:
            reply = client.messages.create(model=MODEL, max_tokens=1000, messages=history, tools=tools)
    assert [block.type for block in reply.content] == ["text", "text"]
    text = "".join(block.text for block in reply.content if block.type == "text")
    assert text.startswith(LOOKING) and expected(messages) in text
    assert reply.stop_reason == "end_turn"
    assert reply.usage.input_tokens == 200 and reply.usage.output_tokens == 20
    first, second = upstream_conversations(app)
    assert first["tools"][-1]["name"] == TOOL_NAME
    assert second["messages"][-1]["content"][0]["content"] == outputs(messages)[0]


def tools_sent(app: UpstreamApp) -> list[bytes]:
    return [orjson.dumps(r.json().get("tools")) for r in app.chat_requests()]


def test_the_tool_comes_with_the_compaction_and_stays_byte_for_byte(
    upstream: tuple[UpstreamApp, str], start_proxy: ProxyFactory
) -> None:
    app, url = upstream
    headers = {"x-inflight-session": "s1", "authorization": "Bearer sk-a"}
    with start_proxy(url, **WINDOW) as proxy_url:
        bodies = [{"model": MODEL, "messages": chat_conversation(turns), "tools": [BASH]} for turns in (3, 12, 13, 14)]
        raws = [orjson.dumps(body) for body in bodies]
        for raw in raws:
            answer = httpx.post(f"{proxy_url}/chat/completions", content=raw, headers=headers, timeout=30)
            assert answer.status_code == 200
    requests = app.chat_requests()
    assert requests[0].body == raws[0]  # never compacted: the client's bytes, and no tool
    tools = tools_sent(app)
    assert TOOL_NAME.encode() not in tools[0]
    assert TOOL_NAME.encode() in tools[1] and tools[1] == tools[2] == tools[3]
    assert b"inflight:" in requests[1].body


def test_a_handle_of_another_key_is_unavailable(retrieving: tuple[UpstreamApp, str], start_proxy: ProxyFactory) -> None:
    app, url = retrieving
    assert app.retriever is not None
    ours, theirs = chat_conversation(tag="A "), chat_conversation(tag="B ")
    with start_proxy(url, **WINDOW) as proxy_url:
        with openai.OpenAI(base_url=proxy_url, api_key="sk-a", max_retries=0) as client:
            reply = client.chat.completions.create(model=MODEL, messages=ours, tools=[BASH])
            assert expected(ours) in (reply.choices[0].message.content or "")
        handle = str(upstream_conversations(app)[-1]["messages"][-2]["tool_calls"][0]["function"]["arguments"])
        app.retriever.handle = orjson.loads(handle)["handle"]
        with openai.OpenAI(base_url=proxy_url, api_key="sk-b", max_retries=0) as client:
            reply = client.chat.completions.create(model=MODEL, messages=theirs, tools=[BASH])
        metrics = scrape(proxy_url.removesuffix("/v1"))
    assert metrics.get("inflight_retrievals_total", outcome="answered") == 1
    assert metrics.get("inflight_retrievals_total", outcome="unavailable") == 1
    said = reply.choices[0].message.content or ""
    assert "seen:[inflight_retrieve: unavailable" in said
    assert app.retriever.received[-1].startswith("[inflight_retrieve: unavailable: no original is kept for inflight:")


def test_shadow_mode_never_adds_the_tool(upstream: tuple[UpstreamApp, str], start_proxy: ProxyFactory) -> None:
    app, url = upstream
    raw = orjson.dumps({"model": MODEL, "messages": chat_conversation(), "tools": [BASH]})
    with start_proxy(url, **WINDOW, compaction={"mode": "shadow"}) as proxy_url:
        answer = httpx.post(f"{proxy_url}/chat/completions", content=raw, timeout=30)
    assert answer.status_code == 200 and "mask" in answer.headers["x-inflight-shadow-actions"]
    assert app.chat_requests()[-1].body == raw  # the client's bytes: no tool, no handle


def test_a_client_can_turn_it_off_and_then_nothing_names_a_handle(
    upstream: tuple[UpstreamApp, str], start_proxy: ProxyFactory
) -> None:
    app, url = upstream
    body = {"model": MODEL, "messages": chat_conversation(), "tools": [BASH]}
    with start_proxy(url, **WINDOW) as proxy_url:
        answer = httpx.post(f"{proxy_url}/chat/completions", json=body, headers={"x-inflight-retrieval": "off"})
    assert answer.status_code == 200 and "mask" in answer.headers["x-inflight-actions"]
    sent = app.chat_requests()[-1].body
    assert b"inflight:" not in sent and TOOL_NAME.encode() not in sent


@pytest.mark.parametrize("stream", [False, True])
def test_the_archive_says_what_was_read_back(
    retrieving: tuple[UpstreamApp, str], start_proxy: ProxyFactory, stream: bool
) -> None:
    app, url = retrieving
    messages = chat_conversation()
    with start_proxy(url, **WINDOW, archive={"enabled": True}) as proxy_url:
        body = {"model": MODEL, "messages": messages, "tools": [BASH], "stream": stream}
        answer = httpx.post(f"{proxy_url}/chat/completions", json=body, timeout=30)
        assert answer.status_code == 200 and expected(messages) in answer.text
        listed = archived(proxy_url, "/inflight/conversations", until=lambda j: j["conversations"])
        (conversation,) = listed["conversations"]
        view = archived(proxy_url, f"/inflight/conversations/{conversation['id']}", until=lambda j: j["turns"])
    handle = orjson.loads(upstream_conversations(app)[-1]["messages"][-2]["tool_calls"][0]["function"]["arguments"])
    assert view["turns"][0]["retrieved"] == [handle["handle"]]


def test_an_answer_that_also_calls_the_clients_tool_goes_to_it_without_ours(
    upstream: tuple[UpstreamApp, str], start_proxy: ProxyFactory
) -> None:
    app, url = upstream
    ours = {"id": "call_r", "type": "function", "function": {"name": TOOL_NAME, "arguments": '{"handle": "x"}'}}
    theirs = {"id": "call_b", "type": "function", "function": {"name": "bash", "arguments": '{"n": 1}'}}
    answer = orjson.loads(chat(MODEL, "Two things.", None))
    answer["choices"][0]["message"]["tool_calls"] = [ours, theirs]
    answer["choices"][0]["finish_reason"] = "tool_calls"
    app.script.append(Scripted(body=answer))
    with (
        start_proxy(url, **WINDOW) as proxy_url,
        openai.OpenAI(base_url=proxy_url, api_key="sk-a", max_retries=0) as client,
    ):
        reply = client.chat.completions.create(model=MODEL, messages=chat_conversation(), tools=[BASH])
    calls = reply.choices[0].message.tool_calls or []
    assert [call.id for call in calls] == ["call_b"] and reply.choices[0].finish_reason == "tool_calls"
    assert len(app.chat_requests()) == 1  # nothing answered in the client's place: its tool goes first


def test_a_client_with_its_own_inflight_retrieve_keeps_it_and_gets_its_calls(
    retrieving: tuple[UpstreamApp, str], start_proxy: ProxyFactory
) -> None:
    """Another inflight in front (a team proxy behind a developer's own) offers a tool of our name: ours is left out,
    so the upstream sees one tool of that name, and the model's call to it reaches the client unanswered."""
    app, url = retrieving
    app.retriever = RetrievingModel()
    app.retriever.handle = "inflight:00000000000000aa"  # the one in front named it: not ours to read
    theirs: Any = {"type": "function", "function": {"name": TOOL_NAME, "parameters": {"type": "object"}}}
    with (
        start_proxy(url, **WINDOW) as proxy_url,
        openai.OpenAI(base_url=proxy_url, api_key="sk-a", max_retries=0) as client,
    ):
        reply = client.chat.completions.create(model=MODEL, messages=chat_conversation(), tools=[BASH, theirs])
    (sent,) = upstream_conversations(app)  # no continuation: nothing was answered in the client's place
    assert [tool["function"]["name"] for tool in sent["tools"]] == ["bash", TOOL_NAME]
    assert sent["tools"][-1] == theirs and b"inflight:" not in orjson.dumps(sent["messages"])
    calls = reply.choices[0].message.tool_calls or []
    names = [call.model_dump()["function"]["name"] for call in calls]
    assert names == [TOOL_NAME] and reply.choices[0].finish_reason == "tool_calls"


def test_past_max_calls_a_rounds_calls_are_answered_too_many_unread(
    upstream: tuple[UpstreamApp, str], start_proxy: ProxyFactory
) -> None:
    app, url = upstream
    answer = orjson.loads(chat(MODEL, "Reading many.", None))
    arguments = orjson.dumps({"handle": "inflight:00000000000000bb"}).decode()
    calls = [
        {"id": f"call_r{n}", "type": "function", "function": {"name": TOOL_NAME, "arguments": arguments}}
        for n in range(40)
    ]
    answer["choices"][0]["message"]["tool_calls"] = calls
    answer["choices"][0]["finish_reason"] = "tool_calls"
    app.script.extend([Scripted(body=answer), Scripted(body=orjson.loads(chat(MODEL, "Done.", None)))])
    with (
        start_proxy(url, **WINDOW, compaction={"retrieval": {"max_calls": 16}}) as proxy_url,
        openai.OpenAI(base_url=proxy_url, api_key="sk-a", max_retries=0) as client,
    ):
        reply = client.chat.completions.create(model=MODEL, messages=chat_conversation(), tools=[BASH])
    assert reply.choices[0].message.content == "Reading many.Done."
    results = [m["content"] for m in upstream_conversations(app)[-1]["messages"] if m["role"] == "tool"][-40:]
    too_many = "[inflight_retrieve: unavailable: too many calls in one answer]"
    assert [text == too_many for text in results] == [False] * 16 + [True] * 24


def test_by_default_it_is_offered_in_every_compacted_request_and_a_header_turns_it_off(
    upstream: tuple[UpstreamApp, str], start_proxy: ProxyFactory
) -> None:
    """`auto`: the tool rides a compacted Chat Completions request and an Anthropic one alike (added with the first
    compaction, which rewrites the prefix anyway); `x-inflight-retrieval: off` leaves it out of one request."""
    app, url = upstream
    tools: list[Any] = [{"name": "bash", "description": "Run it.", "input_schema": {"type": "object"}}]
    body = {"model": MODEL, "max_tokens": 1000, "messages": anthropic_messages(chat_conversation()), "tools": tools}
    with start_proxy(url, **WINDOW) as proxy_url:
        chat = httpx.post(
            f"{proxy_url}/chat/completions", json={"model": MODEL, "messages": chat_conversation(), "tools": [BASH]}
        )
        default = httpx.post(f"{proxy_url}/messages", json=body, headers={"x-inflight-session": "default"})
        # Another conversation: one compacted with handles replays them whatever a later header says
        off = httpx.post(
            f"{proxy_url}/messages", json=body, headers={"x-inflight-retrieval": "off", "x-inflight-session": "off"}
        )
    assert chat.status_code == default.status_code == off.status_code == 200
    assert all("mask" in r.headers["x-inflight-actions"] for r in (chat, default, off))
    assert TOOL_NAME.encode() in app.chat_requests()[-1].body
    offered, plain = (r.body for r in app.messages_requests()[-2:])
    assert TOOL_NAME.encode() in offered
    assert TOOL_NAME.encode() not in plain and b"inflight:" not in plain


def with_a_long_first_output() -> tuple[Any, dict[str, Any]]:
    """The conversation, its first tool output about 25,000 tokens; and that output's message."""
    messages = chat_conversation()
    first = next(m for m in messages if m["role"] == "tool")
    first["content"] = "\n".join(f"line {n}: {digest_of(str(n)) * 3}" for n in range(600))
    return messages, first


def test_what_is_read_back_is_clipped_to_the_room_left_in_the_window(start_proxy: ProxyFactory) -> None:
    app = UpstreamApp(windows={MODEL: 8000})  # refuses a continuation over the window, as OpenAI does
    app.retriever = RetrievingModel()
    messages, first = with_a_long_first_output()
    with (
        serve(app) as url,
        start_proxy(url + "/v1", **WINDOW) as proxy_url,
        openai.OpenAI(base_url=proxy_url, api_key="sk-a", max_retries=0) as client,
    ):
        reply = client.chat.completions.create(model=MODEL, messages=messages, tools=[BASH])
    (received,) = app.retriever.received
    assert expected(messages) not in (reply.choices[0].message.content or "")  # not the whole original: it is clipped
    assert f"digest:{digest_of(received)}" in (reply.choices[0].message.content or "")  # the continuation was answered
    kept = received.split("\n[inflight_retrieve: clipped to its first ")[0]
    assert first["content"].startswith(kept) and received.endswith(
        "to fit the room left in the context window (ask for `lines` or `grep`)]"
    )
    continuation = upstream_conversations(app)[-1]
    assert TokenCounter().count_request(continuation, "o200k_base").total <= 8000


@pytest.mark.parametrize("stream", [False, True])
def test_a_read_back_the_upstream_still_refuses_for_its_size_is_sent_once_more_unread(
    start_proxy: ProxyFactory, stream: bool
) -> None:
    """The upstream counts more than inflight does (its window here under the budget inflight works to): a
    continuation refused for its size goes once more with the call answered "no room left", and the client gets
    the model's answer to that, never an empty one."""
    app = UpstreamApp(windows={MODEL: 5000})
    app.retriever = RetrievingModel()
    messages, _ = with_a_long_first_output()
    with (
        serve(app) as url,
        start_proxy(url + "/v1", **WINDOW) as proxy_url,
        openai.OpenAI(base_url=proxy_url, api_key="sk-a", max_retries=0) as client,
    ):
        if stream:
            chunks = list(client.chat.completions.create(model=MODEL, messages=messages, tools=[BASH], stream=True))
            text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
            assert not any(c.choices and c.choices[0].delta.tool_calls for c in chunks)
        else:
            reply = client.chat.completions.create(model=MODEL, messages=messages, tools=[BASH])
            text = reply.choices[0].message.content or ""
            assert reply.choices[0].finish_reason == "stop" and reply.choices[0].message.tool_calls is None
    assert app.retriever.received[-1] == "[inflight_retrieve: unavailable: no room left]"
    assert text.startswith(LOOKING) and f"digest:{digest_of(app.retriever.received[-1])}" in text
    sent = upstream_conversations(app)
    assert [m["role"] for m in sent[-1]["messages"][-2:]] == ["assistant", "tool"]  # the last went with the call


CRLF_STREAM = (
    b"".join(
        b"data: " + orjson.dumps(chunk) + b"\r\n\r\n"
        for chunk in (
            {"id": "c", "object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {"role": "assistant"}}]},
            {"id": "c", "object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {"content": "Done."}}]},
            {
                "id": "c",
                "object": "chat.completion.chunk",
                "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
            },
        )
    )
    + b"data: [DONE]\r\n\r\n"
)


async def crlf_upstream(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """An upstream that sends its stream whole, with a length and CRLF line ends, as llama.cpp's server does."""
    if scope["type"] != "http":
        return
    while (await receive()).get("more_body"):
        pass
    headers = [(b"content-type", b"text/event-stream; charset=utf-8"), (b"content-length", b"%d" % len(CRLF_STREAM))]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": CRLF_STREAM})


def test_a_compacted_stream_the_model_called_no_tool_in_comes_as_it_came(start_proxy: ProxyFactory) -> None:
    """With the tool offered, a stream sent whole with its length and CRLF line ends, in which the model called
    nothing, reaches the client byte for byte (and no longer than its length said)."""
    body = {"model": MODEL, "messages": chat_conversation(), "tools": [BASH], "stream": True}
    with (
        serve(crlf_upstream) as url,
        start_proxy(url + "/v1", **WINDOW) as proxy_url,
        httpx.stream("POST", f"{proxy_url}/chat/completions", json=body, timeout=30) as response,
    ):
        received = b"".join(response.iter_raw())
        headers = response.headers
    assert "mask" in headers["x-inflight-actions"]  # compacted, so the tool was offered
    assert received == CRLF_STREAM
    assert "content-length" not in headers or int(headers["content-length"]) == len(received)


@pytest.mark.parametrize("stream", [False, True])
def test_the_gemini_api_reads_back_a_masked_output(
    retrieving: tuple[UpstreamApp, str], start_proxy: ProxyFactory, stream: bool
) -> None:
    app, url = retrieving
    contents = agent_contents(12)
    first_output = contents[2]["parts"][0]["functionResponse"]["response"]["output"]
    window = {"models": {GEMINI: {"context_window": 8000}}, "discover_context_window": False}
    with gemini_proxy(start_proxy, url, **window) as origin:
        answer = generate(origin, body_of(contents), stream=stream)
    assert answer.status_code == 200, answer.text
    if stream:
        chunks = [orjson.loads(line[6:]) for line in answer.text.splitlines() if line.startswith("data: ")]
        candidates = [chunk["candidates"][0] for chunk in chunks]
        assert [c.get("finishReason") for c in candidates].count("STOP") == 1
        assert candidates[-1].get("finishReason") == "STOP"
        parts = [part for c in candidates for part in c["content"]["parts"]]
        usage = chunks[-1]["usageMetadata"]
    else:
        reply = answer.json()
        parts = reply["candidates"][0]["content"]["parts"]
        usage = reply["usageMetadata"]
    assert not [part for part in parts if "functionCall" in part]
    text = "".join(part.get("text", "") for part in parts)
    assert text.startswith(LOOKING) and f"digest:{digest_of(first_output)}" in text
    assert usage["promptTokenCount"] == 200 and usage["candidatesTokenCount"] == 20  # both rounds
    first, second = (r.json() for r in app.gemini_requests())
    assert first["tools"][-1]["functionDeclarations"][0]["name"] == TOOL_NAME
    said, result = second["contents"][-2:]
    assert said["role"] == "model" and said["parts"][-1]["functionCall"]["name"] == TOOL_NAME
    assert result["parts"] == [{"functionResponse": {"name": TOOL_NAME, "response": {"output": first_output}}}]
