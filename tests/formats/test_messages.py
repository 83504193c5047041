"""Anthropic Messages against the seam's contract: content blocks read as messages and written back,
and a long Claude Code-shaped conversation compacted by the real pipeline into a valid request."""

from __future__ import annotations

import asyncio
import base64
import itertools
from collections.abc import Callable
from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from inflight.compaction.summary_job import SUMMARY_PREFIX
from inflight.config import Settings
from inflight.formats import MESSAGES
from inflight.formats.messages import MAX_BREAKPOINTS
from inflight.pipeline.engine import Options, build_pipeline
from tests.support.growth import MAX_GROWTH, SERIES, growth_in_parses, in_parses

EPHEMERAL = {"type": "ephemeral"}
THINKING: dict[str, Any] = {"type": "thinking", "thinking": "List the files first.", "signature": "sig-1"}
USE: dict[str, Any] = {"type": "tool_use", "id": "toolu_1", "name": "Bash", "input": {"command": "ls"}}
RESULT: dict[str, Any] = {"type": "tool_result", "tool_use_id": "toolu_1", "content": "a.py\nb.py", "is_error": False}
REMINDER: dict[str, Any] = {"type": "text", "text": "<system-reminder>keep going</system-reminder>"}
BODY: dict[str, Any] = {
    "model": "claude-sonnet-4-5",
    "max_tokens": 128000,
    "system": [
        {"type": "text", "text": "You are Claude Code."},
        {"type": "text", "text": "Be brief.", "cache_control": EPHEMERAL},
    ],
    "messages": [
        {"role": "user", "content": "Fix the parser."},
        {"role": "assistant", "content": [THINKING, {"type": "text", "text": "Looking."}, USE]},
        {"role": "user", "content": [RESULT, REMINDER]},
        {"role": "system", "content": "The user switched to plan mode."},
        {"role": "assistant", "content": [{"type": "text", "text": "Done.", "cache_control": EPHEMERAL}]},
    ],
    "tools": [{"name": "Bash", "description": "Run a command.", "input_schema": {"type": "object"}}],
    "thinking": {"type": "adaptive"},
    "metadata": {"user_id": orjson.dumps({"device_id": "d", "session_id": "5e55-10n"}).decode()},
}


def test_blocks_read_as_messages_with_thinking_opaque_and_tool_results_apart() -> None:
    request = MESSAGES.read(BODY)
    assert request is not None
    roles = [m["role"] for m in request.messages]
    assert roles == ["system", "user", "assistant", "tool", "user", "system", "assistant"]
    assert request.messages[0]["content"] == "You are Claude Code.\nBe brief."
    turn = request.messages[2]
    assert turn["tool_calls"] == [
        {"id": "toolu_1", "type": "function", "function": {"name": "Bash", "arguments": '{"command":"ls"}'}}
    ]
    assert turn["reasoning_content"] == "List the files first."  # counted; the signature is not
    # the system (field and role), and the turn with thinking: kept whole (or dropped whole, the turn)
    assert request.opaque == frozenset({0, 2, 5})
    assert request.observations == frozenset({4})  # the reminder beside the result: no request
    assert request.origins == [None, (0,), (1,), (2, 0), (2, 1), (3,), (4,)]
    assert request.messages[3] == {"role": "tool", "tool_call_id": "toolu_1", "content": "a.py\nb.py"}
    assert request.session == "5e55-10n"
    assert request.output_limit == 128000 and not request.output_limit_binding
    assert request.view["tools"][0]["function"]["parameters"] == {"type": "object"}


def test_untouched_messages_go_back_as_they_came() -> None:
    request = MESSAGES.read(BODY)
    assert request is not None
    assert orjson.loads(MESSAGES.write(BODY, request, list(request.messages))) == BODY


def test_a_masked_result_keeps_its_block_and_a_summary_joins_the_user_turn_before_it() -> None:
    request = MESSAGES.read(BODY)
    assert request is not None
    messages = request.messages
    summary = {"role": "user", "content": f"{SUMMARY_PREFIX}\nthe parser was fixed"}
    masked = {**messages[3], "content": "[output masked]"}
    written = orjson.loads(MESSAGES.write(BODY, request, [messages[0], messages[1], summary, messages[2], masked]))
    out = written["messages"]
    assert out[0] == {
        "role": "user",
        "content": [
            # The head's end: a breakpoint of its own (a copy of the system's), read from the cache after any summary
            {"type": "text", "text": "Fix the parser.", "cache_control": EPHEMERAL},
            {"type": "text", "text": summary["content"], "cache_control": EPHEMERAL},  # "Done."'s, dropped
        ],
    }
    assert out[1] == BODY["messages"][1]  # thinking and its signature byte for byte
    assert out[2] == {"role": "user", "content": [{**RESULT, "content": "[output masked]"}]}  # is_error kept
    assert written["system"] == BODY["system"] and written["tools"] == BODY["tools"]


def test_a_breakpoint_on_a_removed_message_moves_to_the_summary_and_never_more_than_four() -> None:
    def turn(n: int, mark: bool) -> list[dict[str, Any]]:
        use = {"type": "tool_use", "id": f"t{n}", "name": "Bash", "input": {"command": f"step {n}"}}
        result: dict[str, Any] = {"type": "tool_result", "tool_use_id": f"t{n}", "content": f"out {n}"}
        if mark:
            result["cache_control"] = {"type": "ephemeral", "ttl": "1h"}
        return [{"role": "assistant", "content": [use]}, {"role": "user", "content": [result]}]

    system = [{"type": "text", "text": "part 0"}, {"type": "text", "text": "part 1", "cache_control": EPHEMERAL}]
    tools = [{"name": "Bash", "input_schema": {"type": "object"}, "cache_control": EPHEMERAL}]
    history = [m for n in range(4) for m in turn(n, mark=n in (0, 3))]
    body = {
        "model": "m",
        "max_tokens": 100,
        "system": system,
        "tools": tools,
        "messages": [{"role": "user", "content": "go"}, *history],
    }
    request = MESSAGES.read(body)
    assert request is not None
    messages = request.messages
    summary = {"role": "user", "content": "[summary] steps 0 and 1"}
    kept = [messages[0], messages[1], summary, *messages[6:]]  # the turns of steps 0 and 1 replaced
    out = orjson.loads(MESSAGES.write(body, request, kept))["messages"]
    assert out[0]["content"][1] == {
        "type": "text",
        "text": summary["content"],
        "cache_control": {"type": "ephemeral", "ttl": "1h"},
    }
    marks = [b for m in out for b in m["content"] if isinstance(b, dict) and "cache_control" in b]
    assert len(marks) + 2 == MAX_BREAKPOINTS  # one in the system, one on the tools
    assert out[-1]["content"][0]["cache_control"] == {"type": "ephemeral", "ttl": "1h"}  # the latest is kept


def test_refusal_wordings_usage_sessions_and_errors() -> None:
    too_long = {
        "type": "error",
        "error": {"type": "invalid_request_error", "message": "prompt is too long: 60123 tokens > 55000 maximum"},
    }
    refusal = MESSAGES.refusal(400, orjson.dumps(too_long), content_encoding=None)
    assert refusal is not None and (refusal.context_window, refusal.prompt_tokens) == (55000, 60123)
    message = "input length and `max_tokens` exceed context limit: 50000 + 8000 > 55000, decrease input length"
    refusal = MESSAGES.refusal(
        400, orjson.dumps({"type": "error", "error": {"message": message}}), content_encoding=None
    )
    assert refusal is not None and (refusal.context_window, refusal.prompt_tokens) == (55000, 50000)
    hopeless = message.replace("50000 + 8000", "100 + 60000")  # the reply's reserve alone: not the prompt's fault
    assert (
        MESSAGES.refusal(400, orjson.dumps({"type": "error", "error": {"message": hopeless}}), content_encoding=None)
        is None
    )
    in_stream = b"event: error\ndata: " + orjson.dumps(too_long)
    assert MESSAGES.stream_refusal(in_stream) is not None
    assert MESSAGES.stream_pending(b'event: ping\ndata: {"type": "ping"}') and MESSAGES.stream_pending(b": keep-alive")
    start = {
        "type": "message_start",
        "message": {
            "usage": {
                "input_tokens": 5,
                "cache_read_input_tokens": 900,
                "cache_creation_input_tokens": 95,
                "output_tokens": 1,
            }
        },
    }
    assert MESSAGES.prompt_tokens(start) == 1000  # every prompt token, however it was served
    assert MESSAGES.prompt_tokens({"type": "message_delta", "usage": {"output_tokens": 40}}) is None
    assert MESSAGES.prompt_tokens({"usage": {"input_tokens": 12}}) == 12
    legacy = {"user_id": "user_abc_account__session_0d3c5e1a-8f7e-4c55-9a1e-3b2c1d0e9f8a"}
    assert MESSAGES.read({**BODY, "metadata": legacy}).session == "0d3c5e1a-8f7e-4c55-9a1e-3b2c1d0e9f8a"  # type: ignore[union-attr]
    error = orjson.loads(
        MESSAGES.spec.errors.body("no key", error_type="invalid_request_error", param=None, code="invalid_api_key")
    )
    assert error == {"type": "error", "error": {"type": "authentication_error", "message": "no key"}}
    assert MESSAGES.read({"model": "m", "messages": [{"role": "user"}]}) is None


def claude_code_conversation(steps: int, *, output_lines: int) -> dict[str, Any]:
    """What Claude Code sends after `steps` Bash calls: signed thinking each turn, the tool results with
    a reminder, a breakpoint on the last block, two on the system."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": [{"type": "text", "text": "Do the FAKE-TASK."}]}]
    for n in range(steps):
        thinking = {"type": "thinking", "thinking": f"Step {n} next.", "signature": f"sig-{n}"}
        use = {"type": "tool_use", "id": f"toolu_{n}", "name": "Bash", "input": {"command": f"run step {n}"}}
        output = "\n".join(f"step {n} line {i}: checked module_{n}_{i}.py" for i in range(output_lines))
        result = {"type": "tool_result", "tool_use_id": f"toolu_{n}", "content": f"{output}\nSTEP {n} DONE"}
        messages += [{"role": "assistant", "content": [thinking, use]}, {"role": "user", "content": [result]}]
    messages[-1]["content"][-1]["cache_control"] = EPHEMERAL
    return {**BODY, "messages": messages}


@pytest.mark.parametrize("steps", [12, 40])
def test_the_pipeline_compacts_a_claude_code_conversation_into_a_valid_request(steps: int) -> None:
    body = claude_code_conversation(steps, output_lines=60)
    # With `inflight_retrieve` offered (`auto` leaves it off on this API): the request stays valid with it too
    config = {"models": {"claude-*": {"context_window": 12_000}}, "discover_context_window": False}
    settings = Settings.model_validate({**config, "compaction": {"retrieval": "tool"}})
    pipeline = build_pipeline(settings, summarizers=None)
    raw = orjson.dumps(body)

    async def prepare() -> bytes:
        counted = pipeline.count(raw, body, MESSAGES)
        assert counted is not None
        accounting = pipeline.account(counted)
        assert accounting.budget == 12_000 - 3_000  # 128k asked: the reserve is capped at a quarter
        prepared = await pipeline.prepare(counted, accounting, Options())
        assert prepared.rewritten and prepared.too_long is None
        await pipeline.aclose()
        return prepared.body

    sent = orjson.loads(asyncio.run(prepare()))
    assert sent["system"] == body["system"] and sent["tools"][:-1] == body["tools"]
    assert sent["tools"][-1]["name"] == "inflight_retrieve"  # compacted: the model may read back what was taken out
    originals = {orjson.dumps(m): m for m in body["messages"] if m["role"] == "assistant"}
    pending: set[str] = set()
    roles = []
    for message in sent["messages"]:
        roles.append(message["role"])
        content = message["content"]
        blocks = content if isinstance(content, list) else []
        results = {b["tool_use_id"] for b in blocks if b.get("type") == "tool_result"}
        assert results == pending  # every tool_use answered in the very next user turn, nothing else
        pending = {b["id"] for b in blocks if b.get("type") == "tool_use"}
        if message["role"] == "assistant":
            assert orjson.dumps(message) in originals  # thinking and signatures verbatim
    assert not pending
    assert all(a != b for a, b in itertools.pairwise(roles))  # turns alternate
    marks = sum(1 for m in sent["messages"] for b in m["content"] if isinstance(b, dict) and "cache_control" in b)
    assert marks + 1 <= MAX_BREAKPOINTS
    assert sent["messages"][-1] == body["messages"][-1]  # the latest result, whole, with its breakpoint
    assert "Do the FAKE-TASK." in orjson.dumps(sent["messages"][0]).decode()


TEXT = st.text(max_size=40)
NUMBER = st.integers(-(2**63), 2**63 - 1)  # what a parsed body can hold (orjson reads a bigger one as a float)
BLOCK = st.one_of(
    st.builds(lambda t: {"type": "text", "text": t}, TEXT),
    st.builds(lambda t: {"type": "thinking", "thinking": t, "signature": "sig"}, TEXT),
    st.builds(lambda t: {"type": "redacted_thinking", "data": t}, TEXT),
    st.builds(lambda i, t: {"type": "tool_use", "id": i, "name": "Bash", "input": {"command": t}}, TEXT, TEXT),
    st.builds(lambda i, t: {"type": "tool_result", "tool_use_id": i, "content": t}, TEXT, TEXT),
    st.builds(
        lambda i, t: {"type": "tool_result", "tool_use_id": i, "content": [{"type": "text", "text": t}]}, TEXT, TEXT
    ),
    st.builds(lambda d: {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": d}}, TEXT),
    st.dictionaries(st.sampled_from(["type", "x", "content"]), st.one_of(TEXT, NUMBER, st.none())),
    TEXT,
    NUMBER,
)
MESSAGE = st.fixed_dictionaries(
    {
        "role": st.sampled_from(["user", "assistant", "system", "tool", "developer"]),
        "content": st.one_of(TEXT, st.lists(BLOCK, max_size=5)),
    }
)


@given(st.lists(MESSAGE, max_size=8), st.one_of(st.none(), TEXT, st.lists(BLOCK, max_size=3)))
def test_any_body_reads_without_error_and_an_uncompacted_one_writes_back_equal(
    messages: list[dict[str, Any]], system: object
) -> None:
    body: dict[str, Any] = {"model": "m", "max_tokens": 10, "messages": messages}
    if system is not None:
        body["system"] = system
    request = MESSAGES.read(body)
    assert request is not None
    assert len(request.messages) == len(request.origins)
    assert orjson.loads(MESSAGES.write(body, request, list(request.messages))) == orjson.loads(orjson.dumps(body))


def prepared_body(body: dict[str, Any], window: int) -> tuple[dict[str, Any], str, str | None]:
    """The body the real pipeline sends for `body` at `window` (no summarizer: the ledger stands in),
    its actions, and why it cannot fit when it cannot."""
    settings = Settings.model_validate({"models": {"*": {"context_window": window}}, "discover_context_window": False})
    pipeline = build_pipeline(settings, summarizers=None)
    raw = orjson.dumps(body)

    async def prepare() -> tuple[bytes, str, str | None]:
        counted = pipeline.count(raw, body, MESSAGES)
        assert counted is not None
        prepared = await pipeline.prepare(counted, pipeline.account(counted), Options())
        await pipeline.aclose()
        return prepared.body, prepared.plan.said(), prepared.too_long

    sent, actions, too_long = asyncio.run(prepare())
    return orjson.loads(sent), actions, too_long


def test_the_last_resort_never_edits_the_system_and_never_grows_the_request() -> None:
    body = claude_code_conversation(6, output_lines=40)
    body["system"] = [{"type": "text", "text": "Rules. " * 1500}, BODY["system"][1]]  # most of the window
    body["messages"].insert(1, {"role": "system", "content": "Plan mode. " * 300})
    sent, _, too_long = prepared_body(body, 4_000)
    assert sent["system"] == body["system"] and body["messages"][1] in sent["messages"]  # both whole
    assert len(orjson.dumps(sent)) <= len(orjson.dumps(body))
    assert too_long is not None  # said honestly: the system alone is over the budget


def test_a_reminder_beside_old_results_is_no_request_and_does_not_hold_the_summary_back() -> None:
    body = claude_code_conversation(40, output_lines=30)
    reminder = {"type": "text", "text": "<system-reminder>The user changed a file.</system-reminder>"}
    body["messages"][4]["content"].append(reminder)  # beside step 1's result
    sent, actions, too_long = prepared_body(body, 8_000)
    assert too_long is None and "fallback" in actions  # the middle went (no summarizer: its ledger)
    assert reminder not in [b for m in sent["messages"] if isinstance(m["content"], list) for b in m["content"]]
    assert len(sent["messages"]) < 30 and sent["messages"][-1] == body["messages"][-1]


def test_a_document_counts_as_a_file_and_is_never_cut_as_text() -> None:
    pdf = base64.b64encode(b"%PDF-1.7 " + bytes(300_000)).decode()
    document = {"type": "document", "source": {"type": "base64", "media_type": "application/pdf", "data": pdf}}
    text = {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "notes " * 100}}
    use = {"type": "tool_use", "id": "t1", "name": "Read", "input": {"file_path": "spec.pdf"}}
    result = {"type": "tool_result", "tool_use_id": "t1", "content": [document, text]}
    body = {
        "model": "m",
        "max_tokens": 100,
        "messages": [
            {"role": "user", "content": "Read the spec."},
            {"role": "assistant", "content": [use]},
            {"role": "user", "content": [result]},
        ],
    }
    request = MESSAGES.read(body)
    assert request is not None
    parts = request.messages[2]["content"]
    assert [p["type"] for p in parts] == ["file", "file"]  # never text for truncation to cut
    assert base64.b64decode(parts[1]["file"]["file_data"]) == b"notes " * 100


def test_the_heads_end_gets_a_breakpoint_when_one_is_to_spare_and_the_client_caches() -> None:
    """After a summary the head is cached on its own, with the TTL of the breakpoint before it (Anthropic refuses
    a longer one after a shorter); never past four breakpoints, never on a request whose client caches nothing,
    never after a message the last resort cut rather than a summary."""
    hour = {"type": "ephemeral", "ttl": "1h"}
    summary_text = f"{SUMMARY_PREFIX}\nsteps 0 and 1"

    def written(
        system: list[dict[str, Any]], marks: int, *, head: dict[str, Any] | None = None, text: str = summary_text
    ) -> list[dict[str, Any]]:
        turns = [
            message
            for n in range(4)
            for message in (
                {"role": "assistant", "content": [{"type": "tool_use", "id": f"t{n}", "name": "Bash", "input": {}}]},
                {
                    "role": "user",
                    "content": [
                        {"type": "tool_result", "tool_use_id": f"t{n}", "content": f"out {n}"}
                        | ({"cache_control": EPHEMERAL} if n >= 4 - marks else {})
                    ],
                },
            )
        ]
        body = {"model": "m", "max_tokens": 100, "system": system, "messages": [head or HEAD, *turns]}
        request = MESSAGES.read(body)
        assert request is not None
        instructions, first, *rest = request.messages  # the system is the core's first message
        summary: dict[str, Any] = {"role": "user", "content": text}
        kept = [instructions, first, summary, *rest[4:]]  # steps 0 and 1 summarized
        return list(orjson.loads(MESSAGES.write(body, request, kept))["messages"])

    cached_system = [{"type": "text", "text": "You code.", "cache_control": hour}]
    out = written(cached_system, marks=1)
    assert out[0]["content"] == [{**HEAD["content"][0], "cache_control": hour}, {"type": "text", "text": summary_text}]
    marked_head = {"role": "user", "content": [{"type": "text", "text": "Rules.", "cache_control": EPHEMERAL}, TASK]}
    out = written(cached_system, marks=1, head=marked_head)
    assert out[0]["content"][1] == {**TASK, "cache_control": EPHEMERAL}  # the 5m before it, not the system's 1h
    full = written([*cached_system, {"type": "text", "text": "More.", "cache_control": EPHEMERAL}], marks=2)
    assert "cache_control" not in full[0]["content"][0]  # system 2 + messages 2: no room for a fifth
    uncached = written([{"type": "text", "text": "You code."}], marks=1)
    assert "cache_control" not in uncached[0]["content"][0]  # the client asked for no caching of its prefix
    cut = written(cached_system, marks=1, text="a message the last resort cut")
    assert "cache_control" not in cut[0]["content"][0]


TASK: dict[str, Any] = {"type": "text", "text": "Do the task."}
HEAD: dict[str, Any] = {"role": "user", "content": [TASK]}


def one_wide_turn(results: int, *, marked: bool = False) -> dict[str, Any]:
    """A turn of `results` tool uses answered in one user message (each result with a breakpoint if `marked`)."""
    uses = [{"type": "tool_use", "id": f"toolu_{i}", "name": "Bash", "input": {}} for i in range(results)]
    answers: list[dict[str, Any]] = [
        {"type": "tool_result", "tool_use_id": f"toolu_{i}", "content": "ok"} for i in range(results)
    ]
    if marked:
        answers = [{**answer, "cache_control": EPHEMERAL} for answer in answers]
    turn = [{"role": "assistant", "content": uses}, {"role": "user", "content": [*answers, REMINDER]}]
    return {"model": "claude-sonnet-4-5", "max_tokens": 64, "messages": [{"role": "user", "content": "Go."}, *turn]}


def test_reading_a_turn_grows_linearly_with_its_blocks() -> None:
    """A membership test on a list made it quadratic: 40k `tool_result` blocks took 10-13 s, in every mode."""

    def cost(results: int) -> float:
        payload = one_wide_turn(results)
        return in_parses(lambda: MESSAGES.read(payload), orjson.dumps(payload))

    growth, costs = growth_in_parses(cost)
    # On the old main: 23, 44 and 110 parses of the body; now about 2 at every size.
    assert growth < MAX_GROWTH, f"{SERIES} blocks cost {[round(c, 1) for c in costs]} parses of the body"


def test_placing_breakpoints_grows_linearly_with_them() -> None:
    """Each breakpoint dropped (past the four allowed) copied its message's blocks: 32k of them cost 8 s."""

    def writing(results: int) -> tuple[Callable[[], bytes], bytes]:
        payload = one_wide_turn(results, marked=True)
        request = MESSAGES.read(payload)
        assert request is not None
        kept = [request.messages[0], *request.messages[2:]]  # the assistant's turn dropped: the rest written again
        return lambda: MESSAGES.write(payload, request, kept), orjson.dumps(payload)

    written = orjson.loads(writing(100)[0]())
    assert sum("cache_control" in block for block in written["messages"][-1]["content"]) == MAX_BREAKPOINTS
    growth, costs = growth_in_parses(lambda results: in_parses(*writing(results)))
    # On the old main: 9, 16 and 41 parses of the body; now 2 to 5, falling.
    assert growth < MAX_GROWTH, f"{SERIES} breakpoints cost {[round(c, 1) for c in costs]} parses of the body"
