"""The varying tool outputs of the long cost task, and what the benchmark reads from the requests about them."""

from __future__ import annotations

import statistics
import subprocess

from tests.support.gemini import GeminiTaskAgent
from tests.support.messages import MessagesTaskAgent
from tests.support.responses import TaskAgent
from tests.support.tool_outputs import lognormal_tokens, newest_kept, rewrites, step_lines, tokens_per_line


def test_the_sizes_are_seeded_with_a_long_tail_under_the_cap() -> None:
    sizes = lognormal_tokens(2_000, seed=7)
    assert sizes == lognormal_tokens(2_000, seed=7) != lognormal_tokens(2_000, seed=8)
    assert 900 < statistics.median(sizes) < 1_100
    assert 1_600 < statistics.mean(sizes) < 2_000
    assert max(sizes) == 16_000  # a few past the cap are held at it


def test_each_step_prints_its_own_lines_and_says_which_step_it_is() -> None:
    for agent in (
        TaskAgent(step_lines=(3, 40)),
        MessagesTaskAgent(step_lines=(3, 40)),
        GeminiTaskAgent(step_lines=(3, 40)),
    ):
        for step, lines in ((1, 3), (2, 40), (3, 200)):  # past the sequence: `output_lines`
            printed = subprocess.run(["bash", "-c", agent.command(step)], capture_output=True, text=True, check=True)
            assert printed.stdout == agent.output(step) + "\n"
            assert len(printed.stdout.splitlines()) == lines + 1
            assert all(f"step {step} " in line or f"STEP {step} " in line for line in printed.stdout.splitlines())


def test_the_fixed_number_of_lines_is_unchanged_without_a_sequence() -> None:
    assert TaskAgent(output_lines=170).command(4) == TaskAgent(output_lines=170, step_lines=()).command(4)
    assert "seq 1 170)" in TaskAgent(output_lines=170).command(4)
    assert "1 60;" in GeminiTaskAgent(output_lines=60).command(4)


def test_sizes_become_lines_at_the_fakes_tokens_per_line() -> None:
    per_line = tokens_per_line(TaskAgent(output_lines=1_000).output, 1_000)
    assert 15 < per_line < 30
    assert step_lines([1, 1_000, 16_000], per_line) == (1, round(1_000 / per_line), round(16_000 / per_line))


def test_a_request_keeps_the_newest_five_only_with_each_of_them_whole() -> None:
    agent = TaskAgent(step_lines=(2,) * 8)
    outputs = {step: agent.output(step) for step in range(1, 9)}
    whole = {"input": [{"type": "function_call_output", "output": outputs[step]} for step in range(1, 8)]}
    assert newest_kept(whole, outputs) is True
    masked = {"input": [*whole["input"][:2], {"output": "[masked]"}, *whole["input"][3:]]}  # step 3 of 3 to 7
    assert newest_kept(masked, outputs) is False
    older = {"input": [{"output": "[masked]"}, *whole["input"][1:]]}  # step 1 is not among the newest five
    assert newest_kept(older, outputs) is True
    cut = {"input": [*whole["input"][:-1], {"output": outputs[7][:-5]}]}  # the latest, cut short
    assert newest_kept(cut, outputs) is False
    assert newest_kept({"input": [{"role": "user", "content": "hi"}]}, outputs) is None


def test_a_rewrite_is_a_prompt_that_does_not_begin_with_the_previous_one() -> None:
    system = [{"type": "text", "text": "you are an agent", "cache_control": {"type": "ephemeral"}}]
    first = {"system": system, "messages": [{"role": "user", "content": [{"type": "text", "text": "a"}]}]}
    marked = {"role": "user", "content": [{"type": "text", "text": "a", "cache_control": {"type": "ephemeral"}}]}
    grown = {"system": system, "messages": [marked, {"role": "assistant", "content": "b"}]}  # a marker moved: none
    summarized = {"system": system, "messages": [{"role": "user", "content": "summary"}]}
    again = {
        "system": system,
        "messages": [{"role": "user", "content": "summary"}, {"role": "assistant", "content": "c"}],
    }
    assert rewrites([first, grown, summarized, again]) == 1
    assert rewrites([{"input": "hi"}, {"input": [{"role": "user", "content": "hi"}]}]) == 1
