"""How long the client waits when a conversation passes a compaction threshold, over several compactions.

    python -m benchmarks.crossing [--window 16000] [--tokens 90000] [--think 1.0] [--summarizer-delay 2]

A conversation grown from the shared traces is replayed turn by turn (request k: everything
before the k-th assistant reply) through inflight, against the fake upstream, whose summaries
take `--summarizer-delay` seconds. Between turns the agent "thinks" for `--think` seconds (the
model's reply, the tool's run). Each turn is also sent straight to the upstream, so "added" is
the latency inflight adds. It runs twice: with summaries made in the background (the default
config), and with summaries made on the turn that passes the threshold (`summarize.background_at: null`).

Per turn it prints: tokens before and after, the actions, the added latency, and the background
summary queue after the turn. Then per mode: the turns that passed a threshold (and put a summary or
the ledger in place), summarizer calls, the added latency of those turns and of turns that replay a
stored record, and prefix stability (the share of turns after the first compaction whose upstream
request begins with the whole of the previous turn's). Prints; asserts nothing.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import httpx

from benchmarks.conversations import grow
from benchmarks.harness import median, table
from tests.support.processes import fake_upstream, inflight

MODEL = "gpt-4o-crossing"
SUMMARY_ACTIONS = {"summarize", "summary-precomputed", "fallback"}


def requests_of(body: dict[str, Any]) -> list[list[dict[str, Any]]]:
    messages = body["messages"]
    return [messages[:k] for k in range(2, len(messages)) if messages[k]["role"] == "assistant"]


def replay(body: dict[str, Any], direct: str, proxied: str, think: float, verbose: bool) -> list[object]:
    rows: list[list[object]] = []
    crossing_ms: list[float] = []
    hit_ms: list[float] = []
    stable = after_first = 0
    previous: list[Any] | None = None
    session = {"x-inflight-session": f"crossing-{time.time()}"}
    stats_url = proxied.removesuffix("/v1") + "/inflight/stats"
    upstream_url = direct.removesuffix("/v1") + "/_upstream/stats"
    with httpx.Client(timeout=120) as client:
        summaries_before = client.get(upstream_url).json()["summaries"]
        for number, messages in enumerate(requests_of(body)):
            request = {**body, "model": MODEL, "messages": messages}
            started = time.perf_counter()
            client.post(f"{direct}/chat/completions", json=request)
            direct_ms = (time.perf_counter() - started) * 1000
            started = time.perf_counter()
            response = client.post(f"{proxied}/chat/completions", json=request, headers=session)
            added = (time.perf_counter() - started) * 1000 - direct_ms
            actions = response.headers.get("x-inflight-actions", "none").split(",")
            sent = client.get(upstream_url).json()["last_messages"]
            if previous is not None:
                after_first += 1
                stable += sent[: len(previous)] == previous
            if actions != ["none"] or previous is not None:
                previous = sent
            if SUMMARY_ACTIONS & set(actions):
                crossing_ms.append(added)
            elif "summary-cached" in actions or (actions in (["mask"], ["truncate"]) and previous is not None):
                hit_ms.append(added)
            jobs = client.get(stats_url).json()["summary_jobs"] or {}
            before, after = response.headers["x-inflight-tokens-before"], response.headers["x-inflight-tokens-after"]
            queue = f"{jobs.get('queued', 0)}/{jobs.get('running', 0)}"
            rows.append([number + 1, f"{before}->{after}", ",".join(actions), f"{added:+.1f}", queue])
            time.sleep(think)
        calls = client.get(upstream_url).json()["summaries"] - summaries_before
    if verbose:
        print(table(rows, ["turn", "tokens", "actions", "added ms", "jobs queued/running"]))
    stability = f"{100 * stable / after_first:.0f}%" if after_first else "-"
    crossings = len(crossing_ms)
    ratio = f"{calls / crossings:.2f}" if crossings else "-"
    crossing_p50 = f"{median(crossing_ms):+.1f}" if crossing_ms else "-"
    hit_p50 = f"{median(hit_ms):+.1f}" if hit_ms else "-"
    return [len(rows), crossings, calls, ratio, crossing_p50, f"{max(crossing_ms, default=0):+.1f}", hit_p50, stability]


def arguments() -> argparse.ArgumentParser:
    """The command line (`tests/test_docs.py` checks each command the docs show against it)."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--window", type=int, default=16000, help="the model's context window")
    parser.add_argument("--tokens", type=int, default=90000, help="how long the conversation grows")
    parser.add_argument("--think", type=float, default=1.0, help="seconds between turns")
    parser.add_argument("--summarizer-delay", type=float, default=2.0, help="seconds each summary takes")
    parser.add_argument("--verbose", action="store_true", help="print every turn")
    return parser


def main() -> None:
    args = arguments().parse_args()
    body = grow(args.tokens)
    rows = []
    with fake_upstream("--summarizer-delay", str(args.summarizer_delay)) as direct:
        for mode, background_at in [("background", "0.6"), ("on the crossing turn", "null")]:
            config = (
                f'models: {{"{MODEL}": {{context_window: {args.window}}}}}\n'
                f"compaction: {{summarize: {{background_at: {background_at}}}}}\n"
            )
            with inflight(direct, config) as proxied:
                print(f"summaries made {mode}:")
                rows.append([mode, *replay(body, direct, proxied, args.think, args.verbose)])
    header = ["summaries made", "turns", "crossings", "summarizer calls", "calls/crossing"]
    header += ["crossing added p50 ms", "crossing added max ms", "record-hit added p50 ms", "prefix stable"]
    print(table(rows, header))


if __name__ == "__main__":
    main()
