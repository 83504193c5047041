"""Big work stays off the event loop: judged from the loop itself, never from how long the work took.

The proxy is served on a loop whose every turn is measured (`tests.support.loop_monitor`) in CPU time
of the loop's own thread, which neither a busy machine nor a worker holding the GIL inflates. A loop
that does a big request's work itself (decompressing, parsing, counting, compacting, writing the
body) spends at least what one parse of that body costs in a single turn; a loop that hands the
work off spends a millisecond at most. The yardstick is that parse, timed here, on this machine, in
the same CPU time: a turn is too long from a third of it. Both sides scale alike with the
machine's speed, so the verdict holds however fast or slow it is; a last test shows the verdict
catches the intake's own work run on the loop.

What this does not judge: a worker thread holding the GIL long (one C call over a whole body) stalls
the loop too, but that is a question of how long, not of where the work runs; `benchmarks.big` and
`benchmarks.loop_stall` show it, as `/healthz` latency.
"""

from __future__ import annotations

import asyncio
import gzip
import random
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import orjson
import pytest

from inflight.app import create_app
from inflight.config import load_settings
from inflight.formats import CHAT_COMPLETIONS
from inflight.http.intake import parse_and_count
from inflight.http.server import uvicorn_options
from inflight.pipeline.engine import build_pipeline
from tests.http.test_messages import MODEL as MESSAGES_MODEL
from tests.http.test_messages import agent_messages
from tests.support.loop_monitor import LoopMonitor
from tests.support.servers import serve
from tests.support.upstream import UpstreamApp

WORDS = [
    "def",
    "return",
    "self",
    "import",
    "error",
    "test",
    "value",
    "file",
    "line",
    "path",
    "None",
    "assert",
    "config",
    "request",
]
# A window small enough that truncating and masking are not enough: a summary is called for too, and waited
# for (the background job's work on 12 MB, off the loop too, takes longer than the default wait).
SMALL_WINDOW = {
    "models": {"gpt-4o-mini": {"context_window": 8_000}},
    "compaction": {"reserve_tokens": 1_000, "summarize": {"wait_s": 60}},
}
# Of the yardstick (one parse of the body): a longer turn of the loop is work done on it. Measured here, a free
# loop's longest turn was 5-12% of it (sending the 15 MB body upstream, freeing it), whatever the load; the two
# loop stalls this test found (the 15 MB body serialized on the loop, then copied into the transport's buffer in
# one write), 55-90%; the intake's work on the loop, many times it.
MAX_TURN_SHARE = 1 / 3


def repetitive_gzip_body(repeats: int = 1_300_000) -> bytes:
    """15 MB of text that gzip takes below 32 KB (the size the old main read on the loop); one message, which
    no compaction can bring under the window: it is forwarded as sent, 15 MB written to the upstream."""
    text = "hello world " * repeats
    return gzip.compress(orjson.dumps({"model": "gpt-4o-mini", "messages": [{"role": "user", "content": text}]}))


def big_agent_conversation(turns: int = 120) -> bytes:
    """Tool outputs of 100 KB each (12 MB): all of them truncated, masked and summarized by the compaction."""
    rng = random.Random(7)
    messages: list[dict[str, object]] = [
        {"role": "system", "content": "You are a coding agent."},
        {"role": "user", "content": "Fix the failing test."},
    ]
    for turn in range(turns):
        output = "\n".join(" ".join(rng.choices(WORDS, k=12)) for _ in range(1_400))
        call = {"id": f"call_{turn}", "type": "function", "function": {"name": "bash", "arguments": "{}"}}
        messages.append({"role": "assistant", "content": f"Step {turn}.", "tool_calls": [call]})
        messages.append({"role": "tool", "tool_call_id": f"call_{turn}", "content": output})
    return orjson.dumps({"model": "gpt-4o-mini", "messages": messages})


def parse_cpu_seconds(body: bytes, encoding: str) -> float:
    """The yardstick: CPU time, on this thread, of one parse of the body as the proxy reads it (least of 3)."""
    plain = gzip.decompress(body) if encoding == "gzip" else body
    least = float("inf")
    for _ in range(3):
        started = time.thread_time()
        orjson.loads(plain)
        least = min(least, time.thread_time() - started)
    return least


@contextmanager
def monitored_proxy(upstream_url: str, **overrides: Any) -> Iterator[tuple[str, LoopMonitor]]:
    """A proxy as `inflight serve` runs it, on asyncio's own loop (uvloop's turns cannot be measured), with
    a monitor on that loop; yields (its /v1 URL, the monitor)."""
    settings = load_settings(None, overrides={**overrides, "upstream": {"base_url": upstream_url}})
    monitor = LoopMonitor(create_app(settings))
    options = {**uvicorn_options(settings), "log_level": "warning", "loop": "asyncio"}
    try:
        with serve(monitor, **options) as url:
            yield url + "/v1", monitor
    finally:
        monitor.detach()


def longest_turn_share(monitor: LoopMonitor, yardstick: float) -> float:
    return monitor.longest_cpu / yardstick


@pytest.mark.parametrize("case", ["gzip-counted", "compacted"])
def test_the_loop_takes_no_long_turn_while_a_huge_request_is_worked_on(
    upstream: tuple[UpstreamApp, str], case: str
) -> None:
    if case == "gzip-counted":
        body, warm_up, headers = repetitive_gzip_body(), repetitive_gzip_body(5_000), {"content-encoding": "gzip"}
    else:
        body, warm_up, headers = big_agent_conversation(), big_agent_conversation(3), {}
    yardstick = parse_cpu_seconds(body, headers.get("content-encoding", "identity"))
    with monitored_proxy(upstream[1], **SMALL_WINDOW) as (proxy_url, monitor), httpx.Client(timeout=300) as client:
        # What happens once a process (a first compaction compiles its patterns): not what this request costs.
        assert client.post(f"{proxy_url}/chat/completions", content=warm_up, headers=headers).status_code == 200
        with monitor.recording():
            response = client.post(f"{proxy_url}/chat/completions", content=body, headers=headers)
    assert response.status_code == 200, response.text
    share = longest_turn_share(monitor, yardstick)
    assert share < MAX_TURN_SHARE, (
        f"one turn of the loop took {monitor.longest_cpu * 1000:.1f} ms of CPU: {share:.0%} of a parse of the body "
        f"({yardstick * 1000:.1f} ms), in {monitor.turns} turns"
    )
    if case == "compacted":
        forwarded = orjson.loads(upstream[0].chat_requests()[-1].body)["messages"]
        summaries = [m for m in forwarded if str(m.get("content")).startswith("[Previous conversation summary]")]
        assert len(summaries) == 1 and "Summary number" in summaries[0]["content"]  # the upstream's summary


def test_the_verdict_catches_the_intake_work_done_on_the_loop(upstream: tuple[UpstreamApp, str]) -> None:
    """The negative control: what the intake hands to a worker thread (inflate, parse, count the gzip body),
    run on the proxy's loop instead, is one turn well past the bound."""
    body = repetitive_gzip_body()
    yardstick = parse_cpu_seconds(body, "gzip")
    settings = load_settings(None, overrides=SMALL_WINDOW)
    pipeline = build_pipeline(settings, summarizers=None)

    async def on_the_loop() -> None:
        parse_and_count([body], "gzip", pipeline, CHAT_COMPLETIONS, settings.limits.max_body_bytes)

    with monitored_proxy(upstream[1], **SMALL_WINDOW) as (_, monitor):
        assert monitor.loop is not None
        with monitor.recording():
            asyncio.run_coroutine_threadsafe(on_the_loop(), monitor.loop).result(timeout=60)
    assert longest_turn_share(monitor, yardstick) >= MAX_TURN_SHARE, f"{monitor.longest_cpu * 1000:.1f} ms"


def test_context_edits_of_a_big_body_are_done_off_the_loop(upstream: tuple[UpstreamApp, str]) -> None:
    """Anthropic's context edits, done in the upstream's place, walk and count the whole conversation: on the
    loop, a megabyte body with edits froze every request, `/healthz` included."""
    messages = agent_messages(120, lines=1_500)  # 9 MB of tool results, all but two cleared by the edit
    edits = [{"type": "clear_tool_uses_20250919", "trigger": {"type": "input_tokens", "value": 1_000}}]
    body = orjson.dumps(
        {"model": MESSAGES_MODEL, "max_tokens": 64, "messages": messages, "context_management": {"edits": edits}}
    )
    warm_up = {"model": MESSAGES_MODEL, "max_tokens": 64, "messages": agent_messages(3)}
    yardstick = parse_cpu_seconds(body, "identity")
    settings = {"messages": {"context_management": "inflight"}, "models": {MESSAGES_MODEL: {"context_window": 10**7}}}
    with monitored_proxy(upstream[1], **settings) as (proxy_url, monitor), httpx.Client(timeout=300) as client:
        assert client.post(f"{proxy_url}/messages", json=warm_up).status_code == 200
        with monitor.recording():
            response = client.post(f"{proxy_url}/messages", content=body, headers={"content-type": "application/json"})
    assert response.status_code == 200, response.text
    assert response.json()["context_management"]["applied_edits"][0]["cleared_tool_uses"] == 117
    share = longest_turn_share(monitor, yardstick)
    assert share < MAX_TURN_SHARE, f"one turn of the loop took {share:.0%} of a parse of the body"


def test_a_huge_summarizer_reply_is_not_read_on_the_loop(upstream: tuple[UpstreamApp, str]) -> None:
    """A summarizer that answers 10 MB (whatever was asked) stalled the loop about 0.9 s: a reply past
    `MAX_REPLY_BYTES` is not read further, and a long one is parsed and checked in a worker thread."""
    app, url = upstream
    text = "## Task\n" + "the cause is in the parser; " * 360_000
    app.summarizer_reply = (text, "stop")
    reply = orjson.dumps({"choices": [{"message": {"role": "assistant", "content": text}, "finish_reason": "stop"}]})
    yardstick = parse_cpu_seconds(reply, "identity")
    body = big_agent_conversation(12)  # 1.2 MB over an 8k window: a summary is waited for
    with (
        monitored_proxy(url, **SMALL_WINDOW) as (proxy_url, monitor),
        httpx.Client(timeout=300) as client,
        monitor.recording(),
    ):
        response = client.post(f"{proxy_url}/chat/completions", content=body)
    assert response.status_code == 200, response.text
    assert app.summaries and "fallback" in response.headers["x-inflight-actions"]  # the ledger stood in
    share = longest_turn_share(monitor, yardstick)
    assert share < MAX_TURN_SHARE, f"one turn of the loop took {share:.0%} of a parse of the summarizer's reply"
