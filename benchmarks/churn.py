"""What compaction costs the upstream's prompt cache: conversations growing at each rate, replayed turn by turn.

    python -m benchmarks.churn [--window 32000] [--turns 60] [--growth 5 7.5 ... 30] [--profile steady]

For each growth rate (the share of the budget each turn adds: an assistant's tool call and its result,
`benchmarks.conversations.growing`), a conversation of `--turns` turns is sent through inflight to the
fake upstream, one request per turn, as the agent would send it. After each turn the replay waits until
no background summary is running, as for an agent that thinks longer than a summary takes. From what
the upstream received it reports:

- rewrites: turns, from the first compaction on, whose request does not begin with the previous one;
- turns per rewrite: those turns over the rewrites;
- cached share: of every prompt token sent, those in the common prefix with the previous request
  (what a prefix cache serves), in o200k tokens;
- summarizer calls: those the upstream answered;
- back-to-back rewrites: rewrites on the turn right after another;
- churn turns: turns whose `x-inflight-actions` include `churn` (the next compaction is fewer than
  `min_turns_between` turns away);
- best: the turns per rewrite if each compaction went down to the floor (head, the summary as sent, the
  latest turn) and the conversation then grew to `summarize_at`;
- never compacting: the cached share the client's own requests would get with an infinite window.

`--profile` varies the turn sizes (`noisy`, `bursty`, `ramp`: `benchmarks.conversations.turn_sizes`).
Prints; asserts nothing.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence
from typing import Any

import httpx

from benchmarks.conversations import PROFILES, growing, turn_sizes
from benchmarks.harness import table
from tests.support.processes import fake_upstream, inflight

MODEL = "gpt-4o-churn"
SUMMARIZE_AT = 0.85
GROWTHS = [5.0, 7.5, 10.0, 12.5, 15.0, 17.5, 20.0, 22.5, 25.0, 27.5, 30.0]
SUMMARY_OPENING = "[inflight:"  # how the summary message (or the ledger standing in for it) opens


def requests_of(body: dict[str, Any]) -> list[list[dict[str, Any]]]:
    """Each turn's request: every message up to and including that turn's tool result."""
    messages = body["messages"]
    return [messages[:end] for end in range(4, len(messages) + 1, 2)]


def tokens_of(messages: Sequence[dict[str, Any]], counts: dict[str, int]) -> list[int]:
    """Each message's o200k tokens (the count is kept by the message's JSON, which repeats turn after turn)."""
    from inflight.tokens import TokenCounter

    counter = TokenCounter()
    encoding = counter.encoding("o200k_base")
    out = []
    for message in messages:
        key = repr(message)
        if key not in counts:
            counts[key] = counter.count_message(message, encoding)
        out.append(counts[key])
    return out


def common_tokens(previous: Sequence[Any], sent: Sequence[Any], tokens: Sequence[int]) -> int:
    same = 0
    while same < min(len(previous), len(sent)) and previous[same] == sent[same]:
        same += 1
    return sum(tokens[:same])


def idle(client: httpx.Client, stats_url: str) -> None:
    """Wait until no background summary is queued or running."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        jobs = client.get(stats_url).json().get("summary_jobs") or {}
        if not jobs.get("queued") and not jobs.get("running"):
            return
        time.sleep(0.02)


def replay(requests: list[list[dict[str, Any]]], direct: str, proxied: str, *, verbose: bool) -> dict[str, Any]:
    stats_url = proxied.removesuffix("/v1") + "/inflight/stats"
    upstream_url = direct.removesuffix("/v1") + "/_upstream/stats"
    session = {"x-inflight-session": f"churn-{time.time()}"}
    counts: dict[str, int] = {}
    cached = sent_total = rewrites = turns_from_first = back_to_back = 0
    rewritten = False
    churn = 0
    summary_tokens: list[int] = []
    previous: list[Any] | None = None
    compacted = False
    with httpx.Client(timeout=120) as client:
        calls_before = client.get(upstream_url).json()["summaries"]
        for messages in requests:
            response = client.post(
                f"{proxied}/chat/completions", json={"model": MODEL, "messages": messages}, headers=session
            )
            response.raise_for_status()
            actions = response.headers.get("x-inflight-actions", "none").split(",")
            churn += "churn" in actions
            sent = client.get(upstream_url).json()["last_messages"]
            tokens = tokens_of(sent, counts)
            sent_total += sum(tokens)
            summary_tokens += [t for m, t in zip(sent, tokens, strict=True) if _is_summary(m)]
            if previous is not None:
                common = common_tokens(previous, sent, tokens)
                cached += common
                back_to_back += rewritten and sent[: len(previous)] != previous
                rewritten = sent[: len(previous)] != previous
                compacted = compacted or rewritten
                rewrites += rewritten
                turns_from_first += compacted
            previous = sent
            if verbose:
                before, after = (
                    response.headers["x-inflight-tokens-before"],
                    response.headers["x-inflight-tokens-after"],
                )
                print(f"  {before:>6} -> {after:>6}  {','.join(actions)}", flush=True)
            idle(client, stats_url)
        calls = client.get(upstream_url).json()["summaries"] - calls_before
    return {
        "rewrites": rewrites,
        "turns": turns_from_first,
        "cached": cached / max(sent_total, 1),
        "calls": calls,
        "churn": churn,
        "back_to_back": back_to_back,
        "summary_tokens": max(summary_tokens, default=0),
    }


def _is_summary(message: dict[str, Any]) -> bool:
    content = message.get("content")
    return isinstance(content, str) and content.startswith(SUMMARY_OPENING) and message.get("role") == "user"


def never_compacting(requests: list[list[dict[str, Any]]]) -> float:
    """The cached share of the client's own requests: what the cache gives with an infinite window."""
    counts: dict[str, int] = {}
    cached = total = 0
    previous: list[Any] | None = None
    for messages in requests:
        tokens = tokens_of(messages, counts)
        total += sum(tokens)
        if previous is not None:
            cached += common_tokens(previous, messages, tokens)
        previous = messages
    return cached / max(total, 1)


def best_turns(requests: list[list[dict[str, Any]]], growth: int, summary: int, budget: int) -> float:
    """Turns per rewrite when each compaction goes down to the floor (head, summary, latest turn)."""
    counts: dict[str, int] = {}
    head = sum(tokens_of(requests[0][:2], counts))
    floor = head + summary + growth
    return max((SUMMARIZE_AT * budget - floor) / growth, 1.0)


def arguments() -> argparse.ArgumentParser:
    """The command line (`tests/test_docs.py` checks each command the docs show against it)."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--window", type=int, default=32000, help="the model's context window")
    parser.add_argument("--turns", type=int, default=60, help="turns in each conversation")
    parser.add_argument("--growth", type=float, nargs="+", default=GROWTHS, help="percent of the budget a turn adds")
    parser.add_argument("--profile", choices=PROFILES, default="steady", help="how the turns' sizes vary")
    parser.add_argument("--verbose", action="store_true", help="print each turn's tokens and actions")
    parser.add_argument("--config", default="", help="more YAML for inflight's config (e.g. compaction settings)")
    return parser


def main() -> None:
    args = arguments().parse_args()
    budget = args.window - min(16384, args.window // 4)
    rows = []
    config = f'models: {{"{MODEL}": {{context_window: {args.window}}}}}\n{args.config}\n'
    with fake_upstream() as direct:
        for growth in args.growth:
            per_turn = int(budget * growth / 100)
            requests = requests_of(growing(turn_sizes(args.profile, per_turn, args.turns)))
            with inflight(direct, config) as proxied:  # its own: the summarizer budget, calibration start afresh
                result = replay(requests, direct, proxied, verbose=args.verbose)
            per_rewrite = result["turns"] / result["rewrites"] if result["rewrites"] else float("inf")
            best = best_turns(requests, per_turn, result["summary_tokens"], budget)
            rows.append(
                [
                    f"{growth:g}%",
                    f"{result['rewrites']} in {result['turns']}",
                    f"{per_rewrite:.1f}",
                    f"{best:.1f}",
                    f"{result['cached']:.0%}",
                    f"{never_compacting(requests):.0%}",
                    result["calls"],
                    result["back_to_back"],
                    result["churn"],
                ]
            )
            print(rows[-1], flush=True)
    header = ["growth/turn", "rewrites", "turns/rewrite", "best", "cached share", "never compacting"]
    header += ["summarizer calls", "back-to-back rewrites", "churn turns"]
    print(f"window {args.window:,}, budget {budget:,}, {args.turns} turns, profile {args.profile}")
    print(table(rows, header))


if __name__ == "__main__":
    main()
