"""Bodies inflight cannot read: never its own 5xx. Forwarded as sent when nothing needs them read (shadow mode,
`off`, compaction disabled), else refused with a 400 that says why."""

from __future__ import annotations

import gzip
from typing import Any

import httpx
import pytest

from tests.conftest import ProxyFactory
from tests.support.upstream import UpstreamApp

DEEP = b"[" * 300 + b"]" * 300  # deeper than orjson writes (254), though it reads it (1,024)
CONVERSATIONS = {
    "/chat/completions": b'{"model":"gpt-4o","messages":[{"role":"user","content":%s}]}',
    "/responses": b'{"model":"gpt-4o","input":[{"role":"user","content":%s}]}',
    "/messages": b'{"model":"claude-sonnet-4-5","max_tokens":64,"messages":[{"role":"user","content":%s}]}',
}
SHADOW: dict[str, Any] = {"compaction": {"mode": "shadow"}}
DISABLED: dict[str, Any] = {"compaction": {"enabled": False}}
PLAIN = b'{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}]}'
# What no reading of inflight's can undo or take: encodings it does not inflate, and bodies that are not objects.
UNREADABLE = {
    "zstd": (b"(\xb5/\xfd not really zstd", "zstd"),
    "br": (b"\x0b\x02\x80not really brotli", "br"),
    "gzip twice": (gzip.compress(gzip.compress(PLAIN)), "gzip, gzip"),
    "not JSON": (b"model=gpt-4o&messages=hi", ""),
    "empty": (b"", ""),
    "an array": (b'[{"model":"gpt-4o"}]', ""),
}


def post(url: str, body: bytes, encoding: str = "", **headers: str) -> httpx.Response:
    sent = {"content-type": "application/json", **headers}
    if encoding:
        sent["content-encoding"] = encoding
    return httpx.post(url, content=body, headers=sent, timeout=30)


@pytest.mark.parametrize("path", list(CONVERSATIONS))
@pytest.mark.parametrize(
    ("config", "headers"),
    [({}, {}), (SHADOW, {}), ({}, {"x-inflight-compaction": "off"}), (DISABLED, {})],
    ids=["active", "shadow", "off", "disabled"],
)
def test_json_nested_deeper_than_inflight_writes_goes_upstream_as_sent(
    path: str,
    config: dict[str, Any],
    headers: dict[str, str],
    upstream: tuple[UpstreamApp, str],
    start_proxy: ProxyFactory,
) -> None:
    app, url = upstream
    body = CONVERSATIONS[path] % DEEP
    with start_proxy(url, **config) as proxy_url:
        response = post(proxy_url + path, body, **headers)
    assert app.requests[-1].body == body  # valid JSON the upstream may accept: forwarded, not refused by us
    assert response.content == bytes(app.requests[-1].sent)  # and the upstream's answer, whatever it was
    assert "inflight internal error" not in response.text


@pytest.mark.parametrize("case", list(UNREADABLE))
@pytest.mark.parametrize(("config", "headers"), [(SHADOW, {}), ({}, {"x-inflight-compaction": "off"})])
def test_a_body_inflight_cannot_read_is_forwarded_when_nothing_needs_it_read(
    case: str,
    config: dict[str, Any],
    headers: dict[str, str],
    upstream: tuple[UpstreamApp, str],
    start_proxy: ProxyFactory,
) -> None:
    app, url = upstream
    body, encoding = UNREADABLE[case]
    with start_proxy(url, **config) as proxy_url:
        response = post(proxy_url + "/chat/completions", body, encoding, **headers)
    forwarded = app.requests[-1]
    assert forwarded.body == body and forwarded.headers.get("content-encoding", "") == encoding
    assert response.status_code == forwarded.status and response.content == bytes(forwarded.sent)


@pytest.mark.parametrize("case", list(UNREADABLE))
def test_a_body_compaction_must_read_and_cannot_is_a_400_that_says_why(
    case: str, upstream: tuple[UpstreamApp, str], start_proxy: ProxyFactory
) -> None:
    app, url = upstream
    body, encoding = UNREADABLE[case]
    with start_proxy(url) as proxy_url:
        response = post(proxy_url + "/chat/completions", body, encoding)
    assert response.status_code == 400 and app.requests == []
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error" and set(error) == {"message", "type", "param", "code"}
    said = {"zstd": "zstd", "br": "br", "gzip twice": "gzip, gzip", "not JSON": "not valid JSON"}
    said |= {"empty": "empty", "an array": "JSON object"}
    assert said[case] in error["message"]


@pytest.mark.parametrize(("config", "headers"), [(SHADOW, {}), ({}, {"x-inflight-compaction": "shadow"})])
def test_a_shadow_turn_never_asks_the_upstream_anything_with_the_clients_key(
    config: dict[str, Any], headers: dict[str, str], upstream: tuple[UpstreamApp, str], start_proxy: ProxyFactory
) -> None:
    """A model missing from `models:` is not looked up in the upstream's model list for a shadow turn: the only
    call with the client's key is its own request."""
    app, url = upstream
    with start_proxy(url, **config) as proxy_url:
        shadowed = post(proxy_url + "/chat/completions", PLAIN, authorization="Bearer sk-client", **headers)
        shadow_calls = [r.path for r in app.requests]
        active = post(proxy_url + "/chat/completions", PLAIN, authorization="Bearer sk-client")
    assert shadowed.status_code == 200 and shadow_calls == ["/v1/chat/completions"]
    assert shadowed.headers["x-inflight-compaction"] == "shadow"
    if not config:  # the control: the same request, compacted, looks its window up
        assert active.status_code == 200
        assert [r.path for r in app.requests][1:] == ["/v1/models", "/v1/chat/completions"]
