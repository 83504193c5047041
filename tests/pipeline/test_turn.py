"""A turn decides a request's steps with no I/O: driven here by hand, event by event, against a real pipeline.

Each test plays the driver: it answers every command with the event a server would give, and checks the
next command and the turn's report. Only `Prepare` does work (the real compaction, in memory).
"""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
import pytest

from inflight.compaction.actions import Action
from inflight.config import load_settings
from inflight.formats import CHAT_COMPLETIONS, MESSAGES
from inflight.pipeline.engine import Mode, Options, Pipeline, build_pipeline
from inflight.pipeline.turn import (
    Answered,
    Command,
    CountExactly,
    Discover,
    Discovered,
    ExactCount,
    Prepare,
    Prepared,
    Relay,
    Send,
    Turn,
)
from inflight.policy.refusals import Refusal

WINDOW = 4_000


def pipeline(**compaction: Any) -> Pipeline:
    overrides: dict[str, Any] = {
        "models": {"gpt-4o": {"context_window": WINDOW}, "claude-sonnet-4-5": {"context_window": WINDOW}},
        "compaction": {"schedule": "thresholds", "reserve_tokens": 500, **compaction},
    }
    return build_pipeline(load_settings(None, overrides=overrides), summarizers=None)


def conversation(turns: int, *, words: int = 60) -> dict[str, Any]:
    """A coding agent's chat: the task, then `turns` tool calls each answered by `words` words of output."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a coding agent."},
        {"role": "user", "content": "Find why the tests fail in tests/test_io.py and fix it."},
    ]
    for n in range(turns):
        call = {"id": f"c{n}", "type": "function", "function": {"name": "bash", "arguments": '{"cmd": "pytest"}'}}
        messages.append({"role": "assistant", "content": f"Running step {n}.", "tool_calls": [call]})
        messages.append({"role": "tool", "tool_call_id": f"c{n}", "content": " ".join(["failed"] * words)})
    return {"model": "gpt-4o", "messages": messages}


def turn_of(pipe: Pipeline, body: dict[str, Any], options: Options | None = None) -> Turn:
    counted = pipe.count(orjson.dumps(body), body, CHAT_COMPLETIONS)
    assert counted is not None
    return Turn(pipe, counted, options or Options())


def prepared(pipe: Pipeline, command: Command) -> Prepared:
    """What the driver answers a `Prepare` with: the real compaction's body."""
    assert isinstance(command, Prepare)

    async def prepare() -> Prepared:
        made = await pipe.prepare(command.counted, command.accounting, command.options, retry=command.retry)
        return Prepared(made)

    return asyncio.run(prepare())


def test_a_request_that_fits_is_sent_as_it_came_held_for_a_refusal_and_relayed() -> None:
    pipe = pipeline()
    body = conversation(2)
    turn = turn_of(pipe, body)
    send = turn.send(prepared(pipe, turn.start()))
    assert isinstance(send, Send) and send.hold and not send.rewritten
    assert send.body == orjson.dumps(body)
    relay = turn.send(Answered(200))
    assert isinstance(relay, Relay) and relay.archived is not None
    assert turn.report.sent is not None and turn.report.sent.actions == (Action.NONE,)
    assert turn.report.headers()["x-inflight-actions"] == "none"
    assert not turn.report.retried


def test_a_refusal_is_retried_once_compacted_to_what_it_taught_and_the_retry_not_held() -> None:
    pipe = pipeline()
    turn = turn_of(pipe, conversation(12))
    first = turn.send(prepared(pipe, turn.start()))
    assert isinstance(first, Send) and first.hold
    retry = turn.send(Answered(400, b"{}", Refusal("openai", context_window=2_000, prompt_tokens=3_900)))
    assert isinstance(retry, Prepare) and retry.retry is not None
    assert retry.retry.limit <= 2_000 - 500
    again = turn.send(prepared(pipe, retry))
    assert isinstance(again, Send) and not again.hold and again.rewritten
    assert isinstance(turn.send(Answered(200)), Relay)
    report = turn.report
    assert report.retried and report.sent is not None and report.sent.actions[-1] == Action.RETRY
    assert report.headers()["x-inflight-retried"] == "1"
    assert report.window is not None and report.window.context_window == 2_000  # the window the refusal named
    assert report.window.budget == retry.retry.limit
    assert turn.take_fields()["refused_by"] == "openai"


@pytest.mark.parametrize("mode", [Mode.OFF, Mode.SHADOW])
def test_off_and_shadow_send_the_clients_bytes_unheld_so_a_refusal_is_the_clients(mode: Mode) -> None:
    pipe = pipeline()
    body = conversation(12)
    turn = turn_of(pipe, body, Options(mode=mode))
    send = turn.send(prepared(pipe, turn.start()))
    assert isinstance(send, Send) and not send.hold and send.body == orjson.dumps(body)
    assert isinstance(turn.send(Answered(400)), Relay)
    assert turn.report.shadow_mode == (mode == Mode.SHADOW)
    assert not turn.report.retried


def test_a_request_over_its_budget_is_compacted_before_it_is_sent() -> None:
    pipe = pipeline()
    turn = turn_of(pipe, conversation(30))
    send = turn.send(prepared(pipe, turn.start()))
    assert isinstance(send, Send) and send.rewritten
    sent = turn.report.sent
    assert sent is not None and sent.compacted and sent.tokens_after < sent.tokens_before
    assert sent.tokens_after <= WINDOW - 500


def test_a_model_of_unknown_window_is_discovered_first() -> None:
    settings = load_settings(None, overrides={"discover_context_window": True})
    pipe = build_pipeline(settings, summarizers=None)
    body = {**conversation(1), "model": "some-local-model"}
    turn = turn_of(pipe, body)
    assert isinstance(turn.start(), Discover)
    assert isinstance(turn.send(Discovered()), Prepare)


def test_near_a_threshold_the_upstreams_exact_count_is_asked_and_used() -> None:
    overrides = {
        "models": {"claude-sonnet-4-5": {"context_window": WINDOW}},
        "messages": {"count_tokens": "near", "count_tokens_band": 1.0},
    }
    pipe = build_pipeline(load_settings(None, overrides=overrides), summarizers=None)
    body = {"model": "claude-sonnet-4-5", "max_tokens": 500, "messages": [{"role": "user", "content": "hello"}]}
    counted = pipe.count(orjson.dumps(body), body, MESSAGES)
    assert counted is not None
    turn = Turn(pipe, counted, Options())
    ask = turn.start()
    assert isinstance(ask, CountExactly)
    assert isinstance(turn.send(ExactCount(1_234)), Prepare)
    assert turn.report.window is not None and turn.report.window.prompt_tokens == 1_234
    assert turn.take_fields()["exact_count"] == 1_234
