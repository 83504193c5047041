"""The pure compaction core: stages, markers, and its invariants over generated and real conversations."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from inflight.compaction import Budget, Compactor, Conversation, Outcome, Record, SummaryJob, build_compactor
from inflight.compaction.conversation import head_length, latest_request_index, problems
from inflight.compaction.draft import Draft
from inflight.compaction.stages.mask import placeholder
from inflight.compaction.stages.truncate import Limits, truncate_text
from inflight.config import OBSERVATION_PATTERN, Compaction
from inflight.tokens import TokenCounter

TRACES = sorted((Path(__file__).resolve().parents[1] / "fixtures" / "traces").glob("*.json"))
COUNTER = TokenCounter()
ENCODING = COUNTER.encoding("o200k_base")


def conversation_of(messages: list[dict[str, Any]], tools: list[Any] | None = None) -> Conversation:
    count = COUNTER.count_request({"messages": messages, "tools": tools}, "o200k_base")
    return Conversation(messages, count.messages, count.digests, count.fixed)


@dataclass
class Engine:
    """A compactor as the proxy builds it, with the summarizer calls it made."""

    settings: Compaction
    compactor: Compactor
    calls: list[SummaryJob] = field(default_factory=list)

    async def run(self, conversation: Conversation, **options: Any) -> Outcome | None:
        return await self.compactor.run(conversation, **options)


def compactor(
    settings: Compaction | None = None, *, summary: str | None = "## Original task\nA summary.", summarizer: bool = True
) -> Engine:
    """`summary`: what the summarizer answers (None: it is down); `summarizer=False`: there is none to call (the
    proxy's case when none is configured or the client's budget is spent), so the ledger stands in for free."""
    calls: list[SummaryJob] = []

    async def summarize(job: SummaryJob) -> str:
        calls.append(job)
        if summary is None:
            raise ConnectionError("summarizer down")
        return summary

    settings = settings or Compaction()
    built = build_compactor(
        settings,
        count_message=lambda m: COUNTER.count_message(m, ENCODING),
        count_text=lambda t: len(ENCODING.encode_ordinary(t)),
        summarize=summarize if summarizer else None,
        summarizer_input_tokens=100_000,
    )
    return Engine(settings, built, calls)


async def run(
    messages: list[dict[str, Any]], limit: int, *, record: Record | None = None, engine: Engine | None = None
) -> Outcome:
    engine = engine or compactor()
    outcome = await engine.run(conversation_of(messages), budget=Budget.of(limit, engine.settings), record=record)
    assert outcome is not None
    return outcome


def test_head_and_tail_are_kept_with_a_marker_that_counts_what_was_cut() -> None:
    text = "\n".join(f"line {i} " + "x" * 40 for i in range(1000))
    cut = truncate_text(text, Limits(max_lines=188, max_bytes=51200))
    assert cut is not None
    lines = cut.split("\n")
    assert lines[0] == "line 0 " + "x" * 40 and lines[-1] == "line 999 " + "x" * 40
    assert lines[94] == "[... omitted 812 of 1,000 lines (40,594 bytes) ...]"
    assert truncate_text("short", Limits(2000, 51200)) is None


def test_a_masked_result_names_the_call_and_its_size() -> None:
    message = {"role": "tool", "tool_call_id": "call_1", "content": "x" * 9000}
    masked = placeholder(message, {"name": "read_file", "arguments": '{"path": "src/app.py"}'}, 3204)
    assert masked == {
        "role": "tool",
        "tool_call_id": "call_1",
        "content": '[tool output pruned: read_file(path="src/app.py") returned 3,204 tokens]',
    }


def agent_conversation(turns: int, *, output_lines: int = 60, final_user: bool = False) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a coding agent."},
        {"role": "user", "content": "Fix the failing test in src/app.py."},
    ]
    for turn in range(turns):
        call = {"id": f"call_{turn}", "type": "function", "function": {"name": "bash", "arguments": f'{{"n": {turn}}}'}}
        messages.append({"role": "assistant", "content": f"Step {turn}.", "tool_calls": [call]})
        output = "\n".join(f"{turn}:{i} output line with some words in it" for i in range(output_lines))
        messages.append({"role": "tool", "tool_call_id": f"call_{turn}", "content": output})
    if final_user:
        messages.append({"role": "user", "name": "reviewer", "content": [{"type": "text", "text": "Now add a test."}]})
    return messages


async def test_stages_run_in_order_and_stop_once_under_target() -> None:
    messages = agent_conversation(12)
    total = conversation_of(messages).tokens
    # Just over prune_at: masking alone gets under the target, no summary.
    outcome = await run(messages, int(total / 0.75))
    assert outcome.actions == ["mask"]
    assert outcome.tokens_after <= Budget.of(int(total / 0.75), Compaction()).target
    masked = [m["content"].startswith("[tool output pruned") for m in outcome.messages if m["role"] == "tool"]
    assert masked == [True] * 7 + [False] * 5  # all but the newest five
    # Far over, with many small results: masking is not enough, so a summary replaces the middle.
    messages = agent_conversation(40, output_lines=5)
    total = conversation_of(messages).tokens
    outcome = await run(messages, total // 3)
    assert [action for action in outcome.actions if action != "churn"][-1] == "summarize"
    assert outcome.messages[2]["content"].startswith("[Previous conversation summary]\n## Original task")
    assert outcome.tokens_after <= total // 3
    assert problems(outcome.messages) == []


async def test_re_applying_the_record_needs_no_summarizer_and_gives_the_same_bytes() -> None:
    engine = compactor()
    messages = agent_conversation(40, output_lines=5)
    limit = conversation_of(messages).tokens // 3
    first = await run(messages, limit, engine=engine)
    assert len(engine.calls) == 1
    grown = messages + agent_conversation(1, output_lines=5)[2:]
    grown[-2]["tool_calls"][0]["id"] = grown[-1]["tool_call_id"] = "call_new"
    second = await run(grown, limit, record=first.record, engine=engine)
    assert len(engine.calls) == 1
    assert second.actions[0] == "summary-cached"
    assert json.dumps(second.messages[: len(first.messages)]) == json.dumps(first.messages)


async def test_a_new_crossing_extends_the_summary_instead_of_starting_over() -> None:
    engine = compactor()
    messages = agent_conversation(40, output_lines=5)
    limit = conversation_of(messages).tokens // 3
    first = await run(messages, limit, engine=engine)
    grown = agent_conversation(80, output_lines=5)
    second = await run(grown, limit, record=first.record, engine=engine)
    assert "summarize" in second.actions
    job = engine.calls[-1]
    assert job.previous == "## Original task\nA summary."
    assert second.record.prefix_len > first.record.prefix_len


async def test_with_a_record_masking_waits_for_summarize_at_so_last_turns_bytes_stay_put() -> None:
    limit = int(conversation_of(agent_conversation(12)).tokens / 0.75)
    budget = Budget.of(limit, Compaction())
    first = await run(agent_conversation(12), limit)
    assert first.actions == ["mask"]
    previous, record, band_turns = first.messages, first.record, 0
    for turns in range(13, 60):
        conversation = conversation_of(agent_conversation(turns))
        as_recorded = Draft.from_record(record, conversation).tokens(conversation)
        outcome = await run(agent_conversation(turns), limit, record=record)
        if as_recorded > budget.summarize_at:
            # Only now does a new result get masked, and the request comes back under summarize_at.
            assert outcome.messages[: len(previous)] != previous
            assert outcome.tokens_after <= budget.summarize_at
            break
        # Between prune_at and summarize_at the record is re-applied as it is: the sixth-newest
        # result stays unmasked, and this request begins with the last one, byte for byte.
        assert outcome.messages[: len(previous)] == previous
        band_turns += as_recorded > budget.prune_at
        previous, record = outcome.messages, outcome.record
    else:
        pytest.fail("the conversation never crossed summarize_at")
    assert band_turns >= 2


async def test_a_failing_summarizer_falls_back_to_a_local_digest() -> None:
    messages = agent_conversation(12, output_lines=40)
    outcome = await run(messages, conversation_of(messages).tokens // 4, engine=compactor(summary=None))
    assert "fallback" in outcome.actions
    digest = outcome.messages[2]["content"]
    assert "no summary could be made" in digest and "## Ledger" in digest
    dropped = messages[2 : next(i for i, m in enumerate(messages) if m is outcome.messages[3])]
    for turn in {int(m["tool_calls"][0]["function"]["arguments"][6:-1]) for m in dropped if m.get("tool_calls")}:
        assert f"`bash {turn}`" in digest  # every dropped command, verbatim
    assert outcome.notes["summarizer_error"] == "ConnectionError"


async def test_the_last_user_message_and_its_parts_survive() -> None:
    messages = agent_conversation(40, output_lines=5, final_user=True)
    outcome = await run(messages, conversation_of(messages).tokens // 3)
    assert outcome.messages[-1] == messages[-1]
    assert outcome.messages[0] == messages[0]


async def test_a_request_that_cannot_fit_says_so() -> None:
    # The latest user request is never cut: alone over the limit, the request cannot fit.
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "word " * 5000}]
    outcome = await run(messages, 1000)
    assert not outcome.fits
    assert outcome.messages == messages


async def test_a_head_too_big_loses_its_largest_message_first_never_the_request() -> None:
    demonstration = "\n".join(f"demo line {i} " + "x" * 40 for i in range(400))
    messages = [
        {"role": "system", "content": "You are an agent. " * 50},
        {"role": "user", "content": demonstration},
        {"role": "user", "content": "ISSUE: TimeDelta serialization precision is wrong."},
    ]
    outcome = await run(messages, 1500)
    assert outcome.fits
    system, demo, issue = outcome.messages
    assert system == messages[0] and issue == messages[2]
    assert "[... omitted" in demo["content"] and demo["content"].startswith("demo line 0 ")


async def test_a_huge_last_observation_is_cut_before_the_head() -> None:
    head: list[dict[str, Any]] = [
        {"role": "system", "content": "You are an agent."},
        {"role": "user", "content": "demonstration " * 300},
        {"role": "user", "content": "ISSUE: the parser drops the last field of each record. " * 20},
    ]
    function = {"name": "bash", "arguments": '{"cmd": "cat big.log"}'}
    call: dict[str, Any] = {"id": "c1", "type": "function", "function": function}
    huge = "\n".join(f"log line {i}" for i in range(5000))
    follow_up: dict[str, Any] = {"role": "user", "content": "Go on."}
    messages = [*head, {"role": "assistant", "content": None, "tool_calls": [call]}]
    messages += [{"role": "tool", "tool_call_id": "c1", "content": huge}, follow_up]
    # Room for the head and a sliver of the observation: on the old main, once the observation was
    # halved below the task's size, the task itself was halved next.
    limit = conversation_of([*head, follow_up]).tokens + 150
    outcome = await run(messages, limit)
    assert outcome.messages[0] == head[0] and outcome.messages[2] == head[2]  # the task is never cut
    assert "[... omitted" in outcome.messages[4]["content"]
    assert outcome.messages[-1] == follow_up


# --- invariants over generated conversations ------------------------------------------------------

words = st.text(alphabet="abcdefgh \n", min_size=0, max_size=400)


@st.composite
def conversations(draw: st.DrawFn) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [{"role": "system", "content": draw(words)}]
    if draw(st.booleans()):
        messages.append({"role": "developer", "content": draw(words)})
    messages.append({"role": "user", "content": draw(words)})
    for turn in range(draw(st.integers(0, 14))):
        kind = draw(st.sampled_from(["tools", "tools", "text", "user", "parts"]))
        if kind == "tools":
            ids = [f"c{turn}_{i}" for i in range(draw(st.integers(1, 3)))]
            calls = [{"id": i, "type": "function", "function": {"name": "run", "arguments": '{"x": 1}'}} for i in ids]
            messages.append({"role": "assistant", "content": draw(st.one_of(st.none(), words)), "tool_calls": calls})
            for call_id in ids:
                size = draw(st.integers(0, 3000))
                messages.append({"role": "tool", "tool_call_id": call_id, "content": "out\n" * size})
        elif kind == "text":
            messages.append({"role": "assistant", "content": draw(words)})
        elif kind == "parts":
            parts = [{"type": "text", "text": draw(words)}, {"type": "text", "text": draw(words)}]
            messages.append({"role": "user", "name": "helper", "content": parts})
        else:
            messages.append({"role": "user", "content": draw(words)})
    return messages


def check_invariants(
    original: list[dict[str, Any]], outcome: Outcome, limit: int, tools: list[Any] | None = None
) -> None:
    out = outcome.messages
    assert problems(out) == [], problems(out)
    head = original[: head_length(original)]
    for kept, message in zip(out, head, strict=False):  # the head leads, whole or cut with a marker
        assert kept == message or (kept["role"] == message["role"] and "[... omitted" in str(kept["content"]))
    latest = latest_request_index(original, re.compile(OBSERVATION_PATTERN, re.MULTILINE))
    assert latest is None or original[latest] in out  # the latest request (an observation may be cut)
    if outcome.fits:
        assert outcome.tokens_after <= limit
        assert conversation_of(out, tools).tokens == outcome.tokens_after
    for message in out:  # a kept message keeps its name and its parts
        if "name" in message:
            assert message in original or message["name"] == "helper"
        if isinstance(message.get("content"), list):
            assert all(part["type"] == "text" for part in message["content"])


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(conversation=conversations(), fraction=st.floats(0.05, 1.2), llm=st.booleans())
async def test_compaction_keeps_conversations_valid(
    conversation: list[dict[str, Any]], fraction: float, llm: bool
) -> None:
    engine = compactor(summary="checkpoint" if llm else None)
    limit = max(int(conversation_of(conversation).tokens * fraction), 50)
    outcome = await engine.run(conversation_of(conversation), budget=Budget.of(limit, Compaction()), record=None)
    if outcome is None:
        assert conversation_of(conversation).tokens <= Budget.of(limit, Compaction()).prune_at
        return
    check_invariants(conversation, outcome, limit)


def test_the_traces_are_there() -> None:
    assert len(TRACES) == 4  # an empty glob would silently skip the trace tests below


@pytest.mark.parametrize("trace", TRACES, ids=lambda p: p.stem)
@pytest.mark.parametrize("limit", [1500, 3000, 6000])
async def test_traces_stay_valid_when_compacted(trace: Path, limit: int) -> None:
    body = json.loads(trace.read_text())
    count = COUNTER.count_request(body, "o200k_base")
    conversation = Conversation(body["messages"], count.messages, count.digests, count.fixed)
    outcome = await compactor().run(conversation, budget=Budget.of(limit, Compaction()), record=None, force=True)
    assert outcome is not None
    check_invariants(body["messages"], outcome, limit, body.get("tools"))


async def test_a_reused_call_id_is_paired_with_the_nearest_call_before_its_result() -> None:
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are an agent."},
        {"role": "user", "content": "Fix it."},
    ]
    for turn in range(10):  # the same id every turn, as some agents send
        call = {
            "id": "call_1",
            "type": "function",
            "function": {"name": "bash", "arguments": f'{{"cmd": "step{turn}"}}'},
        }
        messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        messages.append({"role": "tool", "tool_call_id": "call_1", "content": f"output of step {turn}\n" * 80})
    outcome = await run(messages, int(conversation_of(messages).tokens / 0.75))
    sent_results = [m for m in outcome.messages if m["role"] == "tool"]
    assert len(sent_results) == 10  # masked in place, none summarized away
    masked = [(turn, m["content"]) for turn, m in enumerate(sent_results) if m["content"].startswith("[tool output")]
    assert masked
    for turn, text in masked:
        assert f"step{turn}" in text, text  # the placeholder names this result's own command


def text_action_conversation(turns: int) -> list[dict[str, Any]]:
    """An agent acting through text: commands in the assistant's words, observations as user messages."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You act by writing one command in a fenced block."},
        {"role": "user", "content": "Here is a demonstration of solving an issue. " * 40},
        {"role": "user", "content": "ISSUE: TimeDelta serialization loses precision."},
    ]
    for turn in range(turns):
        messages.append({"role": "assistant", "content": f"Let me look.\n```\ngrep -n step{turn} src/fields.py\n```"})
        messages.append({"role": "user", "content": f"{turn}: match line\n" * 30 + "(Open file: n/a)\nbash-$"})
    return messages


async def test_the_verbatim_tail_starts_with_a_whole_turn_and_the_head_stays() -> None:
    messages = text_action_conversation(30)
    outcome = await run(messages, conversation_of(messages).tokens // 3)
    assert outcome.messages[:3] == messages[:3]  # both user messages of the head: the task is not summarized
    summary_at = next(i for i, m in enumerate(outcome.messages) if str(m.get("content")).startswith("[Previous"))
    assert outcome.messages[summary_at + 1]["role"] == "assistant"  # not an observation without its command


async def test_a_text_action_agents_observations_are_masked_with_their_command() -> None:
    messages = text_action_conversation(12)
    for message in messages[4::2]:  # SWE-agent's prompt lines close each observation
        message["content"] += "\n(Open file: n/a)\n(Current directory: /repo)\nbash-$"
    messages.append({"role": "user", "content": "Now also handle negative values."})
    outcome = await run(messages, int(conversation_of(messages).tokens / 0.75))
    masked = [m["content"] for m in outcome.messages if str(m.get("content")).startswith("[observation pruned")]
    assert masked and "`grep -n step0 src/fields.py`" in masked[0]
    assert outcome.messages[:3] == messages[:3] and outcome.messages[-1] == messages[-1]


async def test_observations_are_left_alone_when_the_pattern_is_off() -> None:
    messages = text_action_conversation(12)
    settings = Compaction(mask={"observation_pattern": None})
    outcome = await run(messages, int(conversation_of(messages).tokens / 0.75), engine=compactor(settings))
    assert not any(str(m.get("content")).startswith("[observation pruned") for m in outcome.messages)


async def test_a_text_action_agents_huge_latest_observation_can_be_cut() -> None:
    messages = text_action_conversation(3)
    messages.append({"role": "assistant", "content": "Run it.\n```\npython big.py\n```"})
    messages.append(
        {"role": "user", "content": "\n".join(f"line {i}" for i in range(6000)) + "\n(Open file: n/a)\nbash-$"}
    )
    outcome = await run(messages, 2500)
    assert outcome.fits and "[... omitted" in outcome.messages[-1]["content"]
    assert outcome.messages[2] == messages[2]  # the task, the latest request, is whole


async def test_a_short_result_is_not_masked_into_something_longer() -> None:
    messages = agent_conversation(12, output_lines=40)
    messages[3]["content"] = "FAILED"
    outcome = await run(messages, int(conversation_of(messages).tokens / 0.75))
    assert outcome.messages[3]["content"] == "FAILED"


async def test_a_developer_message_after_the_head_is_cut_only_after_every_observation() -> None:
    function = {"name": "bash", "arguments": '{"cmd": "cat big.log"}'}
    call: dict[str, Any] = {"id": "c1", "type": "function", "function": function}
    rules: dict[str, Any] = {"role": "developer", "content": "Rule: never edit generated files. " * 60}
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are an agent."},
        {"role": "user", "content": "Fix the parser."},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": "\n".join(f"log line {i}" for i in range(5000))},
        rules,
        {"role": "user", "content": "Go on."},
    ]
    limit = conversation_of([*messages[:3], *messages[4:]]).tokens + 150
    outcome = await run(messages, limit)
    assert outcome.messages[4] == rules  # the observation is cut down first, the developer's rules kept
    assert "[... omitted" in outcome.messages[3]["content"]


async def test_masking_keeps_the_newest_results_whole_and_goes_further_only_when_they_do_not_fit() -> None:
    """Between prune_at and summarize_at, masking all but `keep_tool_results` leaves it above target: the newest
    results are the agent's recent work and stay whole all the same. Only when that recent work leaves no room for
    the next turns are just `keep_tool_results_min` kept; with no room for those, only the latest turn, and said."""
    messages = agent_conversation(20)
    total = conversation_of(messages).tokens
    limit = int(total / 0.8)  # over prune_at (0.7), under summarize_at (0.85): masking, no summary
    outcome = await run(messages, limit)
    masked = [m for m in outcome.messages if m.get("role") == "tool" and "pruned" in str(m.get("content"))]
    assert outcome.actions[0] == "mask"
    assert 20 - 8 <= len(masked) <= 20 - Compaction().mask.keep_tool_results  # a quarter of the budget stays too
    assert outcome.messages[-10:] == messages[-10:]  # the newest five calls and their results, verbatim
    squeezed = await run(messages, total // 3)  # no room for the newest five: the newest two stay whole
    assert squeezed.fits and squeezed.messages[-4:] == messages[-4:] and squeezed.messages[-10:] != messages[-10:]
    assert "recent_not_kept" in (await run(messages[:8], conversation_of(messages[:8]).tokens // 2)).notes
