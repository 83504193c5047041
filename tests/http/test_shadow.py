"""Shadow mode (`compaction.mode: shadow`, `x-inflight-compaction: shadow`): the client's bytes go upstream and the
upstream's come back, unchanged, while what compaction would have sent is said and recorded."""

from __future__ import annotations

import logging
import threading
from typing import Any

import httpx
import orjson
import pytest

from inflight.compaction.conversation import problems
from tests.compaction.test_compactor import agent_conversation
from tests.conftest import ProxyFactory
from tests.fixtures.refusals import REFUSALS
from tests.http.test_archive import admin, archived
from tests.http.test_messages import EDITS, MODEL, SYSTEM, TOOLS, agent_messages, as_params, client_for
from tests.http.test_responses import MODEL as RESPONSES_MODEL
from tests.http.test_responses import agent_items
from tests.support.logs import log_lines
from tests.support.messages import MessagesTaskAgent
from tests.support.servers import serve
from tests.support.upstream import Scripted, UpstreamApp, sse
from tests.support.waiting import wait_until

# Budget 3000 (a quarter of the window is reserved for the reply).
WINDOW: dict[str, Any] = {"models": {"gpt-4o": {"context_window": 4000}}}
# By thresholds: these tests plan a compaction on turns that fit, which the cost schedule would leave for later.
SHADOW: dict[str, Any] = {**WINDOW, "compaction": {"mode": "shadow", "schedule": "thresholds"}}
# The upstream's answer as it wrote it: odd spacing and key order that a re-serialization would lose.
ANSWER = b'{ "id":"chatcmpl-1",  "object":"chat.completion","model":"gpt-4o","choices":[{"index":0,' + (
    b'"message":{"role":"assistant","content":"ok \\u00e9"},"finish_reason":"stop"}],"usage":{"prompt_tokens":9} }'
)


def body_of(turns: int, **extra: Any) -> bytes:
    """A request body as a client wrote it (indented: any re-serialization would show)."""
    payload = {"model": "gpt-4o", "messages": agent_conversation(turns, output_lines=5)} | extra
    return orjson.dumps(payload, option=orjson.OPT_INDENT_2)


def post(proxy_url: str, body: bytes, **headers: str) -> httpx.Response:
    headers = {"content-type": "application/json", **headers}
    return httpx.post(f"{proxy_url}/chat/completions", content=body, headers=headers, timeout=30)


def jobs(proxy_url: str) -> dict[str, int]:
    """The background summaries' counts (`/inflight/stats`)."""
    found: dict[str, int] = admin(proxy_url, "/inflight/stats").json()["summary_jobs"]
    return found


def test_shadow_mode_sends_the_clients_bytes_and_says_what_compaction_would_have_sent(
    upstream: tuple[UpstreamApp, str], start_proxy: ProxyFactory, caplog: pytest.LogCaptureFixture
) -> None:
    app, url = upstream
    caplog.set_level(logging.INFO, logger="inflight")
    body = body_of(120)
    app.script.append(Scripted(body=ANSWER))
    with start_proxy(url, **SHADOW) as proxy_url:
        response = post(proxy_url, body)
        line = log_lines(caplog, "shadow=")
        started = jobs(proxy_url)["started"]
    assert app.chat_requests()[-1].body == body  # byte for byte, though it is far over the budget
    assert response.status_code == 200 and response.content == ANSWER
    headers = response.headers
    assert headers["x-inflight-compaction"] == "shadow"
    assert headers["x-inflight-actions"] == "none"  # nothing was done to what was sent
    assert headers["x-inflight-tokens-after"] == headers["x-inflight-tokens-before"]
    planned = headers["x-inflight-shadow-actions"].split(",")
    assert "mask" in planned and "fallback" in planned  # the ledger stands in for a summary in the plan
    assert int(headers["x-inflight-shadow-tokens-after"]) <= 3000 < int(headers["x-inflight-tokens-before"])
    assert headers["x-inflight-shadow-compaction-id"]
    assert app.summaries == [] and started == 0  # no summarizer call, no job for one, unless shadow_summaries
    assert len(line) == 1
    fields = dict(part.split("=", 1) for part in line[0].split() if "=" in part)
    assert fields["shadow"] == headers["x-inflight-shadow-actions"]
    before, _, rest = fields["compacted"].partition("->")
    assert int(before) == int(headers["x-inflight-tokens-before"])
    assert int(rest.split("/")[0]) == int(headers["x-inflight-shadow-tokens-after"])
    assert "actions" not in fields
    assert "shadow_cached" in fields and "cached" not in fields  # the cache's figures are the plan's, said apart


def test_a_shadow_stream_is_relayed_as_the_upstream_sent_it(
    upstream: tuple[UpstreamApp, str], start_proxy: ProxyFactory
) -> None:
    app, url = upstream
    events = [
        sse({"id": "c", "choices": [{"index": 0, "delta": {"content": "a"}}]}),
        b": a comment the upstream sent\n\n",
        sse({"id": "c", "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}], "usage": None}),
        b"data: [DONE]\n\n",
    ]
    app.script.append(Scripted(events=events))
    body = body_of(120, stream=True)
    with start_proxy(url, **SHADOW) as proxy_url:
        response = post(proxy_url, body)
    assert app.chat_requests()[-1].body == body
    assert response.content == b"".join(events)
    assert "mask" in response.headers["x-inflight-shadow-actions"]


def test_the_shadow_header_shadows_one_request_of_an_active_proxy(
    upstream: tuple[UpstreamApp, str], start_proxy: ProxyFactory
) -> None:
    app, url = upstream
    body = body_of(120)
    with start_proxy(url, **WINDOW) as proxy_url:
        shadowed = post(proxy_url, body, **{"x-inflight-compaction": "shadow"})
        shadow_sent = app.chat_requests()[-1].body
        active = post(proxy_url, body)
    assert shadow_sent == body and "x-inflight-shadow-actions" in shadowed.headers
    assert shadowed.headers["x-inflight-actions"] == "none"
    # The control: the same request, not shadowed, is compacted.
    assert "x-inflight-shadow-actions" not in active.headers and active.headers["x-inflight-actions"] != "none"
    compacted = app.chat_requests()[-1].json()["messages"]
    assert compacted != orjson.loads(body)["messages"] and problems(compacted) == []


@pytest.mark.parametrize("mode", ["force", "SHADOW", "off"])
def test_under_a_shadow_config_a_client_can_ask_for_less_and_never_for_more(
    mode: str, upstream: tuple[UpstreamApp, str], start_proxy: ProxyFactory
) -> None:
    """The operator chose that no byte changes: `force` leaves it so; only `off` (nothing planned either) is less.
    A value it does not know (`active`, `on`) is a 400 (`tests/http/test_wrong_addresses.py`)."""
    app, url = upstream
    body = body_of(120)
    with start_proxy(url, **SHADOW) as proxy_url:
        response = post(proxy_url, body, **{"x-inflight-compaction": mode})
    assert app.chat_requests()[-1].body == body
    assert ("x-inflight-shadow-actions" in response.headers) is (mode != "off")


def test_a_compact_request_under_a_shadow_config_gets_the_upstreams_answer(
    upstream: tuple[UpstreamApp, str], start_proxy: ProxyFactory
) -> None:
    """`POST /v1/responses/compact` to an upstream that has none: no compaction of inflight's in its place."""
    app, url = upstream
    items = agent_items(20)
    with start_proxy(
        url, **{"models": {RESPONSES_MODEL: {"context_window": 9_000}}, "compaction": {"mode": "shadow"}}
    ) as proxy_url:
        response = httpx.post(
            f"{proxy_url}/responses/compact", json={"model": RESPONSES_MODEL, "input": items}, timeout=30
        )
        started = jobs(proxy_url)["started"]
    assert response.status_code == 404 and "response.compaction" not in response.text
    assert app.summaries == [] and started == 0


def test_a_request_that_fits_is_shadowed_with_nothing_to_say(
    upstream: tuple[UpstreamApp, str], start_proxy: ProxyFactory, caplog: pytest.LogCaptureFixture
) -> None:
    app, url = upstream
    caplog.set_level(logging.INFO, logger="inflight")
    body = body_of(2)
    with start_proxy(url, **SHADOW) as proxy_url:
        response = post(proxy_url, body)
        line = log_lines(caplog, "shadow=")
    assert app.chat_requests()[-1].body == body
    assert response.headers["x-inflight-compaction"] == "shadow"
    assert "x-inflight-shadow-actions" not in response.headers
    assert len(line) == 1 and " shadow=none" in line[0]


def test_a_context_refusal_in_shadow_mode_reaches_the_client_unretried(
    upstream: tuple[UpstreamApp, str], start_proxy: ProxyFactory
) -> None:
    app, url = upstream
    fixture = REFUSALS[0]
    refusal = orjson.dumps(fixture.body) if not isinstance(fixture.body, bytes) else fixture.body
    app.script.append(Scripted(status=fixture.status, body=refusal))
    body = body_of(120)
    with start_proxy(url, **SHADOW) as proxy_url:
        response = post(proxy_url, body)
    assert len(app.chat_requests()) == 1 and app.chat_requests()[0].body == body
    assert response.status_code == fixture.status and response.content == refusal
    assert "x-inflight-retried" not in response.headers


def test_shadow_summaries_are_made_in_the_background_and_planned_on_a_later_turn(
    upstream: tuple[UpstreamApp, str], start_proxy: ProxyFactory
) -> None:
    app, url = upstream
    settings = {**WINDOW, "compaction": {"mode": "shadow", "shadow_summaries": True}}
    with start_proxy(url, **settings) as proxy_url:
        first = post(proxy_url, body_of(120))
        wait_until(lambda: jobs(proxy_url)["landed"] == 1)
        second_body = body_of(121)
        second = post(proxy_url, second_body)
    assert app.chat_requests()[-1].body == second_body
    assert "fallback" in first.headers["x-inflight-shadow-actions"]  # the crossing turn never waits for it
    assert "summary-cached" in second.headers["x-inflight-shadow-actions"].split(",")


def test_shadow_turns_go_to_the_archive_and_the_metrics_as_shadow(
    upstream: tuple[UpstreamApp, str], start_proxy: ProxyFactory
) -> None:
    app, url = upstream
    settings = {**SHADOW, "archive": {"enabled": True}}
    bodies = [body_of(n) for n in (2, 120, 121)]
    with start_proxy(url, **settings) as proxy_url:
        responses = [post(proxy_url, body) for body in bodies]
        listed = archived(proxy_url, "/inflight/conversations", until=lambda j: j["conversations"])
        conversation_id = listed["conversations"][0]["id"]
        view = archived(proxy_url, f"/inflight/conversations/{conversation_id}", until=lambda j: len(j["turns"]) == 3)
        compaction_id = view["compactions"][0]["id"]
        entry = archived(proxy_url, f"/inflight/compactions/{compaction_id}")
        metrics = admin(proxy_url, "/metrics").text
    assert [r.body for r in app.chat_requests()] == bodies
    turns = view["turns"]
    assert [turn["shadow"] for turn in turns] == [True, True, True]
    # The prompt cache's figures are the plan's: turn 120's plan rewrites what turn 2 sent, turn 121's replays it.
    assert [turn["rewrite"] for turn in turns] == [False, True, False] and turns[2]["cached"] > turns[2]["sent"] / 2
    assert turns[1]["sent"] == int(responses[1].headers["x-inflight-shadow-tokens-after"]) < turns[1]["tokens"]
    assert turns[1]["actions"] == responses[1].headers["x-inflight-shadow-actions"]
    assert (
        view["compactions"][0]["shadow"] is True
        and compaction_id == responses[1].headers["x-inflight-shadow-compaction-id"]
    )
    assert entry["shadow"] is True and entry["dropped"]  # what would have been dropped, the client's own messages
    dropped = [item for item in entry["dropped"] if item["how"] in ("masked", "summarized")]
    assert dropped and dropped[0]["message"] == orjson.loads(bodies[1])["messages"][dropped[0]["index"]]
    assert 'inflight_shadow_compactions_total{action="mask"}' in metrics
    assert 'inflight_shadow_compaction_tokens_count{side="after"} 2.0' in metrics  # turns 120 and 121
    assert "inflight_prefix_rewrites_total 0.0" in metrics and "inflight_cached_share_count 0.0" in metrics
    assert "inflight_compactions_total{" not in metrics  # nothing was compacted


def test_a_messages_conversation_is_shadowed_through_the_anthropic_sdk(
    upstream: tuple[UpstreamApp, str], start_proxy: ProxyFactory
) -> None:
    app, direct_url = upstream
    app.messages.agent = MessagesTaskAgent(steps=40)
    kwargs: dict[str, Any] = {"model": MODEL, "max_tokens": 8_000, "system": SYSTEM, "tools": TOOLS}
    settings = {"models": {MODEL: {"context_window": 12_000}}, "compaction": {"mode": "shadow"}}
    with start_proxy(direct_url, **settings) as proxy_url:
        answers = []
        for base_url in (direct_url, proxy_url):
            with client_for(base_url) as client:
                raw = client.messages.with_raw_response.create(messages=as_params(agent_messages(20)), **kwargs)
                answers.append((raw.http_response.content, raw.headers))
    direct, proxied = app.messages_requests()
    assert proxied.body == direct.body  # the SDK's exact bytes went up
    assert answers[1][0] == bytes(proxied.sent)  # and the upstream's came back
    assert answers[1][1]["x-inflight-actions"] == "none"
    assert int(answers[1][1]["x-inflight-shadow-tokens-after"]) < int(answers[1][1]["x-inflight-tokens-before"])


def test_in_shadow_mode_the_requests_own_context_management_goes_as_sent(
    upstream: tuple[UpstreamApp, str], start_proxy: ProxyFactory
) -> None:
    """Even where the config says inflight takes the edits over (`messages.context_management: inflight`)."""
    app, url = upstream
    app.messages.agent = MessagesTaskAgent(steps=40)
    payload = {"model": MODEL, "max_tokens": 4096, "tools": TOOLS, "messages": agent_messages(8)}
    body = orjson.dumps(payload | {"context_management": {"edits": EDITS}}, option=orjson.OPT_INDENT_2)
    settings = {"messages": {"context_management": "inflight"}, "compaction": {"mode": "shadow"}}
    headers = {"content-type": "application/json", "anthropic-version": "2023-06-01", "x-api-key": "sk-ant-test"}
    headers["anthropic-beta"] = "context-management-2025-06-27"
    with start_proxy(url, **settings) as proxy_url:
        response = httpx.post(f"{proxy_url}/messages", content=body, headers=headers, timeout=30)
    assert response.status_code == 200, response.text
    assert app.messages_requests()[-1].body == body
    assert response.content == bytes(app.messages_requests()[-1].sent)


def test_shadow_mode_asks_nothing_of_a_summarizer_of_its_own(
    upstream: tuple[UpstreamApp, str], start_proxy: ProxyFactory
) -> None:
    """Not a summary, not the window of its model (`summarize.base_url`): the turn waits on nothing of it."""
    app, url = upstream
    summarizer = UpstreamApp()
    with serve(summarizer) as summarizer_url:
        compaction = {"mode": "shadow", "schedule": "thresholds", "summarize": {"base_url": summarizer_url + "/v1"}}
        with start_proxy(url, **{**WINDOW, "compaction": compaction}) as proxy_url:
            responses = [post(proxy_url, body_of(n)) for n in (120, 121)]
            started = jobs(proxy_url)["started"]
    assert "mask" in responses[0].headers["x-inflight-shadow-actions"]  # planned, then replayed
    assert responses[1].headers["x-inflight-shadow-actions"] == "summary-cached"
    assert summarizer.requests == [] and app.summaries == [] and started == 0


def test_a_shadow_turn_never_waits_for_a_summary_even_one_made_on_the_turn(
    upstream: tuple[UpstreamApp, str], start_proxy: ProxyFactory
) -> None:
    """`shadow_summaries` with `background_at: null` (summaries made on the crossing turn, in earnest): in shadow the
    summary is still made in the background, and the client's request goes while it is being made."""
    app, url = upstream
    held = app.summarizer_holds["## Task"] = threading.Event()  # every summary request holds the prompt's headings
    summarize = {"background_at": None}
    compaction = {"mode": "shadow", "shadow_summaries": True, "summarize": summarize}
    try:
        with start_proxy(url, **{**WINDOW, "compaction": compaction}) as proxy_url:
            response = post(proxy_url, body_of(120))  # answered while its summary is held
            running = jobs(proxy_url)["running"]
            held.set()
            wait_until(lambda: jobs(proxy_url)["landed"] == 1)
    finally:
        held.set()
    assert response.status_code == 200 and "fallback" in response.headers["x-inflight-shadow-actions"]
    assert running == 1 and len(app.summaries) >= 1


def test_a_shadow_plan_is_never_replayed_by_a_turn_sent_in_earnest(
    upstream: tuple[UpstreamApp, str], start_proxy: ProxyFactory
) -> None:
    """A shadow plan made without a summarizer (the ledger in its place) is kept apart: the next active turn of the
    same conversation compacts as if no shadow had been, with a summary."""
    app, url = upstream
    with start_proxy(url, **WINDOW) as proxy_url:
        shadowed = post(proxy_url, body_of(120), **{"x-inflight-compaction": "shadow"})
        active = post(proxy_url, body_of(121))
    assert "fallback" in shadowed.headers["x-inflight-shadow-actions"]
    assert active.headers["x-inflight-actions"].split(",")[-1] == "summarize" and len(app.summaries) > 0


def test_shadow_turns_calibrate_against_what_was_sent(
    upstream: tuple[UpstreamApp, str], start_proxy: ProxyFactory
) -> None:
    """The upstream's usage counts the client's request, not the plan: twice our count here, and the ratio learned
    says so (against the plan, a third of the size, it would be far above 2)."""
    app, url = upstream
    app.prompt_tokens_template = (0, 2.0)  # two of its tokens for each of ours of message text
    settings = {"models": {"local-llama": {"context_window": 4000}}, "compaction": {"mode": "shadow"}}
    with start_proxy(url, **settings) as proxy_url:  # a model whose tokenizer is not known: calibrated
        # Over the budget (3,000) but counted whole (up to 5,000: a bigger request is partly estimated from samples,
        # and calibrates nothing)
        responses = [post(proxy_url, body_of(n, model="local-llama")) for n in (30, 45, 55)]
        calibration = admin(proxy_url, "/inflight/stats").json()["calibration"]["local-llama"]
    assert all("x-inflight-shadow-actions" in r.headers for r in responses[1:])
    assert calibration["samples"] == 3 and 1.8 < calibration["ratio"] < 2.2, calibration


def test_in_shadow_mode_the_upstreams_count_is_never_asked(
    upstream: tuple[UpstreamApp, str], start_proxy: ProxyFactory
) -> None:
    """`messages.count_tokens: near` is a call on the client's key: shadow mode makes none (the control does)."""
    app, url = upstream
    app.messages.agent = MessagesTaskAgent(steps=40)
    body = {"model": MODEL, "max_tokens": 4096, "system": SYSTEM, "messages": agent_messages(6), "tools": TOOLS}
    messages = {"count_tokens": "near", "count_tokens_band": 1.0}  # every turn is near a threshold
    for mode in ("shadow", "active"):
        settings = {"models": {MODEL: {"context_window": 12_000}}, "messages": messages, "compaction": {"mode": mode}}
        with start_proxy(url, **settings) as proxy_url:
            response = httpx.post(f"{proxy_url}/messages", json=body, headers={"x-api-key": "sk-ant"}, timeout=30)
        assert response.status_code == 200
    counts = [r for r in app.requests if r.path == "/v1/messages/count_tokens"]
    assert len(counts) == 1  # the active proxy's
