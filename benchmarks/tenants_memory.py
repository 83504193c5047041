"""What many client keys cost the proxy's memory: one small chat completion per new key, the RSS every step.

    python -m benchmarks.tenants_memory [--keys 80000] [--step 10000] [--connections 4] [--config '{...}']

Starts the fake upstream and an inflight process (`--config`: JSON, which is YAML, for `inflight serve
--config`), warms the proxy with 200 requests under one key, then sends `--keys` non-streaming chat
completions, each with a bearer key of its own (a tenant of its own), over `--connections` keep-alive
connections. After each `--step` keys it prints the proxy's RSS (`/proc/PID/status`), its growth since the
warm-up, the growth over that step per 10,000 keys, and the clients `/inflight/usage` keeps one by one.

Every per-tenant map is bounded, each filling at its own pace: the policy maps (window brackets, reply sizes,
calibration) at 4,096 (model, client) pairs, the usage figures and the prefix tallies at 10,000 clients, and
the prefix tracker's last request per conversation at `compaction.cache.max_bytes / 4` (32 MiB by default,
about 700 bytes a one-message conversation: some 48,000 of them). So the growth per step falls to about
nothing past about 50,000 keys. Prints; asserts nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections.abc import Callable
from pathlib import Path
from urllib.parse import urlsplit

import httpx

from benchmarks.harness import CHAT_REQUEST, table
from tests.support.processes import fake_upstream, inflight_process

WARM_REQUESTS = 200
PER = 10_000  # the growth is shown per this many keys


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def request_for(url: str, key: str) -> bytes:
    parts = urlsplit(url)
    head = (
        f"POST {parts.path}/chat/completions HTTP/1.1\r\nHost: {parts.netloc}\r\nContent-Type: application/json\r\n"
        f"Authorization: Bearer {key}\r\nContent-Length: {len(CHAT_REQUEST)}\r\n\r\n"
    )
    return head.encode() + CHAT_REQUEST


def tenant_key(number: int) -> str:
    return f"sk-tenant-{number:08d}"


async def send_keys(url: str, keys: range, *, connections: int, key_of: Callable[[int], str] = tenant_key) -> None:
    """One request for each number of `keys`, with the key `key_of(number)`, over `connections` connections."""
    parts = urlsplit(url)
    numbers = iter(keys)

    async def worker() -> None:
        reader, writer = await asyncio.open_connection(parts.hostname, parts.port)
        try:
            for number in numbers:
                writer.write(request_for(url, key_of(number)))
                head = await reader.readuntil(b"\r\n\r\n")
                if not head.startswith(b"HTTP/1.1 200"):
                    raise RuntimeError(f"key {number}: {head.splitlines()[0]!r}")
                length = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
                await reader.readexactly(length)
        finally:
            writer.close()

    await asyncio.gather(*(worker() for _ in range(connections)))


def arguments() -> argparse.ArgumentParser:
    """The command line (`tests/test_docs.py` checks each command the docs show against it)."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--keys", type=int, default=80_000, help="client keys to send, one request each")
    parser.add_argument("--step", type=int, default=10_000, help="keys between two RSS readings")
    parser.add_argument("--connections", type=int, default=4, help="keep-alive connections sending at once")
    parser.add_argument("--config", default="", help="the proxy's config, as JSON (e.g. a smaller cache)")
    return parser


def main() -> None:
    args = arguments().parse_args()
    rows: list[list[object]] = []
    with fake_upstream() as upstream_url, inflight_process(upstream_url, args.config) as (proxy_url, pid):
        usage_url = proxy_url.removesuffix("/v1") + "/inflight/usage"
        asyncio.run(send_keys(proxy_url, range(WARM_REQUESTS), connections=1, key_of=lambda _: "sk-warm"))
        time.sleep(1)
        start = previous = rss_mib(pid)
        began = time.monotonic()
        sent = 0
        while sent < args.keys:
            step = min(args.step, args.keys - sent)
            asyncio.run(send_keys(proxy_url, range(sent, sent + step), connections=args.connections))
            sent += step
            time.sleep(1)  # the metrics' batch is added in (`FLUSH_S`)
            now = rss_mib(pid)
            clients = httpx.get(usage_url, timeout=30).json()["clients_seen"]
            per = (now - previous) * PER / step
            rows.append([f"{sent:,}", f"{now:.1f}", f"{now - start:+.1f}", f"{per:+.1f}", f"{clients:,}"])
            print(" | ".join(map(str, rows[-1])), f"({time.monotonic() - began:.0f} s)", flush=True)
            previous = now
    print()
    print(f"RSS after the warm-up: {start:.1f} MiB")
    header = ["keys", "RSS MiB", "growth MiB", f"growth per {PER:,} keys MiB", "clients kept (usage)"]
    print(table(rows, header))


if __name__ == "__main__":
    main()
