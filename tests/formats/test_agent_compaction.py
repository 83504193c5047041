"""The agents' own compaction requests recognised by structure and prompt, their look-alikes not, and the answers."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson

from inflight.formats.agent_compaction import answer, recognised
from inflight.formats.agent_prompts import CODEX

# The text block Claude Code 2.1.328 appends to its last user message when it compacts (from its own request).
CLAUDE_PROMPT = (Path(__file__).parents[1] / "fixtures" / "agents" / "claude_code_2.1.328_compact.txt").read_text()
CODEX_PROMPT = CODEX[0].text + "\n"  # as Codex 0.169.0 sends it


def with_instructions(prompt: str, instructions: str) -> str:
    """Claude Code's prompt after `/compact <instructions>`: they go last, before its reminder."""
    body, _, reminder = prompt.rpartition("\nREMINDER:")
    return f"{body}\nAdditional Instructions:\n{instructions}\nREMINDER:{reminder}"


def claude_history() -> list[dict[str, Any]]:
    return [
        {"role": "user", "content": "Fix the failing test in src/app.py."},
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "t1", "name": "Bash", "input": {"command": "ls"}}],
        },
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "src\ntests"}]},
    ]


def claude_request(prompt_block: dict[str, Any] | None = None, **fields: Any) -> dict[str, Any]:
    """Claude Code's compaction request: its prompt joined to the last user turn, after that turn's tool results."""
    messages = claude_history()
    block = prompt_block or {"type": "text", "text": CLAUDE_PROMPT}
    messages[-1] = {**messages[-1], "content": [*messages[-1]["content"], block]}
    return {"model": "claude-sonnet-4-5", "max_tokens": 32000, "messages": messages, "stream": True, **fields}


def codex_items() -> list[dict[str, Any]]:
    return [
        {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "You are Codex."}]},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Fix the failing test."}]},
        {"type": "function_call", "call_id": "c1", "name": "exec_command", "arguments": '{"cmd":"ls"}'},
        {"type": "function_call_output", "call_id": "c1", "output": "src\ntests"},
    ]


def codex_request(last: dict[str, Any] | None = None, **fields: Any) -> dict[str, Any]:
    prompt = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": CODEX_PROMPT}]}
    return {"model": "gpt-5.1-codex", "stream": True, "input": [*codex_items(), last or prompt], **fields}


def test_claude_codes_compaction_request_is_recognised_and_its_prompt_left_out_of_the_history() -> None:
    asked = recognised("messages", claude_request())
    assert asked is not None and asked.agent == "claude-code 2.1.328" and asked.instructions == ""
    assert asked.history["messages"] == claude_history()  # the tool results stay, the prompt goes
    assert not asked.keeps_user_messages


def test_the_users_compact_instructions_are_read_from_claude_codes_prompt() -> None:
    block = {"type": "text", "text": with_instructions(CLAUDE_PROMPT, "focus on the failing tests")}
    asked = recognised("messages", claude_request(block))
    assert asked is not None and asked.instructions == "focus on the failing tests"


def test_a_prompt_that_is_its_own_user_message_leaves_the_history_whole() -> None:
    body = claude_request()
    body["messages"] = [*claude_history(), {"role": "assistant", "content": "Done."}]
    body["messages"].append({"role": "user", "content": CLAUDE_PROMPT})
    asked = recognised("messages", body)
    assert asked is not None and asked.history["messages"] == body["messages"][:-1]


def test_codexs_checkpoint_request_is_recognised_and_its_prompt_left_out_of_the_history() -> None:
    asked = recognised("responses", codex_request())
    assert asked is not None and asked.agent == "codex 0.169.0" and asked.instructions == ""
    assert asked.history["input"] == codex_items() and asked.keeps_user_messages


def test_the_same_words_inside_a_tool_result_are_no_compaction_request() -> None:
    body = claude_request({"type": "text", "text": "Go on."})
    body["messages"][-1]["content"][0]["content"] = CLAUDE_PROMPT  # a file the agent read holds the prompt
    assert recognised("messages", body) is None
    output = {"type": "function_call_output", "call_id": "c1", "output": CODEX_PROMPT}
    assert recognised("responses", codex_request(output)) is None


def test_a_user_asking_for_a_summary_is_no_compaction_request() -> None:
    for text in (
        "Create a detailed summary of the conversation so far.",
        "Summarize src/app.py for me: " + CLAUDE_PROMPT[:400],
        "Please read this prompt and tell me what it does:\n" + CLAUDE_PROMPT,
    ):
        assert recognised("messages", claude_request({"type": "text", "text": text})) is None
    for text in (
        "Summarize README.md.",
        "What does this mean? " + CODEX_PROMPT,
        CODEX_PROMPT + "\nAlso run the tests.",
    ):
        message = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}
        assert recognised("responses", codex_request(message)) is None


def test_a_prompt_not_at_the_end_or_with_a_forced_tool_is_no_compaction_request() -> None:
    body = claude_request()
    body["messages"] += [{"role": "assistant", "content": "Ok."}, {"role": "user", "content": "Go on."}]
    assert recognised("messages", body) is None
    forced = claude_request(tool_choice={"type": "tool", "name": "Bash"})
    assert recognised("messages", forced) is None
    assert recognised("responses", codex_request(previous_response_id="resp_1")) is None
    assert recognised("chat_completions", {"messages": [{"role": "user", "content": CODEX_PROMPT}] * 2}) is None


def test_the_answers_are_in_each_apis_shape_with_usage() -> None:
    body, kind = answer("messages", "done", model="m", prompt_tokens=900, output_tokens=7, stream=False)
    message = orjson.loads(body)
    assert kind == b"application/json" and message["content"] == [
        {"type": "text", "text": "<summary>\ndone\n</summary>"}
    ]
    assert message["usage"]["input_tokens"] == 900 and message["usage"]["output_tokens"] == 7
    body, kind = answer("responses", "the handoff", model="m", prompt_tokens=900, output_tokens=7, stream=True)
    events = [orjson.loads(line[6:]) for line in body.split(b"\n") if line.startswith(b"data: ")]
    assert kind == b"text/event-stream" and events[-1]["type"] == "response.completed"
    assert events[-1]["response"]["output"][0]["content"][0]["text"] == "the handoff"
    assert [e["sequence_number"] for e in events] == list(range(len(events)))


def test_codexs_compaction_trigger_is_recognised_only_as_the_last_item_of_a_history_kept_here() -> None:
    history = [{"type": "message", "role": "user", "content": "Fix it."}, {"type": "function_call_output"}]
    trigger = {"type": "compaction_trigger"}
    asked = recognised("responses", {"model": "gpt-5.5", "input": [*history, trigger]})
    assert asked is not None and asked.wants_item and asked.history["input"] == history
    assert recognised("responses", {"model": "gpt-5.5", "input": [history[0], trigger, history[1]]}) is None
    stored = {"model": "gpt-5.5", "input": [*history, trigger], "previous_response_id": "resp_1"}
    assert recognised("responses", stored) is None  # the history is the upstream's: it compacts it
    item = {"type": "compaction", "id": "cmp_1", "encrypted_content": "inflight2.x"}
    body, kind = answer("responses", "", model="gpt-5.5", prompt_tokens=9, output_tokens=0, stream=False, item=item)
    assert kind == b"application/json" and orjson.loads(body)["output"] == [item]
