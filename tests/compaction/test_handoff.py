"""The handoff an agent installs: the user's messages, the summary, then the latest turns with long text cut."""

from __future__ import annotations

from typing import Any

from inflight.compaction.facts import facts_of
from inflight.compaction.handoff import (
    END,
    LEDGER_CHARS,
    TAIL_CHARS,
    carried_handoff,
    handed_over,
    handoff_text,
    with_ledger,
    without_context,
)
from inflight.compaction.ledger import CUT_MARK, LEDGER_HEADING, Ledger
from inflight.compaction.middle import REPLACED_NOTE

SUMMARY = {"role": "user", "content": "[Previous conversation summary]\nThe parser is fixed."}


def compacted() -> tuple[list[dict[str, Any]], list[int | None]]:
    """A compaction's messages: the system prompt and the task (the head), the summary, then the latest turn."""
    call = {"id": "c9", "type": "function", "function": {"name": "bash", "arguments": '{"cmd": "pytest -q"}'}}
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are an agent."},
        {"role": "user", "content": "Fix the parser in src/app.py."},
        SUMMARY,
        {"role": "assistant", "content": "Running the tests.", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c9", "content": "x" * 5000 + "\n3 passed"},
    ]
    return messages, [0, 1, None, 17, 18]


def test_the_handoff_holds_the_task_the_summary_and_the_latest_turn_cut() -> None:
    messages, origins = compacted()
    text = handoff_text(messages, origins, head_len=2, keeps_user_messages=False)
    task, summary, tail = text.removesuffix(f"\n\n{END}").split("\n\n", 2)
    assert task.endswith("Fix the parser in src/app.py.") and "You are an agent." not in text
    assert summary == SUMMARY["content"]
    assert "Running the tests." in tail and 'bash(cmd="pytest -q")' in tail and tail.endswith("3 passed")
    assert text.endswith(END)
    assert "characters cut" in tail and len(tail) < 1_500


def test_an_agent_that_keeps_the_users_messages_gets_no_copy_and_instructions_are_said() -> None:
    messages, origins = compacted()
    text = handoff_text(messages, origins, head_len=2, keeps_user_messages=True, instructions="focus on tests")
    assert "Fix the parser" not in text and text.startswith(SUMMARY["content"])
    assert text.endswith(f"instructions for this summary: focus on tests\n\n{END}")


def test_with_nothing_summarized_the_turns_after_the_head_follow_the_task() -> None:
    messages, _ = compacted()
    del messages[2]
    text = handoff_text(messages, [0, 1, 2, 3], head_len=2, keeps_user_messages=False)
    assert "Fix the parser" in text and "Running the tests." in text and "[Previous" not in text


def test_a_long_tail_keeps_its_newest_turns() -> None:
    turns = [{"role": "assistant", "content": f"turn {n} " + "y" * 1_900} for n in range(40)]
    text = handoff_text([SUMMARY, *turns], [None, *range(40)], head_len=0, keeps_user_messages=True)
    assert "turn 39 " in text and "turn 0 " not in text and len(text) < TAIL_CHARS + 1_000


def test_the_agents_own_context_is_left_out_as_it_adds_it_again() -> None:
    messages, origins = compacted()
    messages[1] = {
        "role": "user",
        "content": "<system-reminder>\nToday is Monday.\n</system-reminder>\nFix the parser.",
    }
    text = handoff_text(messages, origins, head_len=2, keeps_user_messages=False, context_tag="system-reminder")
    assert "Today is Monday" not in text and "Fix the parser." in text


def test_a_handoff_installed_as_the_head_gives_only_its_users_messages_to_the_next() -> None:
    messages, origins = compacted()
    first = handoff_text(messages, origins, head_len=2, keeps_user_messages=False)
    messages[1] = {"role": "user", "content": f"This session is being continued.\nSummary:\n{first}"}
    second = handoff_text(messages, origins, head_len=2, keeps_user_messages=False)
    assert second.count("Fix the parser in src/app.py.") == 1 and second.count("This session") == 0
    assert second.count(SUMMARY["content"]) == 1


def step(n: int) -> list[dict[str, Any]]:
    """One turn: the assistant runs a command and its output comes back."""
    call = {"id": f"c{n}", "type": "function", "function": {"name": "bash", "arguments": f'{{"cmd": "step {n}"}}'}}
    return [
        {"role": "assistant", "content": f"Running step {n}.", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": f"c{n}", "content": f"output of step {n}\n" + "y" * 900 + f"\nSTEP {n} DONE"},
    ]


def installed(handoff: str) -> dict[str, Any]:
    """The message an agent starts its new conversation with: its own words around the handoff it was given."""
    return {"role": "user", "content": f"This session is being continued.\nSummary:\n{handoff}\n\nContinue the work."}


def handed_over_of(head: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], str]:
    """What `handed_over` finds in a head that holds an installed handoff: the task, and the note to extend."""
    handed = handed_over(head)
    assert handed is not None
    return handed


def test_a_few_turns_after_an_earlier_handoff_are_carried_with_its_summary_and_no_summarizer() -> None:
    messages, origins = compacted()
    first = handoff_text(messages, origins, head_len=2, keeps_user_messages=False)
    later = [installed(first), *step(1), *step(2)]
    text = carried_handoff(later, head_len=1, keeps_user_messages=False)
    assert text is not None and text.endswith(END)
    assert text.count("Fix the parser in src/app.py.") == 1 and text.count(SUMMARY["content"]) == 1
    assert "This session is being continued" not in text and "Continue the work" not in text
    # the earlier handoff's latest turn, then the new ones, in order, nothing nested
    assert text.index("Running the tests.") < text.index("Running step 1.") < text.index("Running step 2.")
    assert "STEP 2 DONE" in text and text.count(END) == 1


def test_turns_that_no_longer_fit_the_tail_are_not_carried_but_summarized() -> None:
    messages, origins = compacted()
    first = handoff_text(messages, origins, head_len=2, keeps_user_messages=False)
    turns = [message for n in range(1, 20) for message in step(n)]
    assert carried_handoff([installed(first), *turns], head_len=1, keeps_user_messages=False) is None


def test_a_summary_made_ahead_stands_for_the_messages_up_to_its_cut() -> None:
    messages = [{"role": "user", "content": "Fix the parser."}, *step(1), *step(2), *step(3)]
    made = (3, "[Previous conversation summary]\nSteps 1 done.")
    text = carried_handoff(messages, head_len=1, keeps_user_messages=False, made_ahead=made)
    assert text is not None and "Steps 1 done." in text and "Fix the parser." in text
    assert "Running step 1." not in text and "Running step 2." in text and "Running step 3." in text


def test_the_summarizer_extends_an_earlier_handoff_instead_of_taking_it_for_the_task() -> None:
    messages, origins = compacted()
    first = handoff_text(messages, origins, head_len=2, keeps_user_messages=False)
    head = [{"role": "system", "content": "You are an agent."}, installed(first)]
    task, note = handed_over_of(head)
    assert task[0] == head[0] and task[1]["content"].strip() == "Fix the parser in src/app.py."
    assert note.startswith("The parser is fixed.") and "Running the tests." in note and END not in note
    assert handed_over([{"role": "user", "content": "Fix the parser."}]) is None


def test_a_handoff_that_quotes_no_user_messages_gives_the_summarizer_no_task_of_it() -> None:
    """Codex keeps the user's messages itself: its handoff quotes none, and all of it is the note to extend."""
    messages, origins = compacted()
    handoff = handoff_text(messages, origins, head_len=2, keeps_user_messages=True)
    head = [{"role": "user", "content": "Fix the parser."}, installed(handoff)]
    task, note = handed_over_of(head)
    assert task == head[:1] and note.startswith("The parser is fixed.")


def test_the_ledger_below_the_summary_is_its_newest_entries_whole_from_the_compactions_ledger() -> None:
    messages, origins = compacted()
    script = "python - <<'EOF'\nprint(1)\n\nprint(2)\nEOF"  # a command may hold a blank line
    commands = (*(f"pytest tests/test_{n}.py -q" for n in range(60)), script)
    ledger = Ledger(commands=commands, dropped_messages=120)
    read_back = f"{REPLACED_NOTE}ask for them by name]"
    summary = f"{SUMMARY['content']}\n\n{ledger.render(4_000)}\n\n{read_back}"
    messages[2] = {"role": "user", "content": summary}
    text = handoff_text(messages, origins, head_len=2, keeps_user_messages=False, ledger=ledger)
    rendered = text[text.index(LEDGER_HEADING) : text.index(read_back)].strip()
    assert rendered == ledger.render(LEDGER_CHARS) and len(rendered) <= LEDGER_CHARS
    assert script in rendered and "pytest tests/test_59.py -q" in rendered and "pytest tests/test_0.py" not in rendered
    assert text.count(LEDGER_HEADING) == 1 and text.count(read_back) == 1
    assert "characters cut" not in rendered  # whole entries, not a head and an end cut apart mid-line
    assert text.index(SUMMARY["content"]) < text.index(LEDGER_HEADING) < text.index("Running the tests.")


def test_what_only_the_agents_own_context_said_is_left_out_of_the_ledger() -> None:
    """Claude Code puts its `<system-reminder>`s into a tool result after it compacts: none of that is its work."""
    reminder = (
        "<system-reminder>\nDeferred tools: calling them directly will fail with InputValidationError.\n"
        "Configure the harness in settings.json.\n</system-reminder>"
    )
    call = {"id": "c1", "type": "function", "function": {"name": "bash", "arguments": '{"cmd": "make test"}'}}
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": "Fix the build."},
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": f"Error: src/app.py: ParseError at line 3\n\n{reminder}"},
    ]
    ledger = Ledger().add(facts_of(messages), messages=3)
    assert any("InputValidationError" in error for error in ledger.errors) and "settings.json" in ledger.files
    own = without_context(ledger, messages, "system-reminder").render(LEDGER_CHARS)
    assert "InputValidationError" not in own and "settings.json" not in own
    assert "Error: src/app.py: ParseError at line 3" in own and "src/app.py" in own and "make test" in own
    assert without_context(ledger, messages, "") == ledger  # an agent whose context comes in no element


def test_a_file_the_agent_opened_stays_in_the_ledger_when_a_reminder_names_it_too() -> None:
    """Claude Code's "this file was modified" reminder names a file the agent opened with a tool call: the call's
    arguments, not any message's text, show that the file is the agent's own work."""
    path = "/repo/src/app/main.py"
    call = {"id": "r1", "type": "function", "function": {"name": "Read", "arguments": f'{{"file_path": "{path}"}}'}}
    reminder = f"<system-reminder>\nNote: {path} was modified, either by the user or by a linter.\n</system-reminder>"
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": "Fix the crash."},
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "r1", "content": f"1\timport sys\n\n{reminder}"},
    ]
    ledger = Ledger().add(facts_of(messages), messages=3)
    assert path in ledger.files
    assert path in without_context(ledger, messages, "system-reminder").files


def test_a_ledger_of_long_entries_keeps_whole_ones_and_marks_a_cut() -> None:
    """Commands and errors are up to a couple of hundred characters: within its room the ledger shows whole entries,
    and when not even one of each fits, what it shows ends in a marker."""
    commands = [f"python -m pytest tests/test_{n}.py -q -k 'case_{n} and not slow' " + "x" * 140 for n in range(6)]
    errors = [f"E   AssertionError: case {n} " + "y" * 170 for n in range(6)]
    ledger = Ledger(commands=tuple(commands), errors=tuple(errors), dropped_messages=12)
    text = ledger.render(LEDGER_CHARS)
    assert len(text) <= LEDGER_CHARS
    assert f"- `{commands[-1]}`" in text and f"- {errors[-1]}" in text  # the newest of each, whole
    assert not text.endswith(CUT_MARK)
    short = ledger.render(300)
    assert len(short) <= 300 and short.endswith(CUT_MARK)


def test_a_summary_quoting_the_ledger_heading_keeps_its_text() -> None:
    """The summarizer is shown the ledger with its heading and may quote it: the ledger is what follows the last one."""
    ledger = Ledger(commands=("make test",), dropped_messages=2)
    quoted = f"[Previous conversation summary]\nAs the {LEDGER_HEADING} says, the build passes."
    summary = f"{quoted}\n\n{ledger.render(400)}"
    text = with_ledger(summary, ledger)
    assert "the build passes." in text and text.count("make test") == 1
