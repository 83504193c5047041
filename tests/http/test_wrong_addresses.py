"""A new user's wrong addresses and header values get an answer that says what to change, never a bare 404 or a
silent default: a base URL with `/v1` twice, the proxy's root, an upstream URL without `/v1`, a mistyped
`x-inflight-compaction`."""

from __future__ import annotations

import logging

import anthropic
import httpx
import pytest

from tests.compaction.test_compactor import agent_conversation
from tests.conftest import ProxyFactory
from tests.support.logs import log_lines
from tests.support.servers import serve
from tests.support.upstream import UpstreamApp

MESSAGES = [{"role": "user", "content": "Say hello."}]


def test_an_anthropic_base_url_ending_in_v1_is_told_to_drop_it(
    upstream: tuple[UpstreamApp, str], start_proxy: ProxyFactory
) -> None:
    """Anthropic's SDK adds `/v1` itself: `ANTHROPIC_BASE_URL=http://host:port/v1` asks for `/v1/v1/messages`,
    which the upstream would answer with a bare `404 no route`."""
    app, url = upstream
    with start_proxy(url) as proxy_url:
        client = anthropic.Anthropic(base_url=proxy_url, api_key="sk-ant-test", max_retries=0)
        with pytest.raises(anthropic.NotFoundError) as info:
            client.messages.create(model="claude-x", max_tokens=10, messages=MESSAGES)  # type: ignore[arg-type]
    message = str(info.value)
    assert "/v1 is in the path twice" in message and "ANTHROPIC_BASE_URL=http://HOST:PORT" in message
    assert not app.requests  # answered by the proxy, not forwarded


def test_the_root_names_the_apis_and_the_viewer(proxy: str) -> None:
    answer = httpx.get(proxy.removesuffix("/v1") + "/", timeout=10)
    assert answer.status_code == 404
    message = answer.json()["error"]["message"]
    assert "/v1/chat/completions" in message and "/v1/messages" in message and "/inflight/ui" in message


@pytest.mark.parametrize("value", ["of", "forced", "on", "active"])
def test_an_unknown_x_inflight_compaction_value_is_a_400_naming_the_header(
    upstream: tuple[UpstreamApp, str], proxy: str, value: str
) -> None:
    """A typo (`of` for `off`) must not pass silently for the configured mode."""
    answer = httpx.post(
        f"{proxy}/chat/completions",
        json={"model": "gpt-4o", "messages": MESSAGES},
        headers={"x-inflight-compaction": value},
        timeout=10,
    )
    assert answer.status_code == 400
    error = answer.json()["error"]
    assert error["param"] == "x-inflight-compaction" and f"got {value!r}" in error["message"]
    assert not upstream[0].requests
    for known in ("off", "OFF", "shadow", "force"):  # what a client may ask, in any case
        sent = httpx.post(
            f"{proxy}/chat/completions",
            json={"model": "gpt-4o", "messages": MESSAGES},
            headers={"x-inflight-compaction": known},
            timeout=10,
        )
        assert sent.status_code == 200, (known, sent.text)


def test_after_a_retry_the_window_header_is_the_one_the_refusal_named(start_proxy: ProxyFactory) -> None:
    app = UpstreamApp(windows={"local-model": 2000})
    with serve(app) as url, start_proxy(url + "/v1") as proxy_url:
        body = {"model": "local-model", "messages": agent_conversation(30, output_lines=5)}
        answer = httpx.post(f"{proxy_url}/chat/completions", json=body, timeout=30)
    assert answer.status_code == 200 and answer.headers["x-inflight-retried"] == "1"
    assert answer.headers["x-inflight-context-window"] == "2000"
    assert int(answer.headers["x-inflight-budget"]) < 2000


def test_an_upstream_url_without_v1_gets_a_hint_and_its_404_is_not_called_unreachable(
    upstream: tuple[UpstreamApp, str], start_proxy: ProxyFactory, caplog: pytest.LogCaptureFixture
) -> None:
    """`--upstream http://127.0.0.1:8080` for llama.cpp: the model list is at `/v1/models`, not `/models`."""
    caplog.set_level(logging.INFO, logger="inflight")
    bare = upstream[1].removesuffix("/v1")
    with start_proxy(bare) as proxy_url:
        answer = httpx.post(f"{proxy_url}/chat/completions", json={"model": "m", "messages": MESSAGES}, timeout=10)
    assert answer.status_code == 404  # the upstream's own answer, relayed
    [line] = log_lines(caplog, "window discovery failed")
    assert "answered GET /models with 404" in line and f"{bare} has no /v1" in line
    assert "UpstreamUnreachable" not in line
