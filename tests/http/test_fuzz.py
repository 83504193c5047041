"""Generated request bodies against the running proxy: never a 5xx of ours, and our own 4xx in OpenAI's shape.

The upstream here answers anything with a 200 and a header of its own, so every response is either
visibly the upstream's or the proxy's. Bodies: random JSON, chat-shaped objects with wrong types and
odd messages (tool calls, content parts, surrogates, huge numbers), deep nesting, invalid UTF-8 and
plain bytes, for a model whose window is tiny (so most are compacted) and for one with a large window.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.servers import serve

UPSTREAM_MARK = "x-fuzz-upstream"


async def anything_goes(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """An upstream that reads whatever it is sent and answers 200."""
    if scope["type"] == "lifespan":
        while (await receive())["type"] != "lifespan.shutdown":
            await send({"type": "lifespan.startup.complete"})
        await send({"type": "lifespan.shutdown.complete"})
        return
    while (await receive()).get("more_body"):
        pass
    body = b'{"object":"chat.completion","choices":[],"usage":{"prompt_tokens":5}}'
    headers = [(b"content-type", b"application/json"), (UPSTREAM_MARK.encode(), b"1")]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": body})


@pytest.fixture(scope="module")
def fuzz_proxy() -> Iterator[httpx.Client]:
    from inflight.app import create_app
    from inflight.config import load_settings
    from inflight.http.server import uvicorn_options

    with serve(anything_goes) as upstream_url:
        overrides = {
            "upstream": {"base_url": upstream_url + "/v1"},
            "models": {"tiny": {"context_window": 300}},
            "compaction": {"reserve_tokens": 0},
            "discover_context_window": False,
        }
        settings_ = load_settings(None, overrides=overrides)
        options = {**uvicorn_options(settings_), "log_level": "warning"}
        with serve(create_app(settings_), **options) as proxy_url, httpx.Client(base_url=proxy_url) as client:
            yield client


scalars = (
    st.none()
    | st.booleans()
    | st.integers()  # unbounded: past 64 bits too
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=40)  # surrogates included
)
json_values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)
roles = st.sampled_from(["system", "developer", "user", "assistant", "tool", "function", "bogus"]) | json_values
content_parts = st.lists(
    st.fixed_dictionaries(
        {"type": st.sampled_from(["text", "image_url", "input_audio", "file", "refusal", "other"]) | json_values},
        optional={"text": st.text(max_size=300) | json_values, "image_url": json_values},
    ),
    max_size=3,
)
tool_calls = st.lists(
    st.fixed_dictionaries(
        {"id": st.text(max_size=6) | json_values, "type": st.just("function") | json_values},
        optional={
            "function": st.fixed_dictionaries(
                {"name": st.text(max_size=8) | json_values, "arguments": st.text(max_size=200) | json_values}
            )
            | json_values
        },
    ),
    max_size=3,
)
messages = st.fixed_dictionaries(
    {"role": roles},
    optional={
        "content": st.text(max_size=2000) | content_parts | json_values,
        "tool_calls": tool_calls | json_values,
        "tool_call_id": st.text(max_size=6) | json_values,
        "name": st.text(max_size=8) | json_values,
        "function_call": json_values,
    },
)
chat_bodies = st.fixed_dictionaries(
    {
        "model": st.sampled_from(["tiny", "gpt-4o-mini"]) | json_values,
        "messages": st.lists(messages | json_values, max_size=12) | json_values,
    },
    optional={
        "tools": json_values
        | st.lists(st.fixed_dictionaries({"type": st.just("function"), "function": json_values}), max_size=2),
        "max_tokens": st.integers() | json_values,
        "max_completion_tokens": st.integers() | json_values,
        "stream": json_values,
        "stream_options": json_values,
        "n": json_values,
    },
)


def encoded(document: Any, how: str) -> bytes:
    if how == "ascii":  # lone surrogates travel as \\ud800 escapes: JSON that orjson refuses
        return json.dumps(document, ensure_ascii=True).encode()
    return json.dumps(document, ensure_ascii=False).encode("utf-8", "surrogatepass")  # may be invalid UTF-8


def check(response: httpx.Response) -> None:
    if response.headers.get(UPSTREAM_MARK) == "1":
        return  # the upstream's answer, relayed
    assert response.status_code < 500, response.text
    assert 400 <= response.status_code < 500, (response.status_code, response.text)
    error = response.json()["error"]
    assert isinstance(error["message"], str) and isinstance(error["type"], str)
    assert set(error) == {"message", "type", "param", "code"}


FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@FUZZ
@given(body=chat_bodies, how=st.sampled_from(["ascii", "utf8"]))
def test_chat_shaped_bodies(fuzz_proxy: httpx.Client, body: dict[str, Any], how: str) -> None:
    check(fuzz_proxy.post("/v1/chat/completions", content=encoded(body, how)))


@FUZZ
@given(body=json_values, how=st.sampled_from(["ascii", "utf8"]))
def test_any_json(fuzz_proxy: httpx.Client, body: Any, how: str) -> None:
    check(fuzz_proxy.post("/v1/chat/completions", content=encoded(body, how)))


@FUZZ
@given(body=st.binary(max_size=300))
def test_any_bytes(fuzz_proxy: httpx.Client, body: bytes) -> None:
    check(fuzz_proxy.post("/v1/chat/completions", content=body))
    check(fuzz_proxy.post("/v1/chat/completions", content=body, headers={"content-encoding": "gzip"}))


@pytest.mark.parametrize("depth", [1_000, 100_000])
def test_deep_nesting(fuzz_proxy: httpx.Client, depth: int) -> None:
    nested = b"[" * depth + b"]" * depth
    check(fuzz_proxy.post("/v1/chat/completions", content=nested))
    in_a_message = b'{"model":"tiny","messages":[{"role":"user","content":' + nested + b"}]}"
    check(fuzz_proxy.post("/v1/chat/completions", content=in_a_message))
    in_a_tool = b'{"model":"tiny","messages":[],"tools":[{"type":"function","function":' + nested + b"}]}"
    check(fuzz_proxy.post("/v1/chat/completions", content=in_a_tool))


def test_huge_numbers(fuzz_proxy: httpx.Client) -> None:
    for number in (b"1" * 5000, b"1e999999", b"-0.0", b"9" * 30):
        body = b'{"model":"tiny","max_tokens":' + number + b',"messages":[{"role":"user","content":"hi"}]}'
        check(fuzz_proxy.post("/v1/chat/completions", content=body))
    check(fuzz_proxy.post("/v1/chat/completions", content=orjson.dumps({"model": "tiny", "messages": [1.5e308]})))
