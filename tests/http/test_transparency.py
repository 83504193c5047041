"""Transparency: with no compaction the proxy is invisible, byte for byte, for every endpoint."""

from __future__ import annotations

import gzip
import logging

import httpx
import openai
import orjson
import pytest
from openai.types.chat import ChatCompletionMessageParam, ChatCompletionToolParam

from tests.conftest import ProxyFactory
from tests.support.logs import log_lines
from tests.support.servers import free_port
from tests.support.upstream import UpstreamApp

TOOLS: list[ChatCompletionToolParam] = [
    {
        "type": "function",
        "function": {
            "name": "read_file",
            "description": "Read a file",
            "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
        },
    }
]
MESSAGES: list[ChatCompletionMessageParam] = [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "Say hi — ünïcode ✓"},
]


def test_odd_request_bytes_reach_upstream_unchanged(upstream: tuple[UpstreamApp, str], proxy: str) -> None:
    app, _ = upstream
    # Whitespace, key order, escapes and unknown fields a re-serializer would normalise away.
    body = (
        b'{ "model" :"gpt-4o-mini",\n "messages":[{"role":"user","content":"\\u00e9t\\u00e9 \\/ x"}],'
        b'\n "x_vendor": {"b":1,"a":2} }'
    )
    response = httpx.post(f"{proxy}/chat/completions", content=body, headers={"content-type": "application/json"})
    assert response.status_code == 200
    assert app.chat_requests()[-1].body == body
    assert response.content == bytes(app.chat_requests()[-1].sent)


def test_response_headers_relayed_without_duplicates(upstream: tuple[UpstreamApp, str], proxy: str) -> None:
    response = httpx.post(f"{proxy}/chat/completions", json={"model": "gpt-4o-mini", "messages": MESSAGES})
    assert response.headers["x-upstream-header"] == "kept"
    assert response.headers["content-length"] == str(len(response.content))
    assert response.headers.get_list("content-type") == ["application/json"]
    assert "server" not in response.headers and "date" not in response.headers


def test_openai_client_sees_no_difference(upstream: tuple[UpstreamApp, str], proxy: str) -> None:
    app, direct_url = upstream
    results = []
    for base_url in (direct_url, proxy):
        with openai.OpenAI(base_url=base_url, api_key="sk-test", max_retries=0) as client:
            raw = client.chat.completions.with_raw_response.create(model="gpt-4o-mini", messages=MESSAGES, tools=TOOLS)
            results.append((raw.parse().model_dump(), raw.http_response.content))
    direct, proxied = app.chat_requests()
    assert proxied.body == direct.body
    assert results[0] == results[1]
    assert results[1][1] == bytes(proxied.sent)


def test_streaming_events_and_bytes_identical(upstream: tuple[UpstreamApp, str], proxy: str) -> None:
    app, direct_url = upstream
    sequences = []
    for base_url in (direct_url, proxy):
        with openai.OpenAI(base_url=base_url, api_key="sk-test", max_retries=0) as client:
            stream = client.chat.completions.create(
                model="gpt-4o-mini",
                messages=MESSAGES,
                tools=TOOLS,
                stream=True,
                stream_options={"include_usage": True},
            )
            sequences.append([chunk.model_dump() for chunk in stream])
    assert sequences[0] == sequences[1]
    assert sequences[1][-1]["usage"]["prompt_tokens"] == 11
    assert any(c["choices"] and c["choices"][0]["delta"].get("tool_calls") for c in sequences[1])

    with httpx.stream(
        "POST", f"{proxy}/chat/completions", json={"model": "m", "messages": MESSAGES, "stream": True}
    ) as r:
        received = b"".join(r.iter_raw())
        assert r.headers["x-accel-buffering"] == "no"
        assert r.headers["content-type"].startswith("text/event-stream")
    assert received == bytes(app.chat_requests()[-1].sent)


async def test_async_client_streams_through_proxy(upstream: tuple[UpstreamApp, str], proxy: str) -> None:
    async with openai.AsyncOpenAI(base_url=proxy, api_key="sk-test", max_retries=0) as client:
        stream = await client.chat.completions.create(model="gpt-4o-mini", messages=MESSAGES, stream=True)
        chunks = [chunk async for chunk in stream]
        completion = await client.chat.completions.create(model="gpt-4o-mini", messages=MESSAGES)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text.startswith("tok0 tok1")
    assert completion.choices[0].message.content == "Hello from upstream."


def test_other_endpoints_pass_through(upstream: tuple[UpstreamApp, str], proxy: str) -> None:
    app, _ = upstream
    with openai.OpenAI(base_url=proxy, api_key="sk-test", max_retries=0) as client:
        assert [m.id for m in client.models.list()] == ["gpt-4o-mini"]
        embedding = client.embeddings.create(model="text-embedding-3-small", input="hello")
    assert embedding.data[0].embedding == [0.1, -0.2, 0.3]
    assert [r.path for r in app.requests] == ["/v1/models", "/v1/embeddings"]
    assert app.requests[0].body == b""
    assert "transfer-encoding" not in app.requests[0].headers


def test_query_string_and_methods_kept(upstream: tuple[UpstreamApp, str], proxy: str) -> None:
    app, _ = upstream
    response = httpx.request("DELETE", f"{proxy}/echo?a=1&b=%20x&a=2", content=b"xyz")
    assert response.json() == {"method": "DELETE", "query": "a=1&b=%20x&a=2", "length": 3}
    assert app.requests[-1].query == b"a=1&b=%20x&a=2"


def test_headers_forwarded_hop_by_hop_dropped(upstream: tuple[UpstreamApp, str], proxy: str) -> None:
    app, _ = upstream
    headers = {
        "authorization": "Bearer sk-client",
        "openai-organization": "org-1",
        "x-stainless-lang": "python",
        "traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
        "connection": "keep-alive, x-private-hop",
        "x-private-hop": "secret",
        "keep-alive": "timeout=5",
        "te": "trailers",
        "user-agent": "agent/1.0",
    }
    httpx.post(f"{proxy}/chat/completions", json={"model": "m", "messages": MESSAGES}, headers=headers)
    seen = app.requests[-1].headers
    for name in ("authorization", "openai-organization", "x-stainless-lang", "traceparent", "user-agent"):
        assert seen[name] == headers[name]
    for name in ("x-private-hop", "keep-alive", "te"):
        assert name not in seen
    assert seen["host"] == app_host(upstream)


def app_host(upstream: tuple[UpstreamApp, str]) -> str:
    return upstream[1].split("//")[1].split("/")[0]


def test_configured_api_key_replaces_client_authorization(
    upstream: tuple[UpstreamApp, str], start_proxy: ProxyFactory
) -> None:
    app, url = upstream
    with start_proxy(url, upstream={"api_key": "sk-proxy"}) as proxy_url:
        httpx.get(f"{proxy_url}/models", headers={"authorization": "Bearer sk-client"})
    assert app.requests[-1].headers["authorization"] == "Bearer sk-proxy"


@pytest.mark.parametrize("status", [400, 401, 404, 429, 500, 503])
def test_error_statuses_pass_through_with_body(upstream: tuple[UpstreamApp, str], proxy: str, status: int) -> None:
    app, _ = upstream
    response = httpx.post(
        f"{proxy}/chat/completions",
        json={"model": "m", "messages": MESSAGES},
        headers={"x-scenario": f"status-{status}"},
    )
    assert response.status_code == status
    assert response.content == bytes(app.requests[-1].sent)


def test_openai_client_raises_same_error_through_proxy(upstream: tuple[UpstreamApp, str], proxy: str) -> None:
    headers = {"x-scenario": "status-404"}
    with (
        openai.OpenAI(base_url=proxy, api_key="sk", max_retries=0, default_headers=headers) as c,
        pytest.raises(openai.NotFoundError) as info,
    ):
        c.chat.completions.create(model="m", messages=MESSAGES)
    assert info.value.body == {"message": "upstream says 404", "type": "test_error", "param": None, "code": None}


def test_gzip_request_body_parsed_and_forwarded_as_sent(upstream: tuple[UpstreamApp, str], proxy: str) -> None:
    app, _ = upstream
    compressed = gzip.compress(orjson.dumps({"model": "gpt-4o-mini", "messages": MESSAGES}))
    response = httpx.post(
        f"{proxy}/chat/completions",
        content=compressed,
        headers={"content-encoding": "gzip", "content-type": "application/json"},
    )
    assert response.status_code == 200
    assert app.requests[-1].body == compressed
    assert app.requests[-1].headers["content-encoding"] == "gzip"


def test_large_request_body(upstream: tuple[UpstreamApp, str], proxy: str) -> None:
    app, _ = upstream
    big = "x" * (4 * 1024 * 1024)
    body = orjson.dumps({"model": "gpt-4o-mini", "messages": [{"role": "user", "content": big}]})
    response = httpx.post(f"{proxy}/chat/completions", content=body, headers={"x-inflight-compaction": "off"})
    assert response.status_code == 200
    assert app.requests[-1].body == body
    upload = httpx.post(f"{proxy}/echo", content=big.encode())
    assert upload.json()["length"] == len(big)
    chunked = httpx.post(f"{proxy}/echo", content=iter([b"a" * 70000, b"b" * 5]))  # no Content-Length
    assert chunked.json()["length"] == 70005


@pytest.mark.parametrize(
    ("body", "encoding", "fragment"),
    [
        (b'{"model": "m", "messages": [', None, "not valid JSON"),
        (b"[1, 2]", None, "must be a JSON object"),
        (b"", None, "empty"),
        (b"not gzip at all", "gzip", "not valid gzip"),
        (b"{}", "br", "unsupported request Content-Encoding"),
    ],
)
def test_bad_bodies_get_openai_shaped_400(proxy: str, body: bytes, encoding: str | None, fragment: str) -> None:
    headers = {"content-type": "application/json"} | ({"content-encoding": encoding} if encoding else {})
    response = httpx.post(f"{proxy}/chat/completions", content=body, headers=headers)
    assert response.status_code == 400
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["type"] == "invalid_request_error"
    assert fragment in error["message"]


def test_upstream_down_gives_502_naming_host(start_proxy: ProxyFactory) -> None:
    dead = f"http://127.0.0.1:{free_port()}/v1"
    with start_proxy(dead) as proxy_url:
        response = httpx.post(f"{proxy_url}/chat/completions", json={"model": "m", "messages": MESSAGES})
        other = httpx.get(f"{proxy_url}/models")
    assert response.status_code == 502 and other.status_code == 502
    error = response.json()["error"]
    assert error["code"] == "upstream_unreachable"
    assert dead.split("//")[1].split("/")[0] in error["message"]


def test_upstream_timeout_gives_504(upstream: tuple[UpstreamApp, str], start_proxy: ProxyFactory) -> None:
    _, url = upstream
    with start_proxy(url, upstream={"read_timeout_s": 0.3}) as proxy_url:
        response = httpx.post(
            f"{proxy_url}/chat/completions", json={"model": "m", "messages": MESSAGES}, headers={"x-scenario": "slow"}
        )
    assert response.status_code == 504
    assert response.json()["error"]["code"] == "upstream_timeout"


def test_client_disconnect_mid_stream_closes_upstream(upstream: tuple[UpstreamApp, str], proxy: str) -> None:
    app, _ = upstream
    body = {"model": "m", "messages": MESSAGES, "stream": True}
    with httpx.stream("POST", f"{proxy}/chat/completions", json=body, headers={"x-scenario": "hang"}) as response:
        first = next(response.iter_raw())
        assert first.startswith(b"data: ")
    # The client has closed its connection; the upstream must see its own connection close promptly.
    assert app.requests[-1].disconnected.wait(timeout=5)


def test_healthz(proxy: str) -> None:
    response = httpx.get(proxy.removesuffix("/v1") + "/healthz")
    assert response.status_code == 200 and response.json() == {"status": "ok"}


def test_log_line_per_request_without_secrets(
    upstream: tuple[UpstreamApp, str], proxy: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="inflight")
    httpx.post(
        f"{proxy}/chat/completions",
        json={"model": "gpt-4o-mini", "messages": MESSAGES},
        headers={"authorization": "Bearer sk-secret-123"},
    )
    lines = log_lines(caplog, "POST /v1/chat/completions")
    assert len(lines) == 1
    assert "200" in lines[0] and "model=gpt-4o-mini" in lines[0] and "upstream_ms=" in lines[0]
    assert all("sk-secret" not in r.getMessage() for r in caplog.records)
