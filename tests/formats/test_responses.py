"""The Responses API format against the seam's contract: items read as messages and written back."""

from __future__ import annotations

from typing import Any

import orjson

from inflight.formats import RESPONSES
from tests.support.responses import sign

REASONING: dict[str, Any] = {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": sign({"n": 1})}
CALL: dict[str, Any] = {"type": "function_call", "call_id": "c1", "name": "exec_command", "arguments": '{"cmd": "ls"}'}
OUTPUT: dict[str, Any] = {"type": "function_call_output", "call_id": "c1", "output": "a.py\nb.py"}
CUSTOM: dict[str, Any] = {"type": "custom_tool_call", "call_id": "c2", "name": "exec", "input": "text(1)"}
CUSTOM_OUTPUT: dict[str, Any] = {
    "type": "custom_tool_call_output",
    "call_id": "c2",
    "output": [{"type": "input_text", "text": "1"}],
}
BODY: dict[str, Any] = {
    "model": "gpt-5.5",
    "instructions": "Be brief.",
    "input": [
        {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "Rules."}]},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Fix the parser."}]},
        REASONING,
        CALL,
        CUSTOM,
        OUTPUT,
        CUSTOM_OUTPUT,
        {"type": "compaction", "id": "cmp_1", "encrypted_content": "opaque"},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Done."}]},
    ],
    "tools": [{"type": "function", "name": "exec_command", "parameters": {"type": "object"}}, {"type": "web_search"}],
    "max_output_tokens": 500,
    "prompt_cache_key": "thread-1",
    "store": False,
}


def test_items_read_as_messages_with_a_turns_outputs_together_and_opaque() -> None:
    request = RESPONSES.read(BODY)
    assert request is not None
    roles = [m["role"] for m in request.messages]
    assert roles == ["system", "developer", "user", "assistant", "tool", "tool", "user", "assistant"]
    turn = request.messages[3]  # the reasoning and both calls: one message, kept or dropped whole
    assert [c["id"] for c in turn["tool_calls"]] == ["c1", "c2"]
    assert turn["tool_calls"][1]["function"] == {"name": "exec", "arguments": "text(1)"}
    assert REASONING["encrypted_content"] in turn["reasoning_content"]
    assert request.opaque == frozenset({3, 6, 7})  # the model's outputs and the compaction item
    assert request.origins == [None, (0,), (1,), (2, 3, 4), (5,), (6,), (7,), (8,)]
    assert request.output_limit == 500 and request.session == "thread-1" and request.compactable
    assert [t["function"]["name"] for t in request.view["tools"]] == ["exec_command", "web_search"]


def test_untouched_messages_go_back_as_their_own_items() -> None:
    request = RESPONSES.read(BODY)
    assert request is not None
    written = orjson.loads(RESPONSES.write(BODY, request, list(request.messages)))
    assert written == BODY


def test_a_masked_result_keeps_its_item_and_form_and_a_summary_is_a_user_message() -> None:
    request = RESPONSES.read(BODY)
    assert request is not None
    messages = request.messages
    summary = {"role": "user", "content": "[summary] the parser was fixed"}
    masked = [
        {**messages[4], "content": "[output masked]"},
        {**messages[5], "content": [{"type": "text", "text": "-"}]},
    ]
    compacted = [messages[0], messages[1], messages[2], summary, messages[3], *masked, messages[7]]
    written = orjson.loads(RESPONSES.write(BODY, request, compacted))
    items = written["input"]
    assert items[2] == {
        "type": "message",
        "role": "user",
        "content": [{"type": "input_text", "text": summary["content"]}],
    }
    assert items[3:6] == [REASONING, CALL, CUSTOM]  # byte for byte: the reasoning is never edited
    assert items[6] == {**OUTPUT, "output": "[output masked]"}
    assert items[7] == {**CUSTOM_OUTPUT, "output": [{"type": "input_text", "text": "-"}]}  # parts stay parts
    assert items[8] == BODY["input"][8]
    assert written["instructions"] == "Be brief." and "Be brief." not in orjson.dumps(items).decode()


def test_a_string_input_and_a_previous_response() -> None:
    request = RESPONSES.read({"model": "m", "input": "hello", "previous_response_id": "resp_1"})
    assert request is not None and request.messages == [{"role": "user", "content": "hello"}]
    assert not request.compactable  # the history lives upstream: counted, never rewritten
    assert RESPONSES.read({"model": "m"}) is None and RESPONSES.read({"model": "m", "input": [1]}) is None


def test_refusals_usage_and_pending_events() -> None:
    error = {"message": "Your input exceeds the context window of this model.", "code": "context_length_exceeded"}
    assert RESPONSES.refusal(400, orjson.dumps({"error": error}), content_encoding=None) is not None
    failed = {"type": "response.failed", "response": {"status": "failed", "error": error}}
    created = {"type": "response.created", "response": {"status": "in_progress"}}
    assert RESPONSES.stream_pending(b"event: response.created\ndata: " + orjson.dumps(created))
    assert not RESPONSES.stream_pending(b"event: response.failed\ndata: " + orjson.dumps(failed))
    assert RESPONSES.stream_refusal(b"event: response.failed\ndata: " + orjson.dumps(failed)) is not None
    delta = {"type": "response.output_text.delta", "delta": "context window"}
    assert RESPONSES.stream_refusal(b"data: " + orjson.dumps(delta)) is None
    assert RESPONSES.prompt_tokens({"type": "response.completed", "response": {"usage": {"input_tokens": 7}}}) == 7
    assert RESPONSES.prompt_tokens({"usage": {"input_tokens": 9}}) == 9


def test_a_masked_output_is_written_over_its_own_item_when_call_ids_repeat() -> None:
    def turn(n: int) -> list[dict[str, Any]]:
        call = {"type": "function_call", "call_id": "call_1", "name": "run", "arguments": f'{{"n": {n}}}'}
        return [call, {"type": "function_call_output", "id": f"o{n}", "call_id": "call_1", "output": f"out {n}"}]

    body = {"model": "m", "input": [{"role": "user", "content": "go"}, *turn(1), *turn(2)]}
    request = RESPONSES.read(body)
    assert request is not None
    messages = list(request.messages)
    messages[2] = {**messages[2], "content": "[masked]"}  # the first turn's output
    items = orjson.loads(RESPONSES.write(body, request, messages))["input"]
    assert [item.get("output") for item in items if "output" in item] == ["[masked]", "out 2"]
    assert [item.get("id") for item in items if "output" in item] == ["o1", "o2"]


def test_a_cut_of_an_outputs_parts_keeps_its_image() -> None:
    image = {"type": "input_image", "image_url": "data:image/png;base64,AAAA"}
    output = [{"type": "input_text", "text": "long log " * 100}, image]
    call = {"type": "custom_tool_call", "call_id": "c", "name": "exec", "input": "x"}
    body = {
        "model": "m",
        "input": [{"role": "user", "content": "go"}, call, {**CUSTOM_OUTPUT, "call_id": "c", "output": output}],
    }
    request = RESPONSES.read(body)
    assert request is not None
    cut = {
        **request.messages[2],
        "content": [{"type": "text", "text": "long log [cut]"}, request.messages[2]["content"][1]],
    }
    items = orjson.loads(RESPONSES.write(body, request, [request.messages[0], request.messages[1], cut]))["input"]
    assert items[2]["output"] == [{"type": "input_text", "text": "long log [cut]"}, image]


def test_comments_are_pending_and_only_an_unknown_field_counts_as_refused() -> None:
    assert RESPONSES.stream_pending(b": OPENROUTER PROCESSING")
    assert RESPONSES.rejects_server_compaction(422, b'{"detail": "context_management: Extra inputs are not permitted"}')
    assert RESPONSES.rejects_server_compaction(400, b"Unrecognized request argument supplied: context_management")
    assert not RESPONSES.rejects_server_compaction(400, b"context_management.compact_threshold must be positive")
    unknown = b'{"error": {"message": "Unknown parameter: \'%s\'.", "type": "invalid_request_error", "code": null}}'
    assert RESPONSES.rejects_server_compaction(400, unknown % b"context_management")
    assert not RESPONSES.rejects_server_compaction(400, unknown % b"context_management[0].bogus")  # the client's key
    assert not RESPONSES.rejects_server_compaction(400, b"context_management.x: Extra inputs are not permitted")
    detail = b'{"detail": [{"type": "extra_forbidden", "loc": %s, "msg": "Extra inputs are not permitted"}]}'
    assert RESPONSES.rejects_server_compaction(422, detail % b'["body", "context_management"]')
    assert not RESPONSES.rejects_server_compaction(422, detail % b'["body", "context_management", "x"]')
    # Words of the refusal inside text the client sent: not the upstream's
    echoed = b"Invalid value: 'Unrecognized request argument supplied: context_management'."
    assert not RESPONSES.rejects_server_compaction(400, echoed)
    assert RESPONSES.read({"model": "m", "input": "hi", "conversation": "conv_1"}).compactable is False  # type: ignore[union-attr]
