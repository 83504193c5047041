"""Every answer inflight writes itself gets the request line every request gets (method, path, status,
`error=<code>`), once; a wrong base URL also gets a warning with the client's hint, once per client and path
(Claude Code shows its user "There's an issue with the selected model", not the hint)."""

from __future__ import annotations

import logging

import httpx
import pytest

from inflight.http.routes import WARNED_KEPT, WrongAddresses
from tests.conftest import ProxyFactory
from tests.support.logs import log_lines
from tests.support.upstream import UpstreamApp

MESSAGES = [{"role": "user", "content": "Say hello."}]


@pytest.fixture
def caplog_info(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    caplog.set_level(logging.INFO, logger="inflight")
    return caplog


def warnings(caplog: pytest.LogCaptureFixture, fragment: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and fragment in r.getMessage()]


def test_an_own_404_405_and_400_are_each_logged_once(proxy: str, caplog_info: pytest.LogCaptureFixture) -> None:
    base = proxy.removesuffix("/v1")
    assert httpx.get(f"{base}/v2/models", timeout=10).status_code == 404
    assert httpx.post(f"{base}/healthz", timeout=10).status_code == 405
    # The archive's own 400 (its query), answered by a route with no endpoint of a wire format.
    assert httpx.get(f"{base}/inflight/conversations?limit=many", timeout=10).status_code == 400
    # A body that is not JSON: the conversation endpoint's 400, logged by the endpoint and by nothing else.
    bad = httpx.post(f"{proxy}/chat/completions", content=b"{not json", headers={"content-type": "application/json"})
    assert bad.status_code == 400

    [missing] = log_lines(caplog_info, "GET /v2/models 404")
    assert "error=not_found" in missing and "total_ms=" in missing
    [wrong] = log_lines(caplog_info, "POST /healthz 405")
    assert "error=method_not_allowed" in wrong
    [refused] = log_lines(caplog_info, "GET /inflight/conversations 400")
    assert "error=invalid_value" in refused
    assert len(log_lines(caplog_info, "POST /v1/chat/completions 400")) == 1
    assert not warnings(caplog_info, "")  # none of these is a wrong base URL


def test_a_refused_key_is_logged(
    upstream: tuple[UpstreamApp, str], start_proxy: ProxyFactory, caplog_info: pytest.LogCaptureFixture
) -> None:
    keys = {"access": {"keys": ["sk-proxy"]}, "upstream": {"api_key": "sk-upstream"}}
    with start_proxy(upstream[1], **keys) as proxy_url:
        answer = httpx.post(f"{proxy_url}/chat/completions", json={"model": "m", "messages": MESSAGES}, timeout=10)
        assert answer.status_code == 401
        assert httpx.get(f"{proxy_url.removesuffix('/v1')}/readyz", timeout=10).status_code == 200  # open
    [line] = log_lines(caplog_info, "POST /v1/chat/completions 401")
    assert "error=invalid_api_key" in line
    assert all(r.path == "/v1/models" for r in upstream[0].requests)  # the readiness probe's, no chat


def test_v1_twice_is_warned_once_per_client_and_path(
    upstream: tuple[UpstreamApp, str], proxy: str, caplog_info: pytest.LogCaptureFixture
) -> None:
    body = {"model": "gpt-4o", "messages": MESSAGES}
    first = httpx.post(f"{proxy}/v1/chat/completions", json=body, timeout=10)
    hint = first.json()["error"]["message"]
    assert first.status_code == 404 and "/v1 is in the path twice" in hint
    log_lines(caplog_info, "POST /v1/v1/chat/completions 404")
    [warning] = warnings(caplog_info, "/v1 is in the path twice")
    assert hint in warning and "127.0.0.1" in warning

    assert httpx.post(f"{proxy}/v1/chat/completions", json=body, timeout=10).status_code == 404
    lines = log_lines(caplog_info, "POST /v1/v1/chat/completions 404", count=2)
    assert len(lines) == 2 and all("error=not_found" in line for line in lines)  # each request has its line
    assert len(warnings(caplog_info, "/v1 is in the path twice")) == 1  # and the hint was said once

    assert httpx.post(f"{proxy}/v1/messages", json=body, timeout=10).status_code == 404  # another path: said
    log_lines(caplog_info, "POST /v1/v1/messages 404")
    assert len(warnings(caplog_info, "/v1 is in the path twice")) == 2
    assert not upstream[0].requests  # none of them forwarded


@pytest.mark.parametrize("path", ["/chat/completions", "/messages", "/responses"])
def test_a_missing_v1_is_told_and_warned(proxy: str, caplog_info: pytest.LogCaptureFixture, path: str) -> None:
    answer = httpx.post(proxy.removesuffix("/v1") + path, json={"model": "m", "messages": MESSAGES}, timeout=10)
    assert answer.status_code == 404
    hint = answer.json()["error"]["message"]
    assert "OPENAI_BASE_URL=http://HOST:PORT/v1" in hint and "ANTHROPIC_BASE_URL=http://HOST:PORT" in hint
    log_lines(caplog_info, f"POST {path} 404")
    [warning] = warnings(caplog_info, hint)
    assert "[address]" in warning


def test_a_gemini_path_under_v1_is_told_not_forwarded(
    upstream: tuple[UpstreamApp, str], proxy: str, caplog_info: pytest.LogCaptureFixture
) -> None:
    """A Gemini client given the proxy's address with /v1 asks for `/v1/v1beta/...`, which the OpenAI-format
    forwarding would send to the default upstream."""
    body = {"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}
    answer = httpx.post(f"{proxy}/v1beta/models/gemini-2.5-pro:generateContent", json=body, timeout=10)
    assert answer.status_code == 404
    hint = answer.json()["error"]["message"]
    assert "GOOGLE_GEMINI_BASE_URL=http://HOST:PORT" in hint
    log_lines(caplog_info, "POST /v1/v1beta/models/gemini-2.5-pro:generateContent 404")
    assert len(warnings(caplog_info, "GOOGLE_GEMINI_BASE_URL")) == 1
    assert not upstream[0].requests


def test_the_warnings_kept_are_bounded() -> None:
    wrong = WrongAddresses()
    for n in range(WARNED_KEPT * 2):
        wrong.refused({"type": "http", "method": "GET", "path": f"/v1/v1/{n}", "client": ("10.0.0.1", 1)}, "hint")
    assert len(wrong.warned) == WARNED_KEPT


def test_another_path_under_v1_v1beta_is_forwarded_as_before(upstream: tuple[UpstreamApp, str], proxy: str) -> None:
    """Google's OpenAI-compatible API under a base URL of `.../v1/v1beta/openai` is not a Gemini client's mistake:
    it goes to the default upstream as any `/v1/...` path does."""
    answer = httpx.post(f"{proxy}/v1beta/openai/embeddings", json={"input": "hi", "model": "m"}, timeout=10)
    assert [r.path for r in upstream[0].requests] == ["/v1/v1beta/openai/embeddings"]
    assert "GOOGLE_GEMINI_BASE_URL" not in answer.text
