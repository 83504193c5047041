"""One summary per burst: how many summarizer calls 20 concurrent first requests of one conversation cause.

    python -m benchmarks.burst [--rounds 3] [--requests 20] [--workers 1 2] [--delay 0]

Each round starts a fresh `inflight serve --workers N` on a new SQLite file (and on a local
redis-server when `redis-server` is on PATH) in front of the fake upstream, whose summarizer answers
after `--delay` seconds (0 means at once, the worst case for a burst: a job can finish while other
requests of the burst are still arriving). It then sends the same conversation `--requests` times at
once: once past `summarize.background_at` (a background job starts; the request is sent unchanged), and
once past `prune_at` (the turn that passes the threshold, which waits for the summary). Prints the
summarizer calls of every round; the goal is 1. Asserts nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx

from benchmarks.conversations import grow
from benchmarks.harness import table
from inflight.tokens import TokenCounter
from tests.support.processes import fake_upstream, inflight
from tests.support.redis import redis_server

SHAPES = {"past background_at": 0.65, "crossing": 0.9}  # where the conversation stands, as a share of the budget


def window_for(body: dict[str, Any], share: float) -> int:
    """The context window at which this body is `share` of the budget (the window less a quarter for the reply)."""
    tokens = TokenCounter().count_request(body, "o200k_base").total
    return int(tokens / share / 0.75)


@contextmanager
def store(kind: str) -> Iterator[str]:
    """A fresh shared store of this kind (`sqlite`, `redis`) for one round: its `state.url`."""
    if kind == "sqlite":
        with tempfile.TemporaryDirectory() as folder:
            yield f"sqlite:///{folder}/inflight.db"
    else:
        with redis_server() as url:
            yield url


async def burst(proxy: str, body: dict[str, Any], count: int) -> list[int]:
    async with httpx.AsyncClient(timeout=120) as client:
        responses = await asyncio.gather(*(client.post(f"{proxy}/chat/completions", json=body) for _ in range(count)))
    return [r.status_code for r in responses]


def summaries(upstream: str) -> int:
    return int(httpx.get(upstream.removesuffix("/v1") + "/_upstream/stats").json()["summaries"])


def round_of(upstream: str, state_url: str, workers: int, share: float, requests: int) -> tuple[int, list[int]]:
    """The summarizer calls of one burst, and its statuses."""
    body = grow(4000)
    body["model"] = "gpt-4o"
    config = (
        f"models: {{gpt-4o: {{context_window: {window_for(body, share)}}}}}\n"
        "compaction: {summarize: {max_summary_tokens: 256}}\n"  # a compacted turn lands under background_at
        f'state: {{url: "{state_url}"}}\n'
    )
    before = summaries(upstream)
    with inflight(upstream, config, "--workers", str(workers)) as proxy:
        deadline = time.monotonic() + 20
        pids: set[int] = set()
        while len(pids) < workers and time.monotonic() < deadline:  # every worker listening
            pids.add(httpx.get(proxy.removesuffix("/v1") + "/inflight/stats").json()["worker_pid"])
        statuses = asyncio.run(burst(proxy, body, requests))
        time.sleep(3)  # a job that would still start, and its summary, land within this
    return summaries(upstream) - before, statuses


def arguments() -> argparse.ArgumentParser:
    """The command line (`tests/test_docs.py` checks each command the docs show against it)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--requests", type=int, default=20)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--delay", type=float, default=0.0, help="seconds the fake summarizer takes")
    return parser


def main() -> None:
    args = arguments().parse_args()
    kinds = ["sqlite", "redis"] if shutil.which("redis-server") else ["sqlite"]
    rows = []
    with fake_upstream("--summarizer-delay", str(args.delay)) as upstream:
        for workers in args.workers:
            for kind in kinds:
                for shape, share in SHAPES.items():
                    calls, failed = [], 0
                    for _ in range(args.rounds):
                        with store(kind) as url:
                            made, statuses = round_of(upstream, url, workers, share, args.requests)
                        calls.append(made)
                        failed += sum(status != 200 for status in statuses)
                    rows.append([workers, kind, shape, args.requests, " ".join(map(str, calls)), failed])
    header = ["workers", "store", "conversation", "requests at once", "summarizer calls, each round", "not 200"]
    print(table(rows, header))


if __name__ == "__main__":
    main()
