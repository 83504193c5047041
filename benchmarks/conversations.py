"""Agent conversations of any size, grown from the shared SWE-agent traces.

The head (system prompt, task) comes from one trace; the body repeats the traces' assistant/tool
turns with new tool-call ids and a varied line in each message, so no two messages are equal
(a cache cannot make the results look better) and every tool call keeps its result.
"""

from __future__ import annotations

import copy
import json
import random
from pathlib import Path
from typing import Any

from inflight.tokens import TokenCounter

TRACES = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "traces"


def load_traces() -> dict[str, dict[str, Any]]:
    return {path.stem: json.loads(path.read_text()) for path in sorted(TRACES.glob("*.json"))}


def turns_of(messages: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """Split the messages after the task into turns: an assistant message and what answers it."""
    turns: list[list[dict[str, Any]]] = []
    for message in messages:
        if message["role"] == "assistant" or not turns:
            turns.append([])
        turns[-1].append(message)
    return turns


def grow(target_tokens: int, *, seed_trace: str = "swe_marshmallow_function_calling") -> dict[str, Any]:
    """A request body of about `target_tokens` o200k tokens (at least, by one turn at most)."""
    traces = load_traces()
    base = traces[seed_trace]
    head = base["messages"][:2]
    pool = [turn for body in traces.values() if body.get("tools") for turn in turns_of(body["messages"][2:])]
    counter = TokenCounter()
    encoding = counter.encoding("o200k_base")
    messages = copy.deepcopy(head)
    total = counter.count_request({"messages": messages, "tools": base.get("tools")}, "o200k_base").total
    index = 0
    while total < target_tokens:
        turn = copy.deepcopy(pool[index % len(pool)])
        for message in turn:
            _vary(message, index)
        messages.extend(turn)
        total += sum(counter.count_message(message, encoding) for message in turn)
        index += 1
    return {"model": base["model"], "messages": messages, "tools": base.get("tools")}


def _vary(message: dict[str, Any], index: int) -> None:
    tag = f"(step {index})"
    for call in message.get("tool_calls") or []:
        call["id"] = f"{call['id']}_{index}"
    if message.get("tool_call_id"):
        message["tool_call_id"] = f"{message['tool_call_id']}_{index}"
    content = message.get("content")
    if isinstance(content, str):
        message["content"] = f"{content}\n{tag}"
    elif content is None and message["role"] == "assistant":
        message["content"] = tag


PROFILES = ("steady", "noisy", "bursty", "ramp")


def turn_sizes(profile: str, growth_tokens: int, turns: int, *, seed: int = 7) -> list[int]:
    """Tokens each turn adds, averaging `growth_tokens`: the same every turn (`steady`), between half and
    one and a half of it (`noisy`), small turns with a big one every fourth (`bursty`), or growing from
    a third of it to five thirds (`ramp`)."""
    rng = random.Random(seed)
    if profile == "steady":
        return [growth_tokens] * turns
    if profile == "noisy":
        return [int(growth_tokens * rng.uniform(0.5, 1.5)) for _ in range(turns)]
    if profile == "bursty":
        return [int(growth_tokens * (2.5 if k % 4 == 3 else 0.5)) for k in range(turns)]
    if profile == "ramp":
        return [int(growth_tokens * (1 / 3 + 4 / 3 * k / max(turns - 1, 1))) for k in range(turns)]
    raise ValueError(f"unknown growth profile {profile!r}; expected one of {', '.join(PROFILES)}")


def growing(sizes: list[int], *, seed_trace: str = "swe_marshmallow_function_calling") -> dict[str, Any]:
    """A tool-calling conversation whose k-th turn (an assistant call and its result) is `sizes[k]` o200k
    tokens: the traces' own turns, each result lengthened with lines of the traces' other outputs (tagged
    with the step, so no two are equal) or cut, to the size."""
    traces = load_traces()
    base = traces[seed_trace]
    pool = [turn for body in traces.values() if body.get("tools") for turn in turns_of(body["messages"][2:])]
    pool = [turn for turn in pool if len(turn) == 2 and turn[1].get("role") == "tool"]
    lines = [line for turn in pool for line in str(turn[1]["content"]).splitlines() if line.strip()]
    counter = TokenCounter()
    encoding = counter.encoding("o200k_base")
    messages = copy.deepcopy(base["messages"][:2])
    for index, size in enumerate(sizes):
        call, result = copy.deepcopy(pool[index % len(pool)])
        _vary(call, index)
        _vary(result, index)
        room = max(size - counter.count_message(call, encoding), 16)
        text = str(result["content"])
        line = index * 37
        while len(encoding.encode(text)) < room:
            text += "\n" + "\n".join(f"{lines[(line + k) % len(lines)]}  # step {index}.{k}" for k in range(40))
            line += 40
        result["content"] = encoding.decode(encoding.encode(text)[:room])
        messages += [call, result]
    return {"model": base["model"], "messages": messages, "tools": base.get("tools")}
