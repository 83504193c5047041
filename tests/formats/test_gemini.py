"""The Gemini API against the seam's contract: contents read as messages and written back, and a long Gemini
CLI-shaped conversation compacted by the real pipeline into a request the fake Gemini API accepts, with every
signed turn verbatim."""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
import pytest

from inflight.compaction.summary_job import SUMMARY_PREFIX
from inflight.config import Settings
from inflight.formats import GEMINI, Target
from inflight.formats.agent_compaction import recognised
from inflight.formats.agent_prompts import GEMINI_CLI
from inflight.formats.retrieve_tool import GeminiShape
from inflight.pipeline.engine import Options, build_pipeline
from tests.support.gemini import FakeGemini, part_signature, refusal_body
from tests.support.growth import MAX_GROWTH, SERIES, growth_in_parses, in_parses

STREAM = Target(GEMINI.spec.routes[1], {"model": "gemini-2.5-pro"})
WHOLE = Target(GEMINI.spec.routes[0], {"model": "gemini-2.5-pro"})
CALL: dict[str, Any] = {"functionCall": {"id": "c1", "name": "run_shell_command", "args": {"command": "ls"}}}
SIGNED_CALL: dict[str, Any] = {**CALL, "thoughtSignature": "c2lnbmVk"}
RESPONSE: dict[str, Any] = {
    "functionResponse": {"id": "c1", "name": "run_shell_command", "response": {"output": "a.py"}}
}
BODY: dict[str, Any] = {
    "contents": [
        {"role": "user", "parts": [{"text": "<session_context>linux</session_context>"}, {"text": "Fix the parser."}]},
        {"role": "model", "parts": [{"text": "Looking."}, SIGNED_CALL]},
        {"role": "user", "parts": [RESPONSE]},
        {"role": "model", "parts": [{"text": "Done."}]},
    ],
    "systemInstruction": {"role": "user", "parts": [{"text": "You are Gemini CLI."}]},
    "tools": [
        {
            "functionDeclarations": [
                {
                    "name": "run_shell_command",
                    "description": "Run a command.",
                    "parametersJsonSchema": {"type": "object", "properties": {"command": {"type": "string"}}},
                }
            ]
        }
    ],
    "generationConfig": {"maxOutputTokens": 8192, "thinkingConfig": {"includeThoughts": True}},
}


def test_contents_read_as_messages_with_signed_turns_opaque_and_the_model_from_the_path() -> None:
    request = GEMINI.read(BODY, STREAM)
    assert request is not None
    assert request.model == "gemini-2.5-pro" and request.streams is True and request.output_limit == 8192
    assert [m["role"] for m in request.messages] == ["system", "user", "assistant", "tool", "assistant"]
    assert request.messages[0]["content"] == "You are Gemini CLI."
    call = request.messages[2]["tool_calls"][0]
    assert call["id"] == "c1" and call["function"] == {"name": "run_shell_command", "arguments": '{"command":"ls"}'}
    assert request.messages[3] == {"role": "tool", "tool_call_id": "c1", "content": "a.py"}
    assert request.opaque == {0, 2}  # the system instruction, and the turn that carries a thoughtSignature
    assert request.view["tools"][0]["function"]["parameters"]["properties"] == {"command": {"type": "string"}}
    assert GEMINI.read(BODY, WHOLE).streams is False  # type: ignore[union-attr]
    assert GEMINI.read({"contents": []}) is None  # no model: not in the path, nor in the body
    assert GEMINI.read({"contents": [{"parts": "text"}]}, WHOLE) is None


def test_calls_without_ids_are_paired_with_their_responses_in_order() -> None:
    calls = [{"functionCall": {"name": "a", "args": {}}}, {"functionCall": {"name": "b", "args": {}}}]
    responses = [{"functionResponse": {"name": n, "response": {"output": n}}} for n in ("a", "b")]
    body = {"contents": [{"role": "user", "parts": [{"text": "go"}]}, {"role": "model", "parts": calls}]}
    body["contents"].append({"role": "user", "parts": [*responses, {"text": "and a note"}]})
    request = GEMINI.read(body, WHOLE)
    assert request is not None
    ids = [c["id"] for c in request.messages[1]["tool_calls"]]
    assert [m.get("tool_call_id") for m in request.messages[2:4]] == ids and len(set(ids)) == 2
    assert request.observations == {4}  # text beside the responses is no request


def test_untouched_contents_go_back_as_they_came_and_a_mask_keeps_the_response_part() -> None:
    request = GEMINI.read(BODY, STREAM)
    assert request is not None
    assert orjson.loads(GEMINI.write(BODY, request, list(request.messages))) == BODY
    masked = {**request.messages[3], "content": "[output removed]"}
    summary = {"role": "user", "content": f"{SUMMARY_PREFIX} earlier work"}
    messages = [request.messages[0], request.messages[1], summary, request.messages[2], masked, request.messages[4]]
    sent = orjson.loads(GEMINI.write(BODY, request, messages))
    assert sent["systemInstruction"] == BODY["systemInstruction"] and sent["tools"] == BODY["tools"]
    first, signed, answered, _ = sent["contents"]
    assert first["parts"][-1] == {"text": f"{SUMMARY_PREFIX} earlier work"}  # joined the user turn: roles alternate
    assert signed == BODY["contents"][1]  # the signed turn verbatim
    assert answered["parts"] == [
        {"functionResponse": {"id": "c1", "name": "run_shell_command", "response": {"output": "[output removed]"}}}
    ]


def test_refusals_usage_errors_and_the_exact_count() -> None:
    refusal = GEMINI.refusal(400, orjson.dumps(refusal_body(61_000, 45_000)), content_encoding=None)
    assert refusal is not None and (refusal.context_window, refusal.prompt_tokens) == (45_000, 61_000)
    listed = orjson.dumps([refusal_body(61_000, 45_000)])  # a stream read without `alt=sse` answers an array
    assert GEMINI.refusal(400, listed, content_encoding=None) is not None
    assert GEMINI.stream_refusal(b"data: " + orjson.dumps(refusal_body(61_000, 45_000)) + b"\r\n\r\n") is not None
    quota = {"error": {"code": 429, "message": "Resource has been exhausted (e.g. check quota).", "status": "X"}}
    assert GEMINI.refusal(429, orjson.dumps(quota), content_encoding=None) is None
    usage = {"promptTokenCount": 1000, "cachedContentTokenCount": 900, "candidatesTokenCount": 20}
    chunk = {"candidates": [], "usageMetadata": {**usage, "thoughtsTokenCount": 12}}
    assert GEMINI.prompt_tokens(chunk) == 1000 and GEMINI.output_tokens(chunk) == 32
    assert GEMINI.prompt_tokens({"candidates": []}) is None
    error = orjson.loads(
        GEMINI.spec.errors.body("no key", error_type="invalid_request_error", param=None, code="invalid_api_key")
    )
    assert error == {"error": {"code": 401, "message": "no key", "status": "UNAUTHENTICATED"}}
    assert GEMINI.spec.credentials[0] == b"x-goog-api-key"
    exact = GEMINI.spec.exact_count
    assert exact is not None
    call = exact.request(BODY, model="gemini-2.5-pro")
    assert call.path == "/v1beta/models/gemini-2.5-pro:countTokens"
    assert call.body["generateContentRequest"]["contents"] == BODY["contents"]
    assert "generationConfig" not in call.body["generateContentRequest"]
    assert exact.tokens({"totalTokens": 31}) == 31


def test_a_summary_is_asked_through_generate_content_and_its_text_read_back() -> None:
    messages = [{"role": "system", "content": "Summarize."}, {"role": "user", "content": "the history"}]
    call = GEMINI.summary_request(messages, model="gemini-2.5-pro", max_tokens=2000)
    assert call.path == "/v1beta/models/gemini-2.5-pro:generateContent"
    assert call.body["systemInstruction"] == {"parts": [{"text": "Summarize."}]}
    assert call.body["contents"] == [{"role": "user", "parts": [{"text": "the history"}]}]
    assert call.body["generationConfig"]["maxOutputTokens"] == 2000
    thought = {"text": "thinking", "thought": True}
    reply = {"candidates": [{"content": {"parts": [thought, {"text": "The summary."}]}, "finishReason": "STOP"}]}
    assert GEMINI.summary_reply(reply) == ("The summary.", "stop")
    reply["candidates"][0]["finishReason"] = "MAX_TOKENS"
    assert GEMINI.summary_reply(reply)[1] == "length"


def gemini_cli_conversation(steps: int, *, output_lines: int) -> dict[str, Any]:
    """What Gemini CLI sends after `steps` shell calls: each call turn signed by the fake, each response after it."""
    contents: list[dict[str, Any]] = [{"role": "user", "parts": [{"text": "Do the FAKE-TASK."}]}]
    for n in range(1, steps + 1):
        call: dict[str, Any] = {
            "functionCall": {"id": f"c{n}", "name": "run_shell_command", "args": {"command": f"run step {n}"}}
        }
        call["thoughtSignature"] = part_signature(call, n)
        output = "\n".join(f"step {n} line {i}: checked module_{n}_{i}.py" for i in range(output_lines))
        response: dict[str, Any] = {"functionResponse": {"id": f"c{n}", "name": "run_shell_command"}}
        response["functionResponse"]["response"] = {"output": f"{output}\nSTEP {n} DONE"}
        contents += [{"role": "model", "parts": [call]}, {"role": "user", "parts": [response]}]
    return {**BODY, "contents": contents}


@pytest.mark.parametrize("steps", [12, 40])
def test_the_pipeline_compacts_a_gemini_cli_conversation_into_a_request_gemini_accepts(steps: int) -> None:
    body = gemini_cli_conversation(steps, output_lines=60)
    settings = Settings.model_validate(
        {"models": {"gemini-*": {"context_window": 12_000}}, "discover_context_window": False}
    )
    pipeline = build_pipeline(settings, summarizers=None)
    raw = orjson.dumps(body)

    async def prepare() -> bytes:
        counted = pipeline.count(raw, body, GEMINI, target=STREAM)
        assert counted is not None and counted.streams
        prepared = await pipeline.prepare(counted, pipeline.account(counted), Options())
        assert prepared.rewritten and prepared.too_long is None
        await pipeline.aclose()
        return prepared.body

    sent = orjson.loads(asyncio.run(prepare()))
    fake = FakeGemini()
    assert fake.problem(sent) is None  # every signature verified, every call answered in the next turn
    assert fake.count(sent) < fake.count(body)
    assert sent["systemInstruction"] == body["systemInstruction"]
    assert sent["tools"] == [*body["tools"], GeminiShape.definition]  # inflight_retrieve comes with the compaction
    originals = [orjson.dumps(c) for c in body["contents"] if c["role"] == "model"]
    assert all(orjson.dumps(c) in originals for c in sent["contents"] if c["role"] == "model")
    assert f"STEP {steps} DONE" in orjson.dumps(sent["contents"][-1]).decode()  # the latest turn kept
    assert "FAKE-TASK" in orjson.dumps(sent["contents"][0]).decode()  # the task kept


def test_the_fake_refuses_an_edited_signed_turn() -> None:
    body = gemini_cli_conversation(2, output_lines=2)
    fake = FakeGemini()
    assert fake.problem(body) is None
    edited = orjson.loads(orjson.dumps(body))
    edited["contents"][1]["parts"][0]["functionCall"]["args"]["command"] = "rm -rf /"
    assert fake.problem(edited) == "Thought signature is not valid (contents[1])."


def test_gemini_clis_snapshot_request_is_recognised_by_its_structure_and_prompt_only() -> None:
    prompt = GEMINI_CLI[0]
    system = {"parts": [{"text": f"{prompt.system}\n\n(the rest of its prompt)"}]}
    history = BODY["contents"][:3]
    asking = {
        "contents": [*history, {"role": "user", "parts": [{"text": prompt.asks[1]}]}],
        "systemInstruction": system,
    }
    found = recognised("gemini", asking)
    assert found is not None and found.history["contents"] == history and found.keeps_recent_turns
    snapshot = {"role": "model", "parts": [{"text": "<state_snapshot>...</state_snapshot>"}]}
    verifying = {**asking, "contents": [*history, snapshot, {"role": "user", "parts": [{"text": prompt.verify}]}]}
    assert recognised("gemini", verifying).history["contents"] == history  # type: ignore[union-attr]
    inside = {"functionResponse": {"name": "read_file", "response": {"output": prompt.asks[0]}}}
    assert recognised("gemini", {**asking, "contents": [*history, {"role": "user", "parts": [inside]}]}) is None
    assert recognised("gemini", {**asking, "systemInstruction": BODY["systemInstruction"]}) is None


def one_wide_turn(calls: int) -> dict[str, Any]:
    """A model content of `calls` function calls without ids, and a user content of their responses."""
    made = [{"functionCall": {"name": "read_file", "args": {"path": f"f{n}.py"}}} for n in range(calls)]
    answered = [{"functionResponse": {"name": "read_file", "response": {"output": f"{n}"}}} for n in range(calls)]
    contents = [{"role": "user", "parts": [{"text": "Go."}]}, {"role": "model", "parts": made}]
    return {"contents": [*contents, {"role": "user", "parts": [*answered, {"text": "a note"}]}]}


def test_reading_and_writing_a_turn_grow_linearly_with_its_parts() -> None:
    """Pairing responses in order, and the parts beside them, must not search a list per part."""

    def reading(calls: int) -> float:
        payload = one_wide_turn(calls)
        return in_parses(lambda: GEMINI.read(payload, WHOLE), orjson.dumps(payload))

    def writing(calls: int) -> float:
        payload = one_wide_turn(calls)
        request = GEMINI.read(payload, WHOLE)
        assert request is not None
        masked = [{**m, "content": "[masked]"} if m["role"] == "tool" else m for m in request.messages]
        return in_parses(lambda: GEMINI.write(payload, request, masked), orjson.dumps(payload))

    for step in (reading, writing):
        growth, costs = growth_in_parses(step)
        assert growth < MAX_GROWTH, f"{step.__name__}: {SERIES} parts cost {[round(c, 1) for c in costs]} parses"
