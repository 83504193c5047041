"""What counting costs: cold and warm counts of long agent conversations, and the event loop under load.

    python -m benchmarks.tokens [--seconds 6]

1. Cold count of 32k/128k/200k-token conversations vs a bare `encode_ordinary` over the same strings
   (target: within 1.1x).
2. Warm count: the same conversation again with one new message (target: <= 2 ms at 128k).
3. p99 latency of small requests through the proxy, alone and while 200k-token requests (every
   message new, so nothing is cached) are counted concurrently (target: <= 5 ms added).
Prints tables; asserts nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import statistics
import time
from multiprocessing.sharedctypes import Synchronized
from multiprocessing.synchronize import Event
from typing import Any

import orjson

from benchmarks.conversations import grow
from benchmarks.harness import RawConnection, percentile, table
from inflight.tokens import TokenCounter
from inflight.tokens.encodings import load_encoding
from tests.support.processes import fake_upstream, inflight

SIZES = (32_000, 128_000, 200_000)


def strings_of(body: dict[str, Any]) -> list[str]:
    """Every string the formula encodes, for the bare-encoder baseline."""
    out: list[str] = []
    for message in body["messages"]:
        for key, value in message.items():
            if key == "tool_calls":
                for call in value:
                    out += [call["function"]["name"], call["function"]["arguments"]]
            elif isinstance(value, str):
                out.append(value)
    out += [orjson.dumps(tool["function"]).decode() for tool in body.get("tools") or []]
    return out


def timed(fn: Any, repeat: int) -> float:
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - start) * 1000)
    return statistics.median(samples)


def counting_table() -> None:
    enc = load_encoding("o200k_base")
    rows = []
    for size in SIZES:
        body = grow(size)
        strings = strings_of(body)
        bare = timed(lambda: [enc.encode_ordinary(s) for s in strings], 5)  # noqa: B023
        cold = timed(lambda: TokenCounter().count_request(body, "o200k_base"), 5)  # noqa: B023
        counter = TokenCounter()
        tokens = counter.count_request(body, "o200k_base").total
        warm_samples = []
        for i in range(20):
            body["messages"].append({"role": "user", "content": f"New instruction number {i}: run the tests."})
            start = time.perf_counter()
            counter.count_request(body, "o200k_base")
            warm_samples.append((time.perf_counter() - start) * 1000)
        rows.append(
            [
                f"{tokens:,}",
                len(body["messages"]),
                f"{bare:.1f}",
                f"{cold:.1f}",
                f"{cold / bare:.2f}x",
                f"{statistics.median(warm_samples):.2f}",
                f"{max(warm_samples):.2f}",
            ]
        )
    header = ["tokens", "messages", "bare encode ms", "cold count ms", "cold/bare", "warm +1 p50 ms", "warm +1 max ms"]
    print(table(rows, header))


async def small_latencies(url: str, seconds: float) -> list[float]:
    connection = await RawConnection.open(url)
    for _ in range(50):
        await connection.post()
    latencies: list[float] = []
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        latencies.append(await connection.post())
    connection.close()
    return latencies


def unique_bodies(count: int) -> list[bytes]:
    """200k-token request bodies whose every message is new, so each one is a cold count."""
    body = grow(200_000)
    bodies = []
    for run in range(count):
        nonce = f"[run {run}] "
        messages = [
            {**m, "content": nonce + m["content"]} if isinstance(m.get("content"), str) else m for m in body["messages"]
        ]
        bodies.append(orjson.dumps({**body, "messages": messages}))
    return bodies


def load_process(url: str, ready: Event, stop: Event, sent: Synchronized[int]) -> None:
    """In its own process, so that building and sending 800 kB bodies does not slow the measuring loop."""
    bodies = unique_bodies(40)

    async def sender(offset: int) -> None:
        index = offset
        while not stop.is_set():
            connection = await RawConnection.open(url, bodies[index % len(bodies)])
            await connection.post()
            connection.close()
            with sent.get_lock():
                sent.value += 1
            index += 1

    ready.set()

    async def run() -> None:
        await sender(0)

    asyncio.run(run())


def loop_table(seconds: float) -> None:
    config = 'models: {"gpt-4o*": {context_window: 1000000}}\n'  # count only: nothing to compact here
    with fake_upstream() as direct, inflight(direct, config) as proxied:
        url = f"{proxied}/chat/completions"
        quiet = asyncio.run(small_latencies(url, seconds))
        ready, stop, sent = multiprocessing.Event(), multiprocessing.Event(), multiprocessing.Value("i", 0)
        loader = multiprocessing.Process(target=load_process, args=(url, ready, stop, sent))
        loader.start()
        ready.wait()
        time.sleep(1.0)
        busy = asyncio.run(small_latencies(url, seconds))
        stop.set()
        loader.join(timeout=30)
    rows = [
        ["alone", len(quiet), f"{percentile(quiet, 50):.2f}", f"{percentile(quiet, 99):.2f}", "-"],
        ["with 200k-token counts", len(busy), f"{percentile(busy, 50):.2f}", f"{percentile(busy, 99):.2f}", sent.value],
    ]
    print(table(rows, ["small requests", "n", "p50 ms", "p99 ms", "200k requests counted meanwhile"]))
    print(f"added p99: {percentile(busy, 99) - percentile(quiet, 99):+.2f} ms")


def arguments() -> argparse.ArgumentParser:
    """The command line (`tests/test_docs.py` checks each command the docs show against it)."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=6.0, help="length of each latency run")
    return parser


def main() -> None:
    args = arguments().parse_args()
    counting_table()
    print()
    loop_table(args.seconds)


if __name__ == "__main__":
    main()
