"""Stitching streams: the tool's calls taken out, the client's renumbered, the end sent once."""

from __future__ import annotations

from typing import Any

import orjson

from inflight.formats.retrieve_stream import ChatStitch, GeminiStitch, MessagesStitch
from inflight.formats.retrieve_tool import GeminiShape


def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
    return b"data: " + orjson.dumps({"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})


def data(out: list[bytes]) -> list[Any]:
    return [orjson.loads(event.split(b"data: ", 1)[1]) for event in out if b"[DONE]" not in event]


def test_a_chat_stream_that_also_calls_the_clients_tool_goes_to_it_without_ours() -> None:
    stitch = ChatStitch()
    ours = {"index": 0, "id": "c1", "function": {"name": "inflight_retrieve", "arguments": '{"handle":'}}
    theirs = {"index": 1, "id": "c2", "function": {"name": "bash", "arguments": "{}"}}
    out: list[bytes] = []
    for event in (
        chunk({"content": "hi"}),
        chunk({"tool_calls": [ours]}),
        chunk({"tool_calls": [{"index": 0, "function": {"arguments": ' "inflight:1"}'}}]}),
        chunk({"tool_calls": [theirs]}),
        chunk({}, "tool_calls"),
        b"data: [DONE]",
    ):
        out += stitch.event(event)
    out += stitch.finish()
    calls, others = stitch.calls()
    assert [call.arguments for call in calls] == ['{"handle": "inflight:1"}'] and others
    sent = data(out)
    assert [c["choices"][0]["delta"].get("tool_calls") for c in sent if c["choices"][0]["delta"]] == [
        None,
        [{**theirs, "index": 0}],
    ]
    assert sent[-1]["choices"][0]["finish_reason"] == "tool_calls" and out[-1] == b"data: [DONE]\n\n"


def named(kind: str, document: dict[str, Any]) -> bytes:
    return f"event: {kind}\n".encode() + b"data: " + orjson.dumps({"type": kind, **document})


def test_a_continuations_blocks_follow_the_ones_sent_and_usage_is_summed() -> None:
    stitch = MessagesStitch()
    first = [
        named("message_start", {"message": {"usage": {"input_tokens": 100, "output_tokens": 1}}}),
        named("content_block_start", {"index": 0, "content_block": {"type": "text", "text": ""}}),
        named("content_block_stop", {"index": 0}),
        named(
            "content_block_start",
            {"index": 1, "content_block": {"type": "tool_use", "id": "t", "name": "inflight_retrieve"}},
        ),
        named(
            "content_block_delta",
            {"index": 1, "delta": {"type": "input_json_delta", "partial_json": '{"handle": "h"}'}},
        ),
        named("content_block_stop", {"index": 1}),
        named("message_delta", {"delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 10}}),
        named("message_stop", {}),
    ]
    out = [event for e in first for event in stitch.event(e)]
    assert stitch.calls()[0][0].arguments == '{"handle":"h"}'
    stitch.next_round()
    second = [
        named("message_start", {"message": {"usage": {"input_tokens": 150, "output_tokens": 1}}}),
        named("content_block_start", {"index": 0, "content_block": {"type": "text", "text": ""}}),
        named("content_block_stop", {"index": 0}),
        named("message_delta", {"delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 7}}),
        named("message_stop", {}),
    ]
    out += [event for e in second for event in stitch.event(e)]
    out += stitch.finish()
    kinds = [orjson.loads(e.split(b"data: ", 1)[1])["type"] for e in out]
    assert kinds == [
        "message_start",
        *["content_block_start", "content_block_stop"] * 2,
        "message_delta",
        "message_stop",
    ]
    indices = [orjson.loads(e.split(b"data: ", 1)[1]).get("index") for e in out]
    assert indices[1:5] == [0, 0, 1, 1]
    delta = orjson.loads(out[-2].split(b"data: ", 1)[1])
    assert delta["usage"]["input_tokens"] == 250 and delta["usage"]["output_tokens"] == 17


def gemini_chunk(parts: list[dict[str, Any]], *, finish: bool = False, prompt: int = 100) -> bytes:
    candidate: dict[str, Any] = {"content": {"role": "model", "parts": parts}, "index": 0}
    if finish:
        candidate["finishReason"] = "STOP"
    usage = {"promptTokenCount": prompt, "candidatesTokenCount": 5, "totalTokenCount": prompt + 5}
    return b"data: " + orjson.dumps({"candidates": [candidate], "usageMetadata": usage})


def test_a_gemini_stream_that_calls_the_tool_until_the_rounds_run_out_ends_once_with_every_rounds_counts() -> None:
    stitch = GeminiStitch()
    ours = {"functionCall": {"name": "inflight_retrieve", "args": {"handle": "inflight:1"}}, "thoughtSignature": "s"}
    plain = gemini_chunk([{"text": "Let me look. "}])
    out = stitch.event(plain)
    assert out == [plain + b"\n\n"]  # an event with nothing of ours goes as it came
    out += stitch.event(gemini_chunk([{"text": "Now."}, ours], finish=True))
    calls, others = stitch.calls()
    assert [call.arguments for call in calls] == ['{"handle":"inflight:1"}'] and not others
    assert stitch.answer()["candidates"][0]["content"]["parts"][-1] == ours  # its signature kept for the continuation
    stitch.next_round()
    out += stitch.event(gemini_chunk([ours], finish=True, prompt=300))
    out += stitch.finish()
    sent = data(out)
    parts = [part for chunk in sent for part in chunk["candidates"][0]["content"]["parts"]]
    assert parts == [{"text": "Let me look. "}, {"text": "Now."}, {"text": ""}]
    assert [chunk["candidates"][0].get("finishReason") for chunk in sent] == [None, None, "STOP"]
    assert sent[-1]["usageMetadata"] == {"promptTokenCount": 400, "candidatesTokenCount": 10, "totalTokenCount": 410}


def test_a_gemini_stream_read_without_alt_sse_is_joined_into_one_answer() -> None:
    shape = GeminiShape()
    chunks = [
        orjson.loads(gemini_chunk(p, finish=f)[6:]) for p, f in (([{"text": "a"}], False), ([{"text": "b"}], True))
    ]
    joined = shape.whole_of(chunks)
    assert joined is not None and joined["candidates"][0]["content"]["parts"] == [{"text": "a"}, {"text": "b"}]
    assert joined["candidates"][0]["finishReason"] == "STOP" and shape.whole_of([]) is None
