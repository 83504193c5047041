"""The Chat Completions format against the seam's contract: read, write, refusals, usage, errors."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from inflight.formats import CHAT_COMPLETIONS, UsageReader

BODY: dict[str, Any] = {
    "model": "gpt-4o",
    "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}],
    "tools": [{"type": "function", "function": {"name": "bash", "parameters": {"type": "object"}}}],
    "max_completion_tokens": 900,
    "max_tokens": 700,
    "temperature": 0.2,
    "stream": True,
}


def test_a_conversation_reads_as_itself_with_its_output_limit() -> None:
    request = CHAT_COMPLETIONS.read(BODY)
    assert request is not None
    assert request.model == "gpt-4o" and request.messages is BODY["messages"]  # no copy
    assert request.view["tools"] == BODY["tools"]  # what the tool definitions cost is counted from the view
    assert request.output_limit == 900  # max_completion_tokens before the older max_tokens
    assert request.opaque == frozenset() and request.session is None


@pytest.mark.parametrize(
    "body",
    [
        {"messages": [{"role": "user", "content": "no model"}]},
        {"model": "m", "messages": "not a list"},
        {"model": "m", "messages": [{"role": "user"}, "a string"]},
        {"model": "m", "prompt": "a legacy completion"},
    ],
)
def test_what_is_no_conversation_reads_as_none(body: dict[str, Any]) -> None:
    assert CHAT_COMPLETIONS.read(body) is None


def test_writing_replaces_the_messages_and_keeps_every_other_field() -> None:
    request = CHAT_COMPLETIONS.read(BODY)
    assert request is not None
    compacted = [BODY["messages"][0], {"role": "user", "content": "[summary] Hi"}]
    written = orjson.loads(CHAT_COMPLETIONS.write(BODY, request, compacted))
    assert written == {**BODY, "messages": compacted}
    assert list(written) == list(BODY)  # in the client's order


def test_refusals_over_http_and_in_the_first_event() -> None:
    message = "This model's maximum context length is 8192 tokens. However, your messages resulted in 9000 tokens."
    body = orjson.dumps({"error": {"message": message, "type": "invalid_request_error", "code": None}})
    refusal = CHAT_COMPLETIONS.refusal(400, body, content_encoding=None)
    assert refusal is not None and (refusal.context_window, refusal.prompt_tokens) == (8192, 9000)
    assert CHAT_COMPLETIONS.refusal(400, b'{"error": {"message": "bad tool schema"}}', content_encoding=None) is None
    assert CHAT_COMPLETIONS.stream_refusal(b"data: " + body) is not None
    assert CHAT_COMPLETIONS.stream_refusal(b'data: {"choices": [{"delta": {"content": "hi"}}]}') is None


def test_usage_is_read_from_a_json_body_and_from_a_stream() -> None:
    assert CHAT_COMPLETIONS.prompt_tokens({"usage": {"prompt_tokens": 42}}) == 42
    assert CHAT_COMPLETIONS.prompt_tokens({"usage": {"prompt_tokens": True}}) is None
    assert CHAT_COMPLETIONS.prompt_tokens(["not", "an", "object"]) is None
    reader = UsageReader(CHAT_COMPLETIONS, event_stream=True, content_encoding=None)
    for chunk in (b'data: {"choices": []}\n\ndata: {"usage": {"prom', b'pt_tokens": 17}}\n\ndata: [DONE]\n\n'):
        reader.feed(chunk)
    assert reader.finish() == 17
    whole = UsageReader(CHAT_COMPLETIONS, event_stream=False, content_encoding=None)
    whole.feed(b'{"id": "x", "usage": {"prompt_tokens": 5}}')
    assert whole.finish() == 5


def test_errors_take_openais_shape() -> None:
    body = CHAT_COMPLETIONS.spec.errors.body("too big", error_type="invalid_request_error", param=None, code="too_big")
    assert orjson.loads(body) == {
        "error": {"message": "too big", "type": "invalid_request_error", "param": None, "code": "too_big"}
    }
