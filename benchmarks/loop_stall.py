"""Does a big compaction hold up everyone else? Small-request latency while huge requests are compacted.

Starts the fake upstream and an inflight proxy (each in its own process), then sends `--big`
chat requests of `--mb` MB each at once (agent conversations whose tool outputs need truncating,
masking and a summary), while three probes run over their own keep-alive connections: `GET /healthz`
and a small chat completion through the proxy, and the same small chat straight to the upstream
(which shares the machine and serves the big requests' summaries, so it shows the upstream's own part
of the wait), each once every 10 ms. Prints the probes' latency before and during the load, and what
the big requests cost. It asserts nothing.

    python -m benchmarks.loop_stall [--big 10] [--mb 30]
"""

from __future__ import annotations

import argparse
import asyncio
import random
import time
from urllib.parse import urlsplit

import orjson

from benchmarks.harness import CHAT_REQUEST, percentile, table
from tests.support.processes import fake_upstream, inflight

WORDS = [
    "def", "return", "self", "import", "error", "test", "value", "file", "line", "path", "None", "assert",
    "config", "request", "response", "token", "window", "print", "class", "raise", "for", "in", "if", "else",
]  # fmt: skip
PROBE_INTERVAL_S = 0.01


def big_conversation(megabytes: int, seed: int) -> bytes:
    """An agent conversation of about `megabytes` MB: one big tool output per turn, varied text."""
    rng = random.Random(seed)
    messages: list[dict[str, object]] = [
        {"role": "system", "content": "You are a coding agent."},
        {"role": "user", "content": f"Fix the failing test (run {seed})."},
    ]
    turn = 0
    size = 0
    while size < megabytes * 1_000_000:
        lines = [" ".join(rng.choices(WORDS, k=12)) + f" {turn}:{i}" for i in range(1500)]
        output = "\n".join(lines)
        call = {"id": f"call_{turn}", "type": "function", "function": {"name": "bash", "arguments": '{"cmd": "x"}'}}
        messages.append({"role": "assistant", "content": f"Step {turn}.", "tool_calls": [call]})
        messages.append({"role": "tool", "tool_call_id": f"call_{turn}", "content": output})
        size += len(output)
        turn += 1
    return orjson.dumps({"model": "gpt-4o-mini", "messages": messages})


async def exchange(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, request: bytes) -> tuple[int, float]:
    start = time.perf_counter()
    writer.write(request)
    head = await reader.readuntil(b"\r\n\r\n")
    length = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
    await reader.readexactly(length)
    return int(head.split(b" ")[1]), (time.perf_counter() - start) * 1000


def post(url: str, body: bytes) -> bytes:
    parts = urlsplit(url)
    head = f"POST {parts.path} HTTP/1.1\r\nHost: {parts.netloc}\r\nContent-Length: {len(body)}\r\n\r\n"
    return head.encode() + body


async def probe(url: str, request: bytes, until: asyncio.Event, out: list[tuple[float, float]]) -> None:
    """(when, latency in ms) of one request every PROBE_INTERVAL_S, on one keep-alive connection."""
    parts = urlsplit(url)
    reader, writer = await asyncio.open_connection(parts.hostname, parts.port)
    while not until.is_set():
        status, ms = await exchange(reader, writer, request)
        assert status == 200, status
        out.append((time.perf_counter(), ms))
        await asyncio.sleep(PROBE_INTERVAL_S)
    writer.close()


async def big(url: str, body: bytes) -> tuple[int, float]:
    parts = urlsplit(url)
    reader, writer = await asyncio.open_connection(parts.hostname, parts.port)
    try:
        return await exchange(reader, writer, post(url, body))
    finally:
        writer.close()


def row(name: str, samples: list[float]) -> list[object]:
    return [
        name,
        len(samples),
        f"{percentile(samples, 50):.2f}",
        f"{percentile(samples, 99):.2f}",
        f"{max(samples):.2f}",
    ]


async def measure(proxy_url: str, upstream_url: str, args: argparse.Namespace) -> None:
    root = proxy_url.removesuffix("/v1")
    healthz = f"GET /healthz HTTP/1.1\r\nHost: {urlsplit(root).netloc}\r\n\r\n".encode()
    chat = post(f"{proxy_url}/chat/completions", CHAT_REQUEST)
    bodies = [big_conversation(args.mb, seed) for seed in range(args.big)]
    stop = asyncio.Event()
    health: list[tuple[float, float]] = []
    small: list[tuple[float, float]] = []
    direct: list[tuple[float, float]] = []  # the same small chat straight to the upstream: its own share
    probes = [
        asyncio.create_task(probe(root, healthz, stop, health)),
        asyncio.create_task(probe(f"{proxy_url}/chat/completions", chat, stop, small)),
        asyncio.create_task(probe(upstream_url, post(f"{upstream_url}/chat/completions", CHAT_REQUEST), stop, direct)),
    ]
    await asyncio.sleep(3)  # baseline
    load_start = time.perf_counter()
    results = await asyncio.gather(*(big(f"{proxy_url}/chat/completions", body) for body in bodies))
    load_end = time.perf_counter()
    stop.set()
    await asyncio.gather(*probes)

    def during(samples: list[tuple[float, float]]) -> list[float]:
        return [ms for when, ms in samples if load_start <= when <= load_end]

    def before(samples: list[tuple[float, float]]) -> list[float]:
        return [ms for when, ms in samples if when < load_start]

    print(f"{args.big} requests of {args.mb} MB sent at once; took {load_end - load_start:.1f} s in all")
    print(
        f"their statuses: {sorted({status for status, _ in results})}; slowest {max(ms for _, ms in results):,.0f} ms"
    )
    print()
    rows = [
        row("/healthz, idle", before(health)),
        row("/healthz, under load", during(health)),
        row("small chat, idle", before(small)),
        row("small chat, under load", during(small)),
        row("small chat direct to the upstream, idle", before(direct)),
        row("small chat direct to the upstream, under load", during(direct)),
    ]
    print(table(rows, ["probe", "n", "p50 ms", "p99 ms", "max ms"]))


def arguments() -> argparse.ArgumentParser:
    """The command line (`tests/test_docs.py` checks each command the docs show against it)."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--big", type=int, default=10, help="big requests sent at once")
    parser.add_argument("--mb", type=int, default=30, help="size of each, in MB")
    return parser


def main() -> None:
    args = arguments().parse_args()
    with fake_upstream() as upstream_url, inflight(upstream_url) as proxy_url:
        asyncio.run(measure(proxy_url, upstream_url, args))


if __name__ == "__main__":
    main()
