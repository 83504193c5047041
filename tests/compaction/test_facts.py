"""The facts of dropped messages, and the ledger that keeps them across compactions."""

from __future__ import annotations

from typing import Any

from inflight.compaction.facts import facts_of
from inflight.compaction.ledger import Ledger


def tool_turn(call_id: str, command: str, output: str) -> list[dict[str, Any]]:
    call = {"id": call_id, "type": "function", "function": {"name": "bash", "arguments": f'{{"command": "{command}"}}'}}
    return [
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": call_id, "content": output},
    ]


def test_errors_of_every_kind_are_found() -> None:
    outputs = {
        "python a.py": "Traceback (most recent call last):\n  File 'a.py'\nAttributeError: 'X' has no attribute 'y'",
        "python b.py": "ModuleNotFoundError: No module named 'foo'",
        "./check": "Wrong flag!",
        "pytest -x": "===== 1 FAILED, 3 passed =====",
        "sleep 100": "TIMED OUT after 30 s",
        "make": "make: *** [all] Error 2",
    }
    messages = [m for i, (cmd, out) in enumerate(outputs.items()) for m in tool_turn(f"c{i}", cmd, out)]
    facts = facts_of(messages)
    assert set(facts.commands) == set(outputs)
    for line in [
        "AttributeError: 'X' has no attribute 'y'",
        "ModuleNotFoundError: No module named 'foo'",
        "Wrong flag!",
        "===== 1 FAILED, 3 passed =====",
        "TIMED OUT after 30 s",
    ]:
        assert line in facts.errors
    assert facts.outcomes["python a.py"] == "AttributeError: 'X' has no attribute 'y'"  # the last error line


def test_text_action_agents_commands_come_from_fenced_blocks() -> None:
    messages = [
        {"role": "assistant", "content": "Let's look at the file.\n```\nopen src/marshmallow/fields.py 1474\n```"},
        {"role": "user", "content": "[File: /repo/src/marshmallow/fields.py (1997 lines total)]\n1474: return int(x)"},
        {"role": "assistant", "content": "Now run it.\n```\npython reproduce.py\n```"},
        {"role": "user", "content": "344\n(Open file: n/a)\nbash-$"},
    ]
    facts = facts_of(messages)
    assert facts.commands == ("open src/marshmallow/fields.py 1474", "python reproduce.py")
    assert facts.outcomes["python reproduce.py"] == "344"
    assert "src/marshmallow/fields.py" in facts.files and "reproduce.py" in facts.files


def test_urls_are_not_file_paths() -> None:
    output = (
        "See https://pip.pypa.io/warnings/venv.html and https://example.com/a/b/c.json for details; edit src/app.py"
    )
    facts = facts_of(tool_turn("c1", "pip install -e .", output))
    assert list(facts.files) == ["src/app.py"]


def test_the_ledger_grows_across_compactions_and_keeps_the_newest_when_short_of_room() -> None:
    first = facts_of(tool_turn("c1", "python a.py", "NameError: name 'x' is not defined"))
    second = facts_of(tool_turn("c2", "cat setup.py", "import re"))
    ledger = Ledger().add(first, messages=2).add(second, messages=2)
    text = ledger.render(4000)
    assert "`python a.py`" in text and "`cat setup.py`" in text and "NameError: name 'x' is not defined" in text
    assert "(4 messages dropped in all)" in text
    many = Ledger()
    for turn in range(300):
        many = many.add(facts_of(tool_turn(f"c{turn}", f"echo step{turn}", f"step{turn}")), messages=2)
    short = many.render(2000)
    assert len(short) <= 2000 and "`echo step299`" in short and "`echo step0`" not in short


def test_short_of_room_for_every_outcome_the_ledger_still_names_every_command() -> None:
    many = Ledger()
    for turn in range(50):
        command = f'for i in $(seq 1 40); do echo "line $i: checked module_{turn}_$i.py"; done; echo "STEP {turn}"'
        many = many.add(facts_of(tool_turn(f"c{turn}", command, f"line 1: checked module_{turn}_1.py")), messages=2)
    text = many.render(4000)
    assert len(text) <= 4000 and "(shortened)" in text and " -> " not in text
    assert all(f'echo "STEP {turn}"' in text for turn in range(50))  # the end of each, where they differ


def test_a_masked_or_cut_output_keeps_its_errors_and_files_in_place() -> None:
    from inflight.compaction.stages.mask import placeholder
    from inflight.compaction.stages.truncate import Limits, truncate_text

    output = (
        "collected 3 items\n" + "tests/test_a.py::test_x PASSED\n" * 200 + "E   KeyError: 'precision'\n" + "ok\n" * 200
    )
    masked = placeholder({"role": "tool", "tool_call_id": "c1", "content": output}, {"name": "bash"}, 900)
    assert "KeyError: 'precision'" in masked["content"] and "tests/test_a.py" in masked["content"]
    cut = truncate_text(output, Limits(max_lines=20, max_bytes=100_000))
    assert cut is not None and "KeyError: 'precision'" in cut  # the error was in the omitted middle


def test_editor_tools_name_their_files_and_the_ledger_keeps_the_newest() -> None:
    view = {"name": "str_replace_editor", "arguments": '{"command": "view", "path": "/repo/src/a.py"}'}
    read = {"name": "read_file", "arguments": {"target_file": "src/b.py"}}  # an object, as some clients send
    messages: list[dict[str, Any]] = []
    for index, function in enumerate([view, read]):
        messages.append(
            {"role": "assistant", "content": None, "tool_calls": [{"id": f"c{index}", "function": function}]}
        )
        messages.append({"role": "tool", "tool_call_id": f"c{index}", "content": "ok"})
    facts = facts_of(messages)
    assert facts.commands == ("str_replace_editor view /repo/src/a.py", "read_file src/b.py")
    assert {"/repo/src/a.py", "src/b.py"} <= set(facts.files)
    ledger = Ledger()
    for span in range(40):
        ledger = ledger.add(facts_of(tool_turn(f"c{span}", f"cat new{span}.py", "x")), messages=2)
    assert "new39.py" in ledger.render(600) and "new0.py" not in ledger.render(600)


def test_exit_codes_tool_errors_and_code_being_read() -> None:
    output = "\n".join(
        [
            "Exit code 2",
            "<returncode>1</returncode>",
            "npm ERR! missing script: test",
            "src/a.ts(3,7): error TS2322: Type 'string' is not assignable to type 'number'.",
            "class ParseError(Exception):",  # a file being read: code, not an error met
            "    # cannot be None",
        ]
    )
    errors = facts_of(tool_turn("c1", "make test", output)).errors
    assert errors == (
        "Exit code 2",
        "<returncode>1</returncode>",
        "npm ERR! missing script: test",
        "src/a.ts(3,7): error TS2322: Type 'string' is not assignable to type 'number'.",
    )
