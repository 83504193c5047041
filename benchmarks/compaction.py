"""Does compaction keep agents alive, cheaply and stably? Replays the shared traces turn by turn.

    python -m benchmarks.compaction [--window 4000 8000] [--hits 30] [--verbose]

A loopback upstream enforces a small context window (counting with o200k_base, refusing like
OpenAI) and answers summarizer calls. Each trace is replayed turn by turn (request k is the first
messages up to the k-th assistant reply), directly and through inflight. Then a 128k-token
conversation measures the latency inflight adds on turns that replay a stored compaction record.
Prints tables; asserts nothing.

"prefix stable": the share of turns, after the first compaction, whose upstream request begins
with the whole of the previous turn's upstream request (what a prompt cache needs to hit).
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

import httpx
import orjson

from benchmarks.conversations import grow, load_traces
from benchmarks.harness import median, percentile, table
from inflight.tokens import TokenCounter
from tests.support.processes import fake_upstream, inflight

SMALL_MODEL = "gpt-4o-small-window"


def upstream_stats(client: httpx.Client, direct: str) -> dict[str, Any]:
    stats: dict[str, Any] = client.get(direct.removesuffix("/v1") + "/_upstream/stats").json()
    return stats


def replay_requests(messages: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """Request k: everything before the k-th assistant reply (the first two are the system prompt and task)."""
    return [messages[:k] for k in range(2, len(messages)) if messages[k]["role"] == "assistant"]


def replay(name: str, body: dict[str, Any], direct: str, proxied: str, client: httpx.Client) -> list[object]:
    counter = TokenCounter()
    fail_direct = fail_proxy = hits = stable = after_first = 0
    tokens_direct = tokens_proxy = 0
    summaries_before = upstream_stats(client, direct)["summaries"]
    previous: list[Any] | None = None
    session = f"{name}-{time.time()}"
    for messages in replay_requests(body["messages"]):
        request = {**body, "model": SMALL_MODEL, "messages": messages}
        direct_response = client.post(f"{direct}/chat/completions", json=request)
        fail_direct += direct_response.status_code != 200
        tokens_direct += counter.count_request(request, "o200k_base").total
        response = client.post(f"{proxied}/chat/completions", json=request, headers={"x-inflight-session": session})
        fail_proxy += response.status_code != 200
        if response.status_code != 200:
            print(f"  {name} turn {len(messages)}: {response.status_code} {response.text[:300]}", file=sys.stderr)
        tokens_proxy += int(response.headers.get("x-inflight-tokens-after", 0))
        actions = response.headers.get("x-inflight-actions", "none").split(",")
        sent = upstream_stats(client, direct)["last_messages"]
        if previous is not None:
            after_first += 1
            stable += sent[: len(previous)] == previous
        if "--verbose" in sys.argv:
            same = previous is not None and sent[: len(previous)] == previous
            before, after = (
                response.headers.get("x-inflight-tokens-before"),
                response.headers.get("x-inflight-tokens-after"),
            )
            print(
                f"  {name} turn {len(messages)}: {before}->{after} {','.join(actions)} stable={same}", file=sys.stderr
            )
        if (
            actions != ["none"]
            and not {"summarize", "fallback", "mask", "truncate"} & set(actions[1:])
            and ("summary-cached" in actions or previous is not None)
        ):
            hits += 1
        if actions != ["none"] or previous is not None:
            previous = sent
    summaries = upstream_stats(client, direct)["summaries"] - summaries_before
    stability = f"{100 * stable / after_first:.0f}%" if after_first else "-"
    turns = len(replay_requests(body["messages"]))
    return [name, turns, fail_direct, fail_proxy, f"{tokens_direct:,}", f"{tokens_proxy:,}", summaries, hits, stability]


def record_hit_latency(direct: str, proxied: str, client: httpx.Client, hits: int) -> list[list[object]]:
    body = grow(128_000)
    body["model"] = "gpt-4o"
    headers = {"x-inflight-session": f"latency-{time.time()}"}
    client.post(f"{proxied}/chat/completions", json=body, headers=headers)  # the compaction itself
    added: list[float] = []
    for i in range(hits):
        body["messages"].append({"role": "user", "content": f"Continue with step {i}."})
        data = orjson.dumps(body)
        start = time.perf_counter()
        client.post(f"{direct}/chat/completions", content=data, headers={"content-type": "application/json"})
        direct_ms = (time.perf_counter() - start) * 1000
        start = time.perf_counter()
        response = client.post(
            f"{proxied}/chat/completions", content=data, headers={**headers, "content-type": "application/json"}
        )
        proxy_ms = (time.perf_counter() - start) * 1000
        actions = response.headers["x-inflight-actions"].split(",")
        assert "summarize" not in actions and "none" not in actions, response.headers  # served from the record
        added.append(proxy_ms - direct_ms)
    return [["128k-token record hits", hits, f"{median(added):+.2f}", f"{percentile(added, 99):+.2f}"]]


def arguments() -> argparse.ArgumentParser:
    """The command line (`tests/test_docs.py` checks each command the docs show against it)."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--window", type=int, nargs="+", default=[4000, 8000], help="the small upstream's windows")
    parser.add_argument("--hits", type=int, default=30, help="record-hit turns to time at 128k tokens")
    parser.add_argument("--verbose", action="store_true", help="print each turn's actions")
    return parser


def main() -> None:
    args = arguments().parse_args()
    for number, window in enumerate(args.window):
        config = f'models: {{"{SMALL_MODEL}": {{context_window: {window}}}, "gpt-4o": {{context_window: 100000}}}}\n'
        with (
            fake_upstream("--window", f"{SMALL_MODEL}={window}") as direct,
            httpx.Client(timeout=60) as client,
            inflight(direct, config) as proxied,
        ):
            rows = [replay(name, body, direct, proxied, client) for name, body in load_traces().items()]
            header = ["trace", "turns", "fail direct", "fail inflight", "tokens direct", "tokens inflight"]
            print(f"context window {window:,} tokens")
            print(table(rows, [*header, "summarizer calls", "record hits", "prefix stable"]))
            print()
            if number == len(args.window) - 1:
                latency = record_hit_latency(direct, proxied, client, args.hits)
                print(table(latency, ["turns", "n", "added p50 ms", "added p99 ms"]))


if __name__ == "__main__":
    main()
