"""The Responses fake's prompt cache (OpenAI's: any earlier prefix, in 128-token steps from 1,024) and its
agent's answer to Codex's own compaction."""

from __future__ import annotations

from typing import Any

from tests.support.responses import CHECKPOINT, TASK_MARKER, FakeResponses, TaskAgent, steps_done


def user(text: str) -> dict[str, Any]:
    return {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}


def cached(fake: FakeResponses, items: list[dict[str, Any]]) -> tuple[int, int]:
    """(cached tokens, input tokens) the fake reports for a request of these items."""
    status, body, _ = fake.answer({"model": "gpt-test", "prompt_cache_key": "k", "input": items})
    assert status == 200 and body is not None
    return body["usage"]["input_tokens_details"]["cached_tokens"], body["usage"]["input_tokens"]


def long_text(name: str, words: int) -> str:
    return " ".join(f"{name}{n}" for n in range(words))


def test_the_cached_part_is_the_longest_earlier_prefix_in_steps_of_128_tokens() -> None:
    fake = FakeResponses()
    first, second, third = user(long_text("alpha", 700)), user(long_text("beta", 300)), user("and then?")
    assert cached(fake, [first, second]) == (0, fake.count({}, [first, second])[0])  # nothing seen yet
    prefix = fake.count({}, [first, second])[0]
    hit, total = cached(fake, [first, second, third])
    assert hit == prefix // 128 * 128 and hit % 128 == 0 and 1_024 <= hit <= prefix < total
    assert hit < prefix  # rounded down: this prefix is not a multiple of 128
    cached(fake, [first, user("a detour")])  # the last request shares less, an earlier one more: that one counts
    longer = [first, second, third, user("more")]
    assert cached(fake, longer)[0] == fake.count({}, [first, second, third])[0] // 128 * 128
    line = fake.bill.lines[-1]
    assert (line.kind, line.cache_read + line.uncached, line.cache_write) == ("agent", fake.count({}, longer)[0], 0)


def test_nothing_under_1024_tokens_is_cached() -> None:
    fake = FakeResponses()
    short = [user(long_text("gamma", 150))]
    assert fake.count({}, short)[0] < 1_024
    cached(fake, short)
    assert cached(fake, [*short, user("again")])[0] == 0


def test_the_agent_summarises_on_codexs_checkpoint_and_goes_on_from_its_summary() -> None:
    agent = TaskAgent(steps=5, output_lines=1)
    task = user(f"Do the {TASK_MARKER}: run the steps one by one.")
    call = {"type": "function_call", "call_id": "c1", "name": "shell", "arguments": "{}"}
    output = {"type": "function_call_output", "call_id": "c1", "output": "STEP 2 DONE"}
    checkpoint = user(f"You are performing a {CHECKPOINT}. Create a handoff summary.")
    (summary,) = agent.next_output([task, call, output, checkpoint], [], 1)
    text = summary["content"][0]["text"]
    assert f"Do the {TASK_MARKER}: run the steps one by one." in text and "step 3 is next" in text
    resumed = [task, user(f"Another language model started to solve this problem...\n{text}")]
    assert steps_done(resumed) == 2
    assert steps_done([*resumed, {**call, "call_id": "c2"}, {**output, "call_id": "c2", "output": "STEP 3 DONE"}]) == 3
    assert "step 3" in str(agent.next_output(resumed, [{"type": "function", "name": "shell"}], 2))
