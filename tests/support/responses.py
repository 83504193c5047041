"""The fake upstream's Responses API (`POST /v1/responses`), faithful where clients and inflight look.

- Answers as JSON or as an event stream with OpenAI's event names and a `sequence_number` on each:
  `response.created`, `response.in_progress`, `response.output_item.added`/`.done`, the text,
  argument and custom-input deltas, `response.completed` with `usage` (`input_tokens`,
  `input_tokens_details.cached_tokens`, `output_tokens`).
- Counts the input its own way (o200k_base over the instructions, the tools and each item's JSON)
  and, past the model's window, refuses as OpenAI does: a 400 with `code: context_length_exceeded`
  and `param: input`, or (`refusal_in_stream`) a stream that fails after `response.created`.
- Issues reasoning items whose `encrypted_content` is signed, and refuses any request carrying one
  it did not issue, or one edited ("could not be verified").
- Simulates OpenAI's prompt cache: automatic prefix caching per `prompt_cache_key` (the model when
  there is none). The prompt is the instructions and tools, then each item; the cached count is the
  longest prefix of whole items that any earlier request of the key began with, rounded down to a
  multiple of 128 tokens, and nothing under 1,024 tokens is cached. There is no write premium: what
  the cache does not serve is billed as uncached input (`bill`, with the output's tokens).
- Plays an agent (`TaskAgent`): a task of N steps, each a shell command through the request's own
  shell tool (`exec_command`, `shell`, a custom `exec` tool, or `local_shell`), reading its
  progress from the latest tool output, so it finishes only if the conversation stays valid and
  the latest turns survive compaction. It answers Codex's own compaction request (its "CONTEXT
  CHECKPOINT COMPACTION" prompt) with a summary that quotes the task and says which step is next,
  and reads its progress from that summary when no tool output follows it.
"""

from __future__ import annotations

import base64
import fnmatch
import hashlib
import hmac
import itertools
import re
from dataclasses import dataclass, field
from typing import Any

import orjson
import tiktoken

from inflight.tokens import load_encoding
from tests.support.billing import Bill, Kind

SECRET = b"fake-upstream-reasoning-key"
OUTPUT_TOKENS = 20  # what every answer is said to cost
OVERFLOW_MESSAGE = "Your input exceeds the context window of this model. Please adjust your input and try again."
STEP_DONE = re.compile(r"STEP (\d+) DONE")
# How Codex's own compaction asks for a summary (its last user message), and how the agent's summary says where
# the task stands (Codex starts its history again from that summary, with no tool output after it)
CHECKPOINT = "CONTEXT CHECKPOINT COMPACTION"
PROGRESS = re.compile(r"steps 1 to (\d+) are done")
CACHE_MINIMUM = 1_024  # OpenAI caches no shorter prompt
CACHE_STEP = 128  # and counts what it serves in steps of this many tokens


def last_step(text: str, steps: int) -> int:
    """The highest of `steps` steps whose output, or a summary saying it is done, is in `text` (a request the
    upstream got): how far the agent got."""
    summarized = max((int(n) for n in PROGRESS.findall(text)), default=0)
    return max((n for n in range(steps + 1) if f"STEP {n} DONE" in text or n <= summarized), default=0)


TASK_MARKER = "FAKE-TASK"


def sign(payload: dict[str, Any]) -> str:
    body = base64.b64encode(orjson.dumps(payload)).decode()
    mac = hmac.new(SECRET, body.encode(), hashlib.sha256).hexdigest()[:32]
    return f"{body}.{mac}"


def verified(token: object) -> bool:
    if not isinstance(token, str) or "." not in token:
        return False
    body, mac = token.rsplit(".", 1)
    return hmac.compare_digest(hmac.new(SECRET, body.encode(), hashlib.sha256).hexdigest()[:32], mac)


def overflow_error() -> dict[str, Any]:
    return {
        "error": {
            "message": OVERFLOW_MESSAGE,
            "type": "invalid_request_error",
            "param": "input",
            "code": "context_length_exceeded",
        }
    }


@dataclass
class TaskAgent:
    """A scripted agent: `steps` shell commands, each printing `output_lines` lines (or step n the nth of
    `step_lines`, so that outputs vary in size as real ones do), then a final answer.

    It finds the step it is at from the latest tool output (`STEP n DONE`), or from its own summary when
    that comes later, so it needs the latest turn, not the whole history; it fails loudly (a message
    saying so) if the task is gone. Every line of a step's output names the step, so a checker can tell
    whose output a text is (`output`)."""

    steps: int = 30
    output_lines: int = 200
    reasoning: bool = True
    step_lines: tuple[int, ...] = ()  # the lines of each step in turn; empty: `output_lines` for all

    def lines(self, step: int) -> int:
        """The lines step `step` (from 1) prints."""
        return self.step_lines[step - 1] if 0 < step <= len(self.step_lines) else self.output_lines

    def command(self, step: int) -> str:
        return (
            f'for i in $(seq 1 {self.lines(step)}); do echo "step {step} log line $i: '
            f"checked module_{step}_$i.py and found nothing to change\"; done; echo 'STEP {step} DONE'"
        )

    def output(self, step: int) -> str:
        """What the step's command prints (its last newline left out, as agents drop it)."""
        lines = (
            f"step {step} log line {i}: checked module_{step}_{i}.py and found nothing to change"
            for i in range(1, self.lines(step) + 1)
        )
        return "\n".join([*lines, f"STEP {step} DONE"])

    def next_output(self, items: list[Any], tools: list[Any], serial: int) -> list[dict[str, Any]]:
        text = orjson.dumps(items).decode()
        if TASK_MARKER not in text:
            return [assistant_message(f"I no longer know my task ({TASK_MARKER} is gone).", serial)]
        step = steps_done(items) + 1
        if CHECKPOINT in last_user_text(items):
            return [assistant_message(self.summary(items, step), serial)]
        outputs: list[dict[str, Any]] = []
        if self.reasoning:
            outputs.append(reasoning_item(step, serial))
        if step > self.steps:
            return [*outputs, assistant_message(f"All {self.steps} steps are done. FINISHED", serial)]
        outputs.append(shell_call(tools, self.command(step), step, serial))
        return outputs

    def summary(self, items: list[Any], step: int) -> str:
        """What a model answers Codex's compaction request: the task, quoted, and where it stands."""
        asked = next(
            (
                line
                for item in items
                if isinstance(item, dict) and item.get("role") == "user"
                for line in message_text(item).split("\n")
                if TASK_MARKER in line and CHECKPOINT not in line and not PROGRESS.search(line)
            ),
            f"The {TASK_MARKER}, run step by step.",  # the task was asked where no user text says it
        )
        return (
            f"Task (the user's words): {asked.strip()}\n"
            f"Progress: steps 1 to {step - 1} are done; step {step} is next. "
            f"Each of the {self.steps} steps is one shell command, run one at a time."
        )


def message_text(item: dict[str, Any]) -> str:
    """The text of a message item: a string content, or its text parts joined."""
    content = item.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return ""


def last_user_text(items: list[Any]) -> str:
    """The text of the last user message."""
    for item in reversed(items):
        if isinstance(item, dict) and item.get("role") == "user":
            return message_text(item)
    return ""


def steps_done(items: list[Any]) -> int:
    """The steps done, from whichever comes last: a tool output (its `STEP n DONE`) or a summary of a compaction
    ("steps 1 to n are done", and the `STEP n DONE` of the turns a handoff quotes after it)."""
    for item in reversed(items):
        if not isinstance(item, dict):
            continue
        if str(item.get("type", "")).endswith("_call_output"):
            done = [int(n) for n in STEP_DONE.findall(latest_output([item]))]
            return max(done, default=0)
        if item.get("role") == "user":
            text = message_text(item)
            done = [int(n) for n in (*PROGRESS.findall(text), *STEP_DONE.findall(text))]
            if done:
                return max(done)
    return 0


def latest_output(items: list[Any]) -> str:
    for item in reversed(items):
        if isinstance(item, dict) and str(item.get("type", "")).endswith("_call_output"):
            output = item.get("output")
            return output if isinstance(output, str) else orjson.dumps(output).decode()
    return ""


def reasoning_item(step: int, serial: int) -> dict[str, Any]:
    secret = sign({"step": step, "serial": serial, "thought": "the next command follows from the last output"})
    return {"id": f"rs_{serial:06d}", "type": "reasoning", "summary": [], "encrypted_content": secret}


def assistant_message(text: str, serial: int) -> dict[str, Any]:
    return {
        "id": f"msg_{serial:06d}",
        "type": "message",
        "status": "completed",
        "role": "assistant",
        "content": [{"type": "output_text", "text": text, "annotations": []}],
    }


def tool_names(tools: list[Any]) -> dict[str, str]:
    """Each tool's type by its name, namespaces opened (Codex groups its tools in them)."""
    names: dict[str, str] = {}
    for tool in tools:
        if isinstance(tool, dict) and tool.get("type") == "namespace" and isinstance(tool.get("tools"), list):
            names |= tool_names(tool["tools"])
        elif isinstance(tool, dict):
            names[str(tool.get("name") or tool.get("type"))] = str(tool.get("type"))
    return names


def offered_tools(payload: dict[str, Any], items: list[Any]) -> list[Any]:
    """The request's `tools` and those of `additional_tools` input items (Codex's code mode puts them there)."""
    tools = list(payload.get("tools") or [])
    for item in items:
        if isinstance(item, dict) and item.get("type") == "additional_tools" and isinstance(item.get("tools"), list):
            tools += item["tools"]
    return tools


def shell_call(tools: list[Any], command: str, step: int, serial: int) -> dict[str, Any]:
    """The call that runs `command` with whichever shell tool the request offers."""
    names = tool_names(tools)
    call_id = f"call_{serial:06d}_{step}"
    if names.get("exec") == "custom":  # Codex's code mode: JavaScript that runs a shell command
        source = f"const r = await tools.exec_command({{cmd: {orjson.dumps(command).decode()}}});\ntext(r);"
        return {
            "id": f"ctc_{serial:06d}",
            "type": "custom_tool_call",
            "call_id": call_id,
            "name": "exec",
            "input": source,
        }
    for name in ("exec_command", "shell", "bash"):
        if names.get(name) == "function":
            key = "cmd" if name == "exec_command" else "command"
            value: Any = command if name != "shell" else ["bash", "-lc", command]
            arguments = orjson.dumps({key: value}).decode()
            return {
                "id": f"fc_{serial:06d}",
                "type": "function_call",
                "call_id": call_id,
                "name": name,
                "arguments": arguments,
            }
    return {
        "id": f"lsh_{serial:06d}",
        "type": "local_shell_call",
        "call_id": call_id,
        "status": "completed",
        "action": {"type": "exec", "command": ["bash", "-lc", command]},
    }


@dataclass
class FakeResponses:
    """The Responses API of the fake upstream; `windows` by model (exact), as the chat side enforces them."""

    agent: TaskAgent | None = None
    windows: dict[str, int] = field(default_factory=dict)
    refusal_in_stream: bool = False
    knows_context_management: bool = True  # False: a request with the field is refused, as vLLM refuses it
    reply_text: str = "Hello from the Responses API."
    serial: itertools.count[int] = field(default_factory=lambda: itertools.count(1))
    seen: dict[str, set[bytes]] = field(default_factory=dict)  # per prompt_cache_key: digests of prompts' prefixes
    bill: Bill = field(default_factory=Bill)
    input_tokens: int = 0  # over all answered requests
    cached_tokens: int = 0
    refused: int = 0
    rejected: list[str] = field(default_factory=list)  # why a request was refused as malformed
    _encoding: tiktoken.Encoding | None = None

    def count(self, payload: dict[str, Any], items: list[Any]) -> tuple[int, list[int]]:
        """The request's input tokens, and each item's (the first: the instructions and tools)."""
        if self._encoding is None:
            self._encoding = load_encoding("o200k_base")
        fixed = len(self._encoding.encode_ordinary(str(payload.get("instructions") or "")))
        fixed += len(self._encoding.encode_ordinary(orjson.dumps(payload.get("tools") or []).decode()))
        per_item = [len(self._encoding.encode_ordinary(orjson.dumps(item).decode())) + 4 for item in items]
        return fixed + sum(per_item), [fixed, *per_item]

    def problem(self, items: list[Any]) -> str | None:
        """Why the upstream would refuse these items as malformed (None: it accepts them)."""
        calls: set[str] = set()
        for item in items:
            if not isinstance(item, dict):
                return "an input item is not an object"
            kind = item.get("type")
            if kind == "reasoning" and not verified(item.get("encrypted_content")):
                return f"The encrypted content for item {item.get('id')} could not be verified."
            if kind in ("function_call", "custom_tool_call", "local_shell_call"):
                calls.add(str(item.get("call_id")))
            if str(kind).endswith("_call_output") and str(item.get("call_id")) not in calls:
                return f"No tool call found for output with call_id {item.get('call_id')}."
        return None

    def answer(self, payload: dict[str, Any]) -> tuple[int, dict[str, Any] | None, list[dict[str, Any]] | None]:
        """(status, a JSON body, or the events of a stream) for one request."""
        source = payload.get("input")
        items: list[Any] = (
            [{"type": "message", "role": "user", "content": source}] if isinstance(source, str) else list(source or [])
        )
        problem = self.problem(items)
        if problem is None and "context_management" in payload and not self.knows_context_management:
            problem = "Unrecognized request argument supplied: context_management"
        if problem is not None:
            self.rejected.append(problem)
            error = {"error": {"message": problem, "type": "invalid_request_error", "param": "input", "code": None}}
            return 400, error, None
        model = str(payload.get("model"))
        tokens, per_item = self.count(payload, items)
        window = next((w for pattern, w in self.windows.items() if fnmatch.fnmatchcase(model, pattern)), None)
        stream = payload.get("stream") is True
        serial = next(self.serial)
        response_id = f"resp_{serial:06d}"
        if window is not None and tokens > window:
            self.refused += 1
            self.bill.refuse()
            if stream and self.refusal_in_stream:
                return 200, None, failed_stream(response_id, model)
            return 400, overflow_error(), None
        cached = self.cached(payload, items, per_item)
        self.input_tokens += tokens
        self.cached_tokens += cached
        kind: Kind = "own compaction" if CHECKPOINT in last_user_text(items) else "agent"
        self.bill.add(kind, uncached=tokens - cached, cache_read=cached, output=OUTPUT_TOKENS)
        tools = offered_tools(payload, items)
        if self.agent is not None:
            output = self.agent.next_output(items, tools, serial)
        else:
            output = [assistant_message(self.reply_text, serial)]
        usage = {
            "input_tokens": tokens,
            "input_tokens_details": {"cached_tokens": cached},
            "output_tokens": OUTPUT_TOKENS,
            "output_tokens_details": {"reasoning_tokens": 10},
            "total_tokens": tokens + OUTPUT_TOKENS,
        }
        response = response_object(response_id, model, "completed", output, usage)
        return 200, (None if stream else response), (completed_stream(response) if stream else None)

    def cached(self, payload: dict[str, Any], items: list[Any], per_item: list[int]) -> int:
        """The tokens the cache serves: the prompt's longest prefix (the instructions and tools, then whole
        items, as rendered in that order) that any earlier request of its cache key began with, rounded
        down to a multiple of 128; none below 1,024."""
        key = str(payload.get("prompt_cache_key") or payload.get("model"))
        seen = self.seen.setdefault(key, set())
        running = hashlib.sha256()
        shared, tokens = 0, 0
        for part, count in zip([[payload.get("instructions"), payload.get("tools")], *items], per_item, strict=True):
            running.update(hashlib.sha256(orjson.dumps(part, option=orjson.OPT_SORT_KEYS)).digest())
            digest = running.copy().digest()
            tokens += count
            if digest in seen:  # a digest covers the whole prefix: the shorter ones were seen with it
                shared = tokens
            seen.add(digest)
        if shared < CACHE_MINIMUM:
            return 0
        return shared // CACHE_STEP * CACHE_STEP


def response_object(
    response_id: str, model: str, status: str, output: list[dict[str, Any]], usage: dict[str, Any] | None
) -> dict[str, Any]:
    return {
        "id": response_id,
        "object": "response",
        "created_at": 1_760_000_000,
        "status": status,
        "model": model,
        "output": output,
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        "usage": usage,
        "error": None,
        "incomplete_details": None,
    }


def completed_stream(response: dict[str, Any]) -> list[dict[str, Any]]:
    """The events of a response that completes, item by item, each with its `sequence_number`."""
    opening = {**response, "status": "in_progress", "output": [], "usage": None}
    events: list[dict[str, Any]] = [
        {"type": "response.created", "response": opening},
        {"type": "response.in_progress", "response": opening},
    ]
    for index, item in enumerate(response["output"]):
        events += item_events(index, item)
    events.append({"type": "response.completed", "response": response})
    return [{**event, "sequence_number": n} for n, event in enumerate(events)]


def item_events(index: int, item: dict[str, Any]) -> list[dict[str, Any]]:
    kind = item["type"]
    if kind == "message":
        text = item["content"][0]["text"]
        base = {"item_id": item["id"], "output_index": index, "content_index": 0}
        empty = {**item, "status": "in_progress", "content": []}
        part = {"type": "output_text", "text": "", "annotations": []}
        return [
            {"type": "response.output_item.added", "output_index": index, "item": empty},
            {"type": "response.content_part.added", **base, "part": part},
            {"type": "response.output_text.delta", **base, "delta": text, "logprobs": []},
            {"type": "response.output_text.done", **base, "text": text, "logprobs": []},
            {"type": "response.content_part.done", **base, "part": {**part, "text": text}},
            {"type": "response.output_item.done", "output_index": index, "item": item},
        ]
    if kind == "function_call":
        base = {"item_id": item["id"], "output_index": index}
        return [
            {"type": "response.output_item.added", "output_index": index, "item": {**item, "arguments": ""}},
            {"type": "response.function_call_arguments.delta", **base, "delta": item["arguments"]},
            {"type": "response.function_call_arguments.done", **base, "arguments": item["arguments"]},
            {"type": "response.output_item.done", "output_index": index, "item": item},
        ]
    if kind == "custom_tool_call":
        base = {"item_id": item["id"], "output_index": index}
        return [
            {"type": "response.output_item.added", "output_index": index, "item": {**item, "input": ""}},
            {"type": "response.custom_tool_call_input.delta", **base, "delta": item["input"]},
            {"type": "response.custom_tool_call_input.done", **base, "input": item["input"]},
            {"type": "response.output_item.done", "output_index": index, "item": item},
        ]
    return [
        {"type": "response.output_item.added", "output_index": index, "item": item},
        {"type": "response.output_item.done", "output_index": index, "item": item},
    ]


def failed_stream(response_id: str, model: str) -> list[dict[str, Any]]:
    """A stream the upstream accepts, then fails for the input's length (as OpenAI does)."""
    opening = response_object(response_id, model, "in_progress", [], None)
    failed = {**opening, "status": "failed", "error": overflow_error()["error"]}
    events = [
        {"type": "response.created", "response": opening},
        {"type": "response.in_progress", "response": opening},
        {"type": "response.failed", "response": failed},
    ]
    return [{**event, "sequence_number": n} for n, event in enumerate(events)]


def sse_event(event: dict[str, Any]) -> bytes:
    kind = str(event["type"]).encode()
    return b"event: " + kind + b"\ndata: " + orjson.dumps(event) + b"\n\n"
