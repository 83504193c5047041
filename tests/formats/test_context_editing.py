"""Anthropic's context edits as inflight does them for an upstream without them: what each option clears,
and the report, as Anthropic words it."""

from __future__ import annotations

from typing import Any

import pytest

from inflight.errors import BadRequest
from inflight.formats.context_editing import CLEARED_RESULT, MAX_EDITS, apply_edits, asks_edits


def count(text: str) -> int:
    return len(text) // 4


def conversation(turns: int, *, tool: str = "Bash") -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Do the task."}]
    for n in range(turns):
        thinking = {"type": "thinking", "thinking": f"Now step {n}, thinking it over.", "signature": f"s{n}"}
        use = {"type": "tool_use", "id": f"t{n}", "name": tool if n % 2 else "Bash", "input": {"command": f"step {n}"}}
        result = {"type": "tool_result", "tool_use_id": f"t{n}", "content": f"output of step {n} " * 50}
        messages += [{"role": "assistant", "content": [thinking, use]}, {"role": "user", "content": [result]}]
    return messages


def results(messages: list[dict[str, Any]]) -> list[str]:
    return [b["content"] for m in messages if m["role"] == "user" for b in m["content"] if isinstance(b, dict)]


def edit(payload: dict[str, Any], prompt_tokens: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    edited = apply_edits(payload, prompt_tokens=prompt_tokens, count=count)
    assert "context_management" not in edited.payload and payload["messages"] != []  # the client's body untouched
    return edited.payload["messages"], edited.applied


def test_old_tool_results_are_cleared_past_the_trigger_keeping_the_latest() -> None:
    messages = conversation(6)
    body = {"messages": messages, "context_management": {"edits": [{"type": "clear_tool_uses_20250919"}]}}
    assert asks_edits(body) and not asks_edits({"messages": messages})
    assert edit(body, prompt_tokens=90_000) == (messages, [])  # under the default trigger (100k): nothing
    edited, applied = edit(body, prompt_tokens=120_000)
    assert results(edited)[:3] == [CLEARED_RESULT] * 3 and results(edited)[3:] == results(messages)[3:]  # keep 3
    [report] = applied
    assert report["type"] == "clear_tool_uses_20250919" and report["cleared_tool_uses"] == 3
    assert report["cleared_input_tokens"] == sum(count(r) - count(CLEARED_RESULT) for r in results(messages)[:3])
    assert [m for m in edited if m["role"] == "assistant"] == [m for m in messages if m["role"] == "assistant"]
    assert messages[2]["content"][0]["content"] != CLEARED_RESULT  # the client's messages were not edited


@pytest.mark.parametrize(
    ("options", "cleared"),
    [
        ({"trigger": {"type": "tool_uses", "value": 5}, "keep": {"type": "tool_uses", "value": 1}}, 5),
        ({"trigger": {"type": "tool_uses", "value": 6}}, 0),  # 6 uses: not past the trigger
        ({"trigger": {"type": "input_tokens", "value": 1000}, "exclude_tools": ["Read"]}, 2),  # t1 is Read
        (
            {
                "trigger": {"type": "input_tokens", "value": 1000},
                "clear_at_least": {"type": "input_tokens", "value": 10**6},
            },
            0,
        ),
    ],
    ids=["tool-uses-trigger-keep-1", "under-the-trigger", "excluded-tool", "not-enough-to-clear"],
)
def test_trigger_keep_exclude_and_clear_at_least(options: dict[str, Any], cleared: int) -> None:
    messages = conversation(6, tool="Read")
    body = {"messages": messages, "context_management": {"edits": [{"type": "clear_tool_uses_20250919", **options}]}}
    edited, applied = edit(body, prompt_tokens=5_000)
    assert results(edited).count(CLEARED_RESULT) == cleared
    assert [r["cleared_tool_uses"] for r in applied] == ([cleared] if cleared else [])


def test_tool_inputs_are_cleared_when_asked() -> None:
    messages = conversation(5)
    clear = {
        "type": "clear_tool_uses_20250919",
        "trigger": {"type": "tool_uses", "value": 1},
        "clear_tool_inputs": True,
    }
    edited, _ = edit({"messages": messages, "context_management": {"edits": [clear]}}, prompt_tokens=1)
    inputs = [b["input"] for m in edited if m["role"] == "assistant" for b in m["content"] if b["type"] == "tool_use"]
    assert inputs[:2] == [{}, {}] and inputs[2:] == [{"command": f"step {n}"} for n in (2, 3, 4)]


def test_thinking_is_cleared_from_all_but_the_latest_turns_unless_all_are_kept() -> None:
    messages = conversation(4)
    messages.insert(1, {"role": "assistant", "content": [{"type": "thinking", "thinking": "alone", "signature": "x"}]})
    messages.insert(2, {"role": "user", "content": "go on"})
    keep_two = {"type": "clear_thinking_20251015", "keep": {"type": "thinking_turns", "value": 2}}
    edited, applied = edit({"messages": messages, "context_management": {"edits": [keep_two]}}, prompt_tokens=1)
    with_thinking = [m for m in edited if m["role"] == "assistant" and m["content"][0]["type"] == "thinking"]
    assert with_thinking == [messages[1], messages[7], messages[9]]  # thinking alone stays; the latest two
    [report] = applied
    assert report == {"type": "clear_thinking_20251015", "cleared_thinking_turns": 2, "cleared_input_tokens": 14}
    keep_all = {"type": "clear_thinking_20251015", "keep": "all"}  # what Claude Code sends
    assert edit({"messages": messages, "context_management": {"edits": [keep_all]}}, prompt_tokens=1) == (messages, [])
    default = {"type": "clear_thinking_20251015"}  # keeps the latest turn's only
    edited, _ = edit({"messages": messages, "context_management": {"edits": [default]}}, prompt_tokens=1)
    assert sum(1 for m in edited if m["role"] == "assistant" and m["content"][0]["type"] == "thinking") == 2


def test_values_of_the_wrong_type_name_nothing_and_raise_nothing() -> None:
    messages = conversation(5)
    clear = {
        "type": "clear_tool_uses_20250919",
        "trigger": {"type": "tool_uses", "value": "many"},
        "keep": 7,
        "exclude_tools": 5,
        "clear_tool_inputs": [{"n": 1}],
        "clear_at_least": [],
    }
    edited, applied = edit({"messages": messages, "context_management": {"edits": [clear, "junk", {}]}}, 1)
    assert results(edited).count(CLEARED_RESULT) == 2 and [a["cleared_tool_uses"] for a in applied] == [2]


def test_more_edits_than_inflight_does_are_refused_before_any_is_done() -> None:
    """Each edit walks the whole conversation: 8,000 no-op edits in a 1 MB body froze the proxy for 6-7 s."""
    noop = {"type": "clear_thinking_20251015", "keep": "all"}
    body = {"messages": conversation(3), "context_management": {"edits": [noop] * (MAX_EDITS + 1)}}
    with pytest.raises(BadRequest) as refused:
        apply_edits(body, prompt_tokens=200_000, count=count)
    assert refused.value.param == "context_management.edits" and f"at most {MAX_EDITS}" in refused.value.message
    _, applied = edit({**body, "context_management": {"edits": [noop] * MAX_EDITS}}, 200_000)
    assert applied == []


class Counting:
    """A `count` that keeps every text it was asked to count."""

    def __init__(self) -> None:
        self.texts: list[str] = []

    def __call__(self, text: str) -> int:
        self.texts.append(text)
        return count(text)


def test_the_edits_read_each_block_a_bounded_number_of_times() -> None:
    """The work of the edits done grows with the conversation, not with it times the edits asked."""
    reads = []
    for turns in (50, 200, 800):
        counting = Counting()
        edits = [{"type": "clear_tool_uses_20250919", "keep": {"type": "tool_uses", "value": 0}}] * MAX_EDITS
        body = {"messages": conversation(turns), "context_management": {"edits": edits}}
        apply_edits(body, prompt_tokens=10**6, count=counting)
        reads.append(len(counting.texts) / turns)
    assert reads[0] == reads[-1] <= 2, reads  # each result counted once (and the placeholder once), never again
