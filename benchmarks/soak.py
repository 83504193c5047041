"""A time-limited soak test: mixed traffic at high concurrency, watching for proxy errors, memory growth and leaked fds.

Starts the fake upstream and an inflight proxy (each in its own process, loopback only), then runs
`--concurrency` clients for `--minutes`, each picking one kind of request at a time:

    plain       a small chat completion
    stream      a streamed one, read to the end
    cancel      a slow stream the client abandons after its first bytes
    compact     a conversation over a small model's window: truncated, masked, summarized
    big         a 3 MB conversation: compacted in a worker thread
    gzip        a gzip-compressed request body
    refusal     a model whose real window only the upstream knows: refused, learned, retried
    no-summary  a small window whose summarizer is down: a digest is used instead

Every 30 s it prints the requests so far, the proxy-caused errors (any answer but a 200; the fake
upstream gives none of its own), and the proxy's RSS and open file descriptors. At the end it
waits for idle connections to time out and prints the fds again. It asserts nothing.

    python -m benchmarks.soak [--minutes 10] [--concurrency 64]
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import os
import random
import socket
import time
from collections import Counter
from pathlib import Path

import httpx
import orjson

from tests.support.processes import fake_upstream, inflight_process

KINDS = {
    "plain": 30,
    "stream": 15,
    "cancel": 10,
    "compact": 12,
    "big": 3,
    "gzip": 10,
    "refusal": 10,
    "no-summary": 10,
}
REFUSING_MODELS = 300  # distinct models the upstream refuses above 3,000 tokens: each is learned once


def dead_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])  # closed again: nothing listens there


def config(summarizer_port: int) -> str:
    return f"""
models:
  small-*:
    context_window: 3000
  refuse-*:
    encoding: o200k_base
  nosum-*:
    context_window: 2500
    compaction:
      summarize:
        base_url: http://127.0.0.1:{summarizer_port}/v1
        timeout_s: 2
compaction:
  reserve_tokens: 1000
"""


def conversation(rng: random.Random, turns: int, lines: int) -> list[dict[str, object]]:
    messages: list[dict[str, object]] = [
        {"role": "system", "content": "You are a coding agent."},
        {"role": "user", "content": f"Fix issue #{rng.randrange(10_000)}."},
    ]
    for turn in range(turns):
        call = {"id": f"call_{turn}", "type": "function", "function": {"name": "bash", "arguments": '{"cmd":"ls"}'}}
        messages.append({"role": "assistant", "content": f"Step {turn}.", "tool_calls": [call]})
        output = "\n".join(f"{rng.random():.6f} line {i} of output {turn}" for i in range(lines))
        messages.append({"role": "tool", "tool_call_id": f"call_{turn}", "content": output})
    return messages


def request_for(kind: str, rng: random.Random) -> tuple[bytes, dict[str, str], bool]:
    """(body, headers, stream) for one request of `kind`."""
    small = [{"role": "user", "content": "Say ok."}]
    body: dict[str, object] = {"model": "gpt-4o-mini", "messages": small}
    headers: dict[str, str] = {}
    if kind in ("stream", "cancel"):
        body["stream"] = True
        if kind == "cancel":
            headers["x-scenario"] = "paced"
    elif kind == "compact":
        body = {"model": f"small-{rng.randrange(4)}", "messages": conversation(rng, 60, 4)}
    elif kind == "big":
        body["messages"] = conversation(rng, 60, 1200)
    elif kind == "gzip":
        raw = orjson.dumps({"model": "gpt-4o-mini", "messages": conversation(rng, 10, 20)})
        return gzip.compress(raw), {"content-encoding": "gzip"}, False
    elif kind == "refusal":
        body = {"model": f"refuse-{rng.randrange(REFUSING_MODELS)}", "messages": conversation(rng, 24, 12)}
    elif kind == "no-summary":
        body = {"model": "nosum-model", "messages": conversation(rng, 60, 4)}
    return orjson.dumps(body), headers, bool(body.get("stream"))


class Tally:
    def __init__(self) -> None:
        self.by_kind: Counter[str] = Counter()
        self.errors: Counter[str] = Counter()
        self.samples: list[str] = []

    def error(self, kind: str, what: str) -> None:
        self.errors[kind] += 1
        if len(self.samples) < 10:
            self.samples.append(f"{kind}: {what[:200]}")


async def one(client: httpx.AsyncClient, kind: str, rng: random.Random, tally: Tally) -> None:
    body, headers, stream = request_for(kind, rng)
    try:
        async with client.stream("POST", "/chat/completions", content=body, headers=headers) as response:
            if response.status_code != 200:
                tally.error(kind, f"{response.status_code} {(await response.aread())!r}")
                return
            if kind == "cancel":
                async for _ in response.aiter_raw():
                    break  # the client leaves mid-stream
            else:
                data = await response.aread()
                if not stream and b'"choices"' not in data:
                    tally.error(kind, f"200 without choices: {data!r}")
    except httpx.HTTPError as exc:
        tally.error(kind, f"{type(exc).__name__}: {exc}")
    tally.by_kind[kind] += 1


async def client_loop(url: str, deadline: float, tally: Tally, seed: int) -> None:
    rng = random.Random(seed)
    kinds, weights = list(KINDS), list(KINDS.values())
    async with httpx.AsyncClient(base_url=url, timeout=120, trust_env=False) as client:
        while time.monotonic() < deadline:
            await one(client, rng.choices(kinds, weights)[0], rng, tally)


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


async def soak(url: str, pid: int, args: argparse.Namespace) -> None:
    tally = Tally()
    baseline = fds(pid)
    print(f"proxy pid {pid}: {rss_mb(pid):.0f} MB RSS, {baseline} fds before traffic")
    start = time.monotonic()
    deadline = start + args.minutes * 60
    clients = [asyncio.create_task(client_loop(url, deadline, tally, seed)) for seed in range(args.concurrency)]
    print("| elapsed | requests | req/s | proxy errors | RSS MB | fds |")
    print("|---------|----------|-------|--------------|--------|-----|")
    last = 0
    while not all(task.done() for task in clients):
        await asyncio.sleep(1)
        elapsed = time.monotonic() - start
        if elapsed - last >= 30 or all(task.done() for task in clients):
            last = int(elapsed // 30) * 30
            total = sum(tally.by_kind.values())
            errors = sum(tally.errors.values())
            line = f"| {elapsed:6.0f}s | {total:8,} | {total / elapsed:5.0f} | {errors:12,} | {rss_mb(pid):6.0f}"
            print(f"{line} | {fds(pid):3} |", flush=True)
    await asyncio.gather(*clients)
    await asyncio.sleep(args.settle)
    print()
    print(f"requests by kind: {dict(tally.by_kind)}")
    print(f"proxy-caused errors: {sum(tally.errors.values())} {dict(tally.errors)}")
    for sample in tally.samples:
        print(f"  {sample}")
    print(f"fds {args.settle:.0f} s after the last request: {fds(pid)} (before traffic: {baseline})")
    print(f"RSS at the end: {rss_mb(pid):.0f} MB")


def arguments() -> argparse.ArgumentParser:
    """The command line (`tests/test_docs.py` checks each command the docs show against it)."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=float, default=10)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--settle", type=float, default=10, help="seconds to wait at the end before counting fds")
    return parser


def main() -> None:
    args = arguments().parse_args()
    with (
        fake_upstream("--window", "refuse-*=3000", "--stream-interval", "0.005") as upstream_url,
        inflight_process(upstream_url, config(dead_port())) as (url, pid),
    ):
        asyncio.run(soak(url, pid, args))


if __name__ == "__main__":
    main()
