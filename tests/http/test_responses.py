"""`POST /v1/responses` through the proxy with the official `openai` client: passed through byte for
byte when it fits, compacted with its reasoning intact when it does not, retried once on either
form of refusal, never compacted with `previous_response_id`; WebSocket upgrades refused cleanly."""

from __future__ import annotations

import socket
from typing import Any
from urllib.parse import urlsplit

import httpx
import openai
import orjson
import pytest
from openai.types.responses import ToolParam

from inflight.formats.compaction_items import PREFIX
from tests.conftest import ProxyFactory
from tests.support.params import as_input
from tests.support.responses import TASK_MARKER, TaskAgent, reasoning_item, sign
from tests.support.upstream import UpstreamApp

MODEL = "gpt-5.5"
TOOLS: list[ToolParam] = [
    {
        "type": "function",
        "name": "exec_command",
        "description": "Run a shell command.",
        "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}, "required": ["cmd"]},
        "strict": False,
    }
]


def agent_items(turns: int, *, lines: int = 60) -> list[dict[str, Any]]:
    """A Codex-like history: developer rules, the task, then `turns` of reasoning, a call and its output."""
    items: list[dict[str, Any]] = [
        {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "You are an agent."}]},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": f"Do the {TASK_MARKER}."}]},
    ]
    for step in range(1, turns + 1):
        output = "\n".join(f"step {step} log line {i}: checked module_{step}_{i}.py" for i in range(lines))
        items += [
            reasoning_item(step, step),
            {
                "type": "function_call",
                "id": f"fc_{step}",
                "call_id": f"call_{step}",
                "name": "exec_command",
                "arguments": orjson.dumps({"cmd": f"check step {step}"}).decode(),
            },
            {"type": "function_call_output", "call_id": f"call_{step}", "output": f"{output}\nSTEP {step} DONE"},
        ]
    return items


def reasoning_of(items: list[Any]) -> list[Any]:
    return [item for item in items if item.get("type") == "reasoning"]


def test_a_response_that_fits_passes_through_byte_for_byte(
    upstream: tuple[UpstreamApp, str], start_proxy: ProxyFactory
) -> None:
    app, direct_url = upstream
    app.responses.agent = TaskAgent(steps=3)
    results = []
    items = as_input(agent_items(2))
    with start_proxy(direct_url) as proxy_url:
        for base_url in (direct_url, proxy_url):
            with openai.OpenAI(base_url=base_url, api_key="sk-test", max_retries=0) as client:
                raw = client.responses.with_raw_response.create(
                    model=MODEL, input=as_input(agent_items(2)), tools=TOOLS
                )
                results.append((raw.http_response.content, raw.headers.get("x-inflight-actions")))
                stream = client.responses.create(model=MODEL, input=items, tools=TOOLS, stream=True)
                kinds = [event.type for event in stream]
                assert kinds[0] == "response.created" and kinds[-1] == "response.completed"
    direct, proxied = app.responses_requests()[:2], app.responses_requests()[2:]
    assert [r.body for r in proxied] == [r.body for r in direct]  # the client's exact bytes went up
    assert results[1] == (bytes(proxied[0].sent), "none")  # and the answer came back as the upstream sent it
    with start_proxy(direct_url) as proxy_url:
        body = {"model": MODEL, "input": agent_items(2), "tools": TOOLS, "stream": True}
        with httpx.stream("POST", f"{proxy_url}/responses", json=body) as response:
            received = b"".join(response.iter_raw())
    assert received == bytes(app.responses_requests()[-1].sent) and received.startswith(b"event: response.created")
    app.responses.agent = None  # a plain reply, through the client's parsing
    with start_proxy(direct_url) as proxy_url, openai.OpenAI(base_url=proxy_url, api_key="sk") as client:
        reply = client.responses.create(model=MODEL, input="hi", instructions="Be brief.", max_output_tokens=50)
    assert reply.output_text == "Hello from the Responses API." and reply.usage is not None


@pytest.mark.parametrize("stream", [False, True])
def test_a_long_conversation_is_compacted_with_every_reasoning_item_verbatim(
    upstream: tuple[UpstreamApp, str], start_proxy: ProxyFactory, stream: bool
) -> None:
    app, url = upstream
    app.responses.agent = TaskAgent(steps=40)
    app.windows[MODEL] = 9_000
    items = agent_items(20)
    models = {MODEL: {"context_window": 9_000}}
    with start_proxy(url, models=models) as proxy_url, httpx.Client(timeout=30) as client:
        body = {"model": MODEL, "input": items, "tools": TOOLS, "stream": stream, "store": False}
        response = client.post(f"{proxy_url}/responses", json=body)
    assert response.status_code == 200, response.text
    assert response.headers["x-inflight-actions"] != "none"
    sent = app.responses_requests()[-1].json()["input"]
    assert app.responses.rejected == []  # every reasoning item verified, every call with its output
    kept = reasoning_of(sent)
    assert kept and all(item in reasoning_of(items) for item in kept)  # each one exactly as the client sent it
    assert sent[:2] == items[:2]  # the developer rules and the task
    assert sent[-3:] == items[-3:]  # the latest turn, whole
    assert len(orjson.dumps(sent)) < len(orjson.dumps(items)) / 2
    if stream:
        assert response.text.startswith("event: response.created")
        assert "response.completed" in response.text
    else:
        assert response.json()["output"][-1]["type"] == "function_call"  # the agent goes on: step 21


@pytest.mark.parametrize("in_stream", [False, True])
def test_a_refusal_over_http_or_inside_the_stream_is_retried_once(
    upstream: tuple[UpstreamApp, str], start_proxy: ProxyFactory, in_stream: bool
) -> None:
    app, url = upstream
    app.responses.agent = TaskAgent(steps=40)
    app.responses.refusal_in_stream = in_stream
    app.windows[MODEL] = 12_000  # the proxy is not told: it finds out from the refusal
    items = agent_items(12)
    with start_proxy(url) as proxy_url, openai.OpenAI(base_url=proxy_url, api_key="sk", max_retries=0) as client:
        raw = client.responses.with_raw_response.create(model=MODEL, input=as_input(items), tools=TOOLS, stream=True)
        events = list(raw.parse())
    assert raw.headers["x-inflight-retried"] == "1"
    assert events[-1].type == "response.completed"  # no trace of the refused attempt reaches the client
    refused, retried = app.responses_requests()
    assert app.responses.refused == 1 and refused.json()["input"] == items
    assert all(item in reasoning_of(items) for item in reasoning_of(retried.json()["input"]))
    assert app.responses.rejected == []


def test_a_request_continuing_a_stored_response_is_counted_but_never_rewritten(
    upstream: tuple[UpstreamApp, str], start_proxy: ProxyFactory
) -> None:
    app, url = upstream
    app.windows[MODEL] = 2_000
    body = orjson.dumps({"model": MODEL, "previous_response_id": "resp_1", "input": agent_items(6)})
    with start_proxy(url, models={MODEL: {"context_window": 2_000}}) as proxy_url:
        response = httpx.post(f"{proxy_url}/responses", content=body, headers={"content-type": "application/json"})
    assert response.status_code == 400 and response.json()["error"]["code"] == "context_length_exceeded"
    assert [r.body for r in app.responses_requests()] == [body]  # as sent, once: no compaction, no retry
    assert int(response.headers["x-inflight-prompt-tokens"]) > 2_000


def test_our_own_errors_on_responses_take_openais_shape(proxy: str) -> None:
    response = httpx.post(f"{proxy}/responses", content=b"{not json", headers={"content-type": "application/json"})
    assert response.status_code == 400
    assert set(response.json()["error"]) == {"message", "type", "param", "code"}


def test_a_websocket_upgrade_is_refused_at_once_so_the_client_falls_back_to_http(proxy: str) -> None:
    parts = urlsplit(proxy)
    request = (
        f"GET /v1/responses HTTP/1.1\r\nHost: {parts.netloc}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
    )
    with socket.create_connection((parts.hostname or "", parts.port or 0), timeout=5) as sock:
        sock.sendall(request.encode())
        answer = b""
        while chunk := sock.recv(65536):  # the proxy answers and closes the connection
            answer += chunk
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 501 ")  # never a 101, never a 500: the client falls back to HTTP
    assert orjson.loads(body)["error"]["code"] == "websocket_unsupported"


def test_an_edited_reasoning_item_is_refused_by_the_fake_as_by_openai(upstream: tuple[UpstreamApp, str]) -> None:
    _, url = upstream
    edited = {**reasoning_item(1, 1), "encrypted_content": sign({"step": 1})[:-2] + "00"}
    response = httpx.post(f"{url}/responses", json={"model": MODEL, "input": [edited]})
    assert response.status_code == 400 and "could not be verified" in response.json()["error"]["message"]


def test_a_summary_for_a_responses_request_is_asked_through_the_responses_api(
    upstream: tuple[UpstreamApp, str], start_proxy: ProxyFactory
) -> None:
    """Codex's models answer only there: the upstream's own model summarizes through the API it speaks."""
    app, url = upstream
    app.responses.agent = TaskAgent(steps=60)
    settings = {"summarize": {"background_at": None}}  # made on the turn, so the test can see it used
    with start_proxy(url, models={MODEL: {"context_window": 9_000}}, compaction=settings) as proxy_url:
        body = {"model": MODEL, "input": agent_items(30), "tools": TOOLS, "store": False}
        response = httpx.post(f"{proxy_url}/responses", json=body, timeout=30)
    assert response.status_code == 200 and "summarize" in response.headers["x-inflight-actions"]
    assert app.summaries and {r.path for r in app.summaries} == {"/v1/responses"}  # in chunks: a small window
    asked = app.summaries[0].json()
    assert asked["instructions"].startswith("You write the handoff note") and asked["store"] is False
    sent = app.responses_requests()[-1].json()["input"]
    assert any("Summary number" in orjson.dumps(item).decode() for item in sent)
    assert app.responses.rejected == []


def compact(proxy_url: str, items: list[dict[str, Any]], *, key: str | None = None) -> httpx.Response:
    headers = {"authorization": f"Bearer {key}"} if key else {}
    body = {"model": MODEL, "input": items}
    return httpx.post(f"{proxy_url}/responses/compact", json=body, headers=headers, timeout=30)


def test_compact_is_answered_by_inflight_when_the_upstream_has_none_and_its_item_read_back(
    upstream: tuple[UpstreamApp, str], start_proxy: ProxyFactory
) -> None:
    app, url = upstream
    app.responses.agent = TaskAgent(steps=60)
    items = agent_items(20)
    with start_proxy(url, models={MODEL: {"context_window": 9_000}}) as proxy_url:
        response = compact(proxy_url, items)
        assert response.status_code == 200, response.text
        answer = response.json()
        assert answer["object"] == "response.compaction"
        output = answer["output"]
        ours = [item for item in output if item["type"] == "compaction"]
        assert len(ours) == 1 and ours[0]["encrypted_content"].startswith(PREFIX)
        assert "Summary" not in ours[0]["encrypted_content"]  # opaque to the client
        assert output[:2] == items[:2] and output[-3:] == items[-3:]  # the rules, the task, the latest turn
        follow_up = [*output, {"type": "message", "role": "user", "content": "Go on."}]
        body = {"model": MODEL, "input": follow_up, "tools": TOOLS}
        went_on = httpx.post(f"{proxy_url}/responses", json=body, timeout=30)
    assert went_on.status_code == 200 and went_on.headers["x-inflight-actions"] == "expanded"
    sent = app.responses_requests()[-1].json()["input"]
    assert PREFIX not in orjson.dumps(sent).decode()  # the upstream never sees our item...
    summary = [item for item in sent if item.get("role") == "user" and item not in items]
    assert len(summary) == 2 and "## Ledger" in orjson.dumps(summary[0]).decode()  # ...but what it holds
    assert sent[:2] == items[:2]  # the rules and the task stay
    assert went_on.json()["output"][-1]["type"] == "function_call"  # the agent still knows its task
    assert app.responses.rejected == []
    assert [r.path for r in app.requests if r.path.endswith("/compact")] == ["/v1/responses/compact"]


def test_a_second_compaction_keeps_what_the_first_summarized(
    upstream: tuple[UpstreamApp, str], start_proxy: ProxyFactory
) -> None:
    app, url = upstream
    items = agent_items(20)
    go_on = {"role": "user", "content": "Go on."}
    with start_proxy(url, models={MODEL: {"context_window": 9_000}}) as proxy_url:
        first = compact(proxy_url, items).json()["output"]
        body = {"model": MODEL, "input": [*first, go_on], "tools": TOOLS}
        assert httpx.post(f"{proxy_url}/responses", json=body, timeout=30).status_code == 200
        opened = app.responses_requests()[-1].json()["input"][2]  # the first summary, as the upstream got it
        more = [*first, *agent_items(40)[len(items) :]]
        second = compact(proxy_url, more).json()["output"]
        body = {"model": MODEL, "input": [*second, go_on], "tools": TOOLS}
        assert httpx.post(f"{proxy_url}/responses", json=body, timeout=30).status_code == 200
    assert len([item for item in second if item["type"] == "compaction"]) == 1  # both summaries in one item
    first_summary = opened["content"][0]["text"]
    assert "check step 3" in first_summary  # a command of the first span, in its ledger
    sent = app.responses_requests()[-1].json()["input"]
    assert first_summary in sent[2]["content"][0]["text"]  # kept whole by the second compaction
    assert PREFIX not in orjson.dumps(sent).decode()


def test_compact_relays_the_upstreams_answer_when_there_is_nothing_to_compact(
    upstream: tuple[UpstreamApp, str], start_proxy: ProxyFactory
) -> None:
    _, url = upstream
    with start_proxy(url) as proxy_url:
        stored = httpx.post(
            f"{proxy_url}/responses/compact",
            json={"model": MODEL, "input": agent_items(3), "previous_response_id": "resp_1"},
        )
        text = httpx.post(f"{proxy_url}/responses/compact", json={"model": MODEL, "input": "hello"})
    assert stored.status_code == 404 and text.status_code == 404  # not a compaction that compacted nothing


def test_an_edited_foreign_or_old_compaction_item_becomes_a_note_and_the_request_goes_on(
    upstream: tuple[UpstreamApp, str], start_proxy: ProxyFactory
) -> None:
    """Another key (a restart without `responses.item_key`, another proxy), another client's key, an item
    of an earlier inflight or an edit: the summary is not readable, and not leaked; the request still goes,
    with a note saying what is missing."""
    app, url = upstream
    items = agent_items(20)
    with start_proxy(url, models={MODEL: {"context_window": 9_000}}, responses={"item_key": "one"}) as one:
        item = next(i for i in compact(one, items, key="sk-alice").json()["output"] if i["type"] == "compaction")
    token = item["encrypted_content"]
    edited = {**item, "encrypted_content": token[:-6] + ("A" if token[-6] != "A" else "B") + token[-5:]}
    old = {**item, "encrypted_content": "inflight1." + token[len(PREFIX) :]}
    alice, bob = {"authorization": "Bearer sk-alice"}, {"authorization": "Bearer sk-bob"}
    with start_proxy(url, responses={"item_key": "two"}) as two, start_proxy(url, responses={"item_key": "one"}) as one:
        for proxy_url, bad, headers in ((two, item, alice), (one, edited, alice), (one, item, bob), (one, old, alice)):
            body = {"model": MODEL, "input": [items[1], bad]}
            response = httpx.post(f"{proxy_url}/responses", json=body, headers=headers)
            assert response.status_code == 200
            assert response.headers["x-inflight-actions"] == "expanded,item-unreadable"  # said, not only `expanded`
            sent = orjson.dumps(app.responses_requests()[-1].json()["input"]).decode()
            assert "could not be read" in sent and "Summary number" not in sent
            assert PREFIX not in sent and "inflight1." not in sent  # ours, never forwarded as the upstream's
        good = httpx.post(f"{one}/responses", json={"model": MODEL, "input": [items[1], item]}, headers=alice)
    assert good.status_code == 200 and good.headers["x-inflight-actions"] == "expanded"
    assert "Summary number" in orjson.dumps(app.responses_requests()[-1].json()["input"]).decode()


def test_an_item_compacted_for_one_client_key_is_a_note_when_compacted_again_with_another(
    upstream: tuple[UpstreamApp, str], start_proxy: ProxyFactory
) -> None:
    """Through `/v1/responses/compact` itself: the item goes back with its own key and opens, with another
    `Authorization` it does not, and the summary sealed again holds the note, not the first summary."""
    app, url = upstream
    items = agent_items(20)
    with start_proxy(url, models={MODEL: {"context_window": 9_000}}) as proxy_url:
        first = compact(proxy_url, items, key="sk-alice").json()["output"]
        more = [*first, *agent_items(40)[len(items) :]]
        compacted = {key: compact(proxy_url, more, key=key) for key in ("sk-alice", "sk-bob")}
        upstream_saw = [r.json()["input"] for r in app.requests if r.path == "/v1/responses/compact"]
    assert all(response.status_code == 200 for response in compacted.values())
    alice, bob = (orjson.dumps(sent).decode() for sent in upstream_saw[-2:])  # what each compaction opened
    assert "Summary number" in alice and "could not be read" not in alice
    assert "could not be read" in bob and "Summary number" not in bob


def test_an_upstream_that_compacts_answers_itself(upstream: tuple[UpstreamApp, str], proxy: str) -> None:
    app, _ = upstream
    app.compact_reply = {"id": "resp_1", "object": "response.compaction", "output": [], "usage": {}}
    response = compact(proxy, agent_items(2))
    assert response.status_code == 200 and response.json() == app.compact_reply
    assert "x-inflight-actions" not in response.headers


def with_threshold(items: list[dict[str, Any]], threshold: int) -> dict[str, Any]:
    management = [{"type": "compaction", "compact_threshold": threshold}]
    return {"model": MODEL, "input": items, "tools": TOOLS, "context_management": management}


def test_server_side_compaction_is_taken_over_for_an_upstream_that_refuses_it(
    upstream: tuple[UpstreamApp, str], start_proxy: ProxyFactory
) -> None:
    app, url = upstream
    app.responses.agent = TaskAgent(steps=60)
    app.responses.knows_context_management = False
    items = agent_items(12)
    with start_proxy(url) as proxy_url:
        first = httpx.post(f"{proxy_url}/responses", json=with_threshold(items, 4_000), timeout=30)
        second = httpx.post(f"{proxy_url}/responses", json=with_threshold(items, 4_000), timeout=30)
    assert first.status_code == 200 and second.status_code == 200
    refused, taken_over, then = app.responses_requests()
    assert "context_management" in refused.json() and app.responses.rejected[0].startswith("Unrecognized")
    for request in (taken_over, then):  # without the field, compacted past the client's threshold
        assert "context_management" not in request.json()
        assert len(request.body) < len(refused.body) / 2
    assert first.headers["x-inflight-actions"] != "none" and second.headers["x-inflight-actions"] != "none"
    assert app.responses.rejected == [app.responses.rejected[0]]  # refused once; reasoning and calls intact


def test_server_side_compaction_is_forwarded_to_an_upstream_that_serves_it_and_taken_over_when_told(
    upstream: tuple[UpstreamApp, str], start_proxy: ProxyFactory
) -> None:
    app, url = upstream
    body = orjson.dumps(with_threshold(agent_items(12), 4_000))
    headers = {"content-type": "application/json"}
    with start_proxy(url) as proxy_url:
        forwarded = httpx.post(f"{proxy_url}/responses", content=body, headers=headers, timeout=30)
    with start_proxy(url, responses={"context_management": "inflight"}) as proxy_url:
        taken = httpx.post(f"{proxy_url}/responses", content=body, headers=headers, timeout=30)
    assert forwarded.status_code == 200 and forwarded.headers["x-inflight-actions"] == "none"
    assert taken.status_code == 200 and taken.headers["x-inflight-actions"] != "none"
    as_forwarded, as_taken = app.responses_requests()
    assert as_forwarded.body == body  # the upstream compacts: not ours to touch
    assert "context_management" not in as_taken.json() and len(as_taken.body) < len(body) / 2


def test_an_unknown_key_in_a_clients_context_management_is_its_own_400(
    upstream: tuple[UpstreamApp, str], start_proxy: ProxyFactory
) -> None:
    """The upstream refuses a key inside the field, not the field: the client gets that 400 as written, and no
    client's valid `context_management` is taken over, its own next one included."""
    from tests.support.upstream import Scripted

    app, url = upstream
    bad = with_threshold(agent_items(12), 4_000)
    bad["context_management"][0]["bogus"] = 1
    unknown = {
        "error": {
            "message": "Unknown parameter: 'context_management[0].bogus'.",
            "type": "invalid_request_error",
            "param": "context_management[0].bogus",
            "code": "unknown_parameter",
        }
    }
    app.script.append(Scripted(status=400, body=unknown))
    good = orjson.dumps(with_threshold(agent_items(12), 4_000))
    headers = {"content-type": "application/json"}
    with start_proxy(url) as proxy_url:
        refused = httpx.post(f"{proxy_url}/responses", json=bad, headers={"authorization": "Bearer sk-a"}, timeout=30)
        answers = [
            httpx.post(f"{proxy_url}/responses", content=good, headers={**headers, "authorization": f"Bearer {k}"})
            for k in ("sk-b", "sk-a")
        ]
    assert refused.status_code == 400 and refused.json() == unknown and "x-inflight-retried" not in refused.headers
    assert all(a.status_code == 200 and a.headers["x-inflight-actions"] == "none" for a in answers)
    _, *forwarded = app.responses_requests()
    assert [request.body for request in forwarded] == [good, good]
