"""Big work stays off the event loop: `/healthz` keeps answering while a huge request is counted or compacted.

Each test sends one request that costs the proxy seconds of CPU and probes `/healthz` all along.
The figure compared is relative (the probe's worst wait against the big request's whole time), so
a slow machine slows both; on the old main, where this work ran on the loop, the probe waited for
most of it.
"""

from __future__ import annotations

import gzip
import random
import threading
import time

import httpx
import orjson
import pytest

from tests.conftest import ProxyFactory
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


def repetitive_gzip_body() -> bytes:
    """15 MB of text that gzip takes below 32 KB: the size the old main read on the loop."""
    text = "hello world " * 1_300_000
    body = gzip.compress(orjson.dumps({"model": "gpt-4o-mini", "messages": [{"role": "user", "content": text}]}))
    assert len(body) < 32_768
    return body


def big_agent_conversation(megabytes: int = 12) -> bytes:
    """Tool outputs of 100 KB each: all of them truncated, masked and summarized by the compaction."""
    rng = random.Random(7)
    messages: list[dict[str, object]] = [
        {"role": "system", "content": "You are a coding agent."},
        {"role": "user", "content": "Fix the failing test."},
    ]
    for turn in range(megabytes * 10):
        output = "\n".join(" ".join(rng.choices(WORDS, k=12)) for _ in range(1_400))
        call = {"id": f"call_{turn}", "type": "function", "function": {"name": "bash", "arguments": "{}"}}
        messages.append({"role": "assistant", "content": f"Step {turn}.", "tool_calls": [call]})
        messages.append({"role": "tool", "tool_call_id": f"call_{turn}", "content": output})
    return orjson.dumps({"model": "gpt-4o-mini", "messages": messages})


def probe_while(proxy_url: str, body: bytes, headers: dict[str, str]) -> tuple[float, float, int]:
    """(the worst /healthz wait, the big request's time, its status), probing every 20 ms while it runs."""
    outcome: dict[str, float | int] = {}

    def big() -> None:
        started = time.monotonic()
        response = httpx.post(f"{proxy_url}/chat/completions", content=body, headers=headers, timeout=120)
        outcome["seconds"], outcome["status"] = time.monotonic() - started, response.status_code

    thread = threading.Thread(target=big)
    thread.start()
    worst = 0.0
    with httpx.Client() as client:
        while thread.is_alive():
            started = time.monotonic()
            assert client.get(proxy_url.removesuffix("/v1") + "/healthz").status_code == 200
            worst = max(worst, time.monotonic() - started)
            time.sleep(0.02)
    thread.join()
    return worst, float(outcome["seconds"]), int(outcome["status"])


@pytest.mark.parametrize("case", ["gzip-counted", "compacted"])
def test_healthz_answers_while_a_huge_request_is_worked_on(
    upstream: tuple[UpstreamApp, str], start_proxy: ProxyFactory, case: str
) -> None:
    if case == "gzip-counted":
        body, headers = repetitive_gzip_body(), {"content-encoding": "gzip"}
    else:
        body, headers = big_agent_conversation(), {}
    # A window small enough that truncating and masking are not enough: a summary is called for too, and
    # waited for (the background job's work on 12 MB, off the loop too, takes longer than the default wait).
    compaction = {"reserve_tokens": 1_000, "summarize": {"wait_s": 60}}
    small_window = {"models": {"gpt-4o-mini": {"context_window": 8_000}}, "compaction": compaction}
    with start_proxy(upstream[1], **small_window) as proxy_url:
        worst, seconds, status = probe_while(proxy_url, body, headers)
    assert status == 200
    assert seconds > 0.5, "too little work to tell a blocked loop from a free one"
    # A blocked loop would keep /healthz waiting about as long as the big request (over 0.5 s); on a busy
    # machine a free one still shows waits of tens of milliseconds, so the bound has a floor.
    assert worst < max(0.1 * seconds, 0.2), f"/healthz waited {worst:.2f} s of the big request's {seconds:.2f} s"
    if case == "compacted":
        forwarded = orjson.loads(upstream[0].chat_requests()[-1].body)["messages"]
        summaries = [m for m in forwarded if str(m.get("content")).startswith("[Previous conversation summary]")]
        assert len(summaries) == 1 and "Summary number" in summaries[0]["content"]  # the upstream's summary
