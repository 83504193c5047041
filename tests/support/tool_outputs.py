"""Tool outputs whose sizes vary as real ones do, and what a benchmark reads from the fake upstream's requests
about them: whether the agent's newest outputs reached the upstream whole, and how often the prompt was rewritten.

A real agent's tool outputs are mostly small with a long tail (a test run, a build log): `lognormal_tokens` draws
each step's size from a log-normal (median `median`, spread `sigma`), seeded so that every run prints the same
task, and `step_lines` turns those sizes into the lines a fake agent prints, measured in o200k_base tokens (what
the fakes count). Each line of a step names the step (`step N log line i: ...`), so `newest_kept` can tell which
steps' outputs a request holds and check the newest ones verbatim. `rewrites` counts the requests whose prompt
does not begin with the previous request's (cache markers aside): each makes the provider's prompt cache write
again from the first difference.
"""

from __future__ import annotations

import math
import random
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from itertools import pairwise
from typing import Any

import orjson

from inflight.tokens import load_encoding
from tests.support import gemini, messages

OUTPUT_LINE = re.compile(r"\bstep (\d+) log line \d+: ")  # a line of a step's output (not its command's `$i`)


def lognormal_tokens(
    steps: int, *, seed: int, median: int = 1_000, sigma: float = 1.08, cap: int = 16_000
) -> list[int]:
    """Each step's output size in tokens: log-normal around `median` (the mean `median * e^(sigma^2/2)`, about
    1.8 times it at 1.08), at most `cap`; the same for the same seed."""
    draw = random.Random(seed)
    return [min(cap, max(1, round(draw.lognormvariate(math.log(median), sigma)))) for _ in range(steps)]


def tokens_per_line(output: Callable[[int], str], lines: int, step: int = 100) -> float:
    """o200k_base tokens per line of a step's output, from a sample step of `lines` lines (`output(step)`)."""
    return len(load_encoding("o200k_base").encode_ordinary(output(step))) / lines


def step_lines(tokens: Sequence[int], per_line: float) -> tuple[int, ...]:
    """The lines each step prints for its size in tokens (one at least)."""
    return tuple(max(1, round(size / per_line)) for size in tokens)


def strings(value: Any) -> Iterator[str]:
    """Every string in a JSON value (a tool output is one of them, wherever the format keeps it)."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from strings(item)


def newest_kept(payload: Any, outputs: Mapping[int, str], newest: int = 5) -> bool | None:
    """Whether the request holds, verbatim, the outputs of its latest step and the `newest - 1` before it (the
    latest: the highest step with a line of output in it); None when it holds no step's output."""
    texts = list(strings(payload))
    latest = max((int(n) for text in texts for n in OUTPUT_LINE.findall(text)), default=0)
    if not latest:
        return None
    return all(any(outputs[step] in text for text in texts) for step in range(max(1, latest - newest + 1), latest + 1))


def cache_blind(value: Any) -> Any:
    """The value without its `cache_control` markers, which an agent moves to the newest message each turn
    without changing what the cache holds."""
    if isinstance(value, dict):
        return {key: cache_blind(item) for key, item in value.items() if key != "cache_control"}
    if isinstance(value, list):
        return [cache_blind(item) for item in value]
    return value


def prompt_parts(payload: dict[str, Any]) -> list[bytes]:
    """The prompt in the order a provider's cache reads it: the tools and instructions, then each message, item
    or content (Messages, Responses, Gemini)."""
    if "contents" in payload:
        head: Any = [payload.get("tools"), payload.get("systemInstruction")]
        rest = payload.get("contents") or []
    elif "messages" in payload:
        head, rest = [payload.get("tools"), payload.get("system")], payload.get("messages") or []
    else:
        source = payload.get("input")
        head = [payload.get("instructions"), payload.get("tools")]
        rest = [source] if isinstance(source, str) else source or []
    return [orjson.dumps(cache_blind(part), option=orjson.OPT_SORT_KEYS) for part in [head, *rest]]


def rewrites(payloads: Sequence[dict[str, Any]]) -> int:
    """The requests whose prompt does not begin with the whole of the previous one's."""
    prompts = [prompt_parts(payload) for payload in payloads]
    return sum(1 for before, after in pairwise(prompts) if after[: len(before)] != before)


def task_requests(payloads: Sequence[Any], agent: str, model: str) -> list[dict[str, Any]]:
    """The bodies of an agent's task requests among those answered 200 (`payloads`), without its side requests
    (a title, a quota probe, Gemini CLI's next-speaker and loop checks), which carry no shell tool or ask for JSON.
    `agent`: claude, codex or gemini; `model`: the task's model (Claude Code asks a smaller one for its titles)."""
    turns: list[dict[str, Any]] = []
    for payload in payloads:
        if not isinstance(payload, dict):
            continue
        tools = list(payload.get("tools") or [])
        if agent == "claude" and (payload.get("model") != model or messages.shell_tool(tools) is None):
            continue
        config = payload.get("generationConfig") or {}
        side = "responseJsonSchema" in config or "responseSchema" in config
        if agent == "gemini" and (side or gemini.shell_tool(tools) is None):
            continue
        turns.append(payload)
    return turns
