"""A big request costs what can be sent: a window's worth counted exactly, the rest estimated, what is sent exact.

Through real pipelines (counting, the compactor's stages, records in memory), offline.
"""

from __future__ import annotations

import asyncio
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson

from inflight.config import load_settings
from inflight.formats import CHAT_COMPLETIONS
from inflight.pipeline.accounting import Counted
from inflight.pipeline.engine import EXACT_MARGIN, Options, Pipeline, build_pipeline
from inflight.tokens import TokenCounter

WORDS = ["error", "value", "path", "request", "42", "0x1f", "timeout", "self", "def", "return", "{", "}", "==", "/"]


def log(rng: random.Random, lines: int) -> str:
    return "\n".join(" ".join(rng.choices(WORDS, k=10)) + f" #{rng.randrange(10**6)}" for _ in range(lines))


def agent_body(turns: int, lines: int, seed: int = 1) -> dict[str, Any]:
    """A coding agent's conversation: the task, then `turns` tool calls answered by logs of `lines` lines."""
    rng = random.Random(seed)
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a coding agent."},
        {"role": "user", "content": "Find why the service drops requests, and fix it."},
    ]
    for turn in range(turns):
        call = {"id": f"c{turn}", "type": "function", "function": {"name": "bash", "arguments": '{"cmd": "logs"}'}}
        messages.append({"role": "assistant", "content": f"Reading log {turn}.", "tool_calls": [call]})
        messages.append({"role": "tool", "tool_call_id": f"c{turn}", "content": log(rng, lines)})
    return {"model": "gpt-4o", "messages": messages}


def pipeline_with_window(window: int, **compaction: Any) -> Pipeline:
    overrides = {"models": {"gpt-4o": {"context_window": window}}, "compaction": compaction}
    return build_pipeline(load_settings(None, overrides=overrides), summarizers=None)


def count(pipeline: Pipeline, body: dict[str, Any]) -> Counted:
    counted = pipeline.count(orjson.dumps(body), body, CHAT_COMPLETIONS)
    assert counted is not None
    return counted


def exact_total(body: dict[str, Any]) -> int:
    return TokenCounter().count_request(body, "o200k_base").total


def test_only_the_newest_window_is_counted_and_the_rest_is_estimated_close() -> None:
    body = agent_body(turns=40, lines=120)  # about 40 x 2,300 tokens
    counted = count(pipeline_with_window(8_000), body)
    approximated = counted.count.approximated
    assert approximated and max(approximated) < len(body["messages"]) - 6  # the newest messages are counted
    newest = [tokens for i, tokens in enumerate(counted.count.messages) if i > max(approximated)]
    assert sum(newest) <= 8_000 * EXACT_MARGIN + max(newest)  # counted until past the window, then no more
    exact = exact_total(body)
    assert abs(counted.count.total - exact) < 0.1 * exact  # the estimate from samples is close
    assert not count(pipeline_with_window(1_000_000), body).count.approximated  # it fits: all counted


def test_what_a_compaction_sends_is_counted_exactly() -> None:
    body = agent_body(turns=40, lines=1500)  # about 40 x 27,000 tokens, each output over the truncation limit
    pipeline = pipeline_with_window(64_000)
    counted = count(pipeline, body)
    assert counted.count.approximated
    accounting = pipeline.account(counted)
    prepared = asyncio.run(pipeline.prepare(counted, accounting, Options()))
    assert prepared.outcome is not None and prepared.outcome.fits
    assert "truncate" in prepared.outcome.actions and "mask" in prepared.outcome.actions
    sent = orjson.loads(prepared.body)
    assert any("[... omitted" in str(message["content"]) for message in sent["messages"])  # a truncated one is sent
    assert prepared.outcome.tokens_after == exact_total(sent)
    assert prepared.sent_tokens == exact_total(sent)  # what calibration learns from is a count


def test_a_window_bigger_than_the_count_assumed_has_what_it_keeps_counted() -> None:
    body = agent_body(turns=30, lines=60)  # about 30 x 1,200 tokens, under the truncation limit
    counted = count(pipeline_with_window(4_000), body)  # counted for a small window: most of it estimated
    assert len(counted.count.approximated) > 10
    # Compacted for a bigger one, which keeps the newest 12 outputs whole: more than were counted.
    bigger = pipeline_with_window(40_000, mask={"keep_tool_results": 12})
    accounting = bigger.account(counted)
    prepared = asyncio.run(bigger.prepare(counted, accounting, Options()))
    assert prepared.outcome is not None and "mask" in prepared.outcome.actions
    sent = orjson.loads(prepared.body)
    whole = [index for index, message in enumerate(body["messages"]) if message in sent["messages"]]
    assert set(whole) & counted.count.approximated  # it sends some it had only estimated
    assert prepared.outcome.tokens_after == exact_total(sent)


def test_inflight_count_counts_every_message(tmp_path: Path) -> None:
    body = agent_body(turns=100, lines=120)  # about 230,000 tokens: past gpt-4o's window, so the proxy would estimate
    assert count(build_pipeline(load_settings(None), summarizers=None), body).count.approximated
    request = tmp_path / "request.json"
    request.write_bytes(orjson.dumps(body))
    command = [sys.executable, "-m", "inflight", "count", str(request), "--json"]
    printed = subprocess.run(command, capture_output=True, text=True, timeout=120, check=True).stdout
    assert orjson.loads(printed)["prompt_tokens"] == exact_total(body)


def test_one_huge_output_is_estimated_where_it_is_and_sent_cut_and_counted() -> None:
    body = agent_body(turns=3, lines=20)
    body["messages"][-1]["content"] = log(random.Random(2), 50_000)  # the newest output: about 3 MB
    pipeline = build_pipeline(load_settings(None), summarizers=None)
    counted = count(pipeline, body)
    assert counted.count.approximated == {len(body["messages"]) - 1}
    accounting = pipeline.account(counted)
    prepared = asyncio.run(pipeline.prepare(counted, accounting, Options()))
    assert prepared.outcome is not None and "truncate" in prepared.outcome.actions
    sent = orjson.loads(prepared.body)
    assert "[... omitted" in sent["messages"][-1]["content"]
    assert prepared.outcome.tokens_after == exact_total(sent)
