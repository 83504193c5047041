"""What keeping state outside the process costs, and what a second worker gains.

    python -m benchmarks.state [--hits 30] [--seconds 8] [--rounds 2]

1. Turns at 128k tokens that replay a stored record (the turns after a compaction) through inflight
   with `state.url` memory://, a SQLite file and a local redis-server (started here; needs
   `redis-server` on PATH). "added" is the latency over the same request sent straight to the fake
   upstream, as in `benchmarks.compaction`. The turns vary by a millisecond or two from run to run on
   a shared machine, so the store's own part is also timed directly: the `load` of that
   conversation's record, which is all such a turn asks of the store (an unchanged record is not
   written back).
2. Requests per second at concurrency 32 (small chat requests on keep-alive connections) with
   `inflight serve --workers 1` and `--workers 2`, on SQLite, alternated over `--rounds`. The load
   comes from `wrk` when it is installed (`apt-get install wrk`: it takes far less of the two
   cores than a Python client, which competes with the workers), else from the Python client.
Prints tables; asserts nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import httpx
import orjson

from benchmarks.compaction import record_hit_latency
from benchmarks.conversations import grow
from benchmarks.harness import CHAT_REQUEST, median, percentile, table
from benchmarks.overhead import concurrent
from inflight.compaction import ConversationCompactions
from inflight.compaction.record import Record, RecordStore
from inflight.config import load_settings
from inflight.formats import CHAT_COMPLETIONS
from inflight.pipeline.engine import Options, Pipeline
from inflight.policy.calibration import Calibration
from inflight.policy.windows import ContextRegistry
from inflight.records.codec import encode
from inflight.records.memory import MemoryRecordStore
from inflight.records.redis import RedisRecordStore
from inflight.records.sqlite import SqliteRecordStore
from inflight.tokens import TokenCounter
from tests.support.processes import fake_upstream, inflight
from tests.support.redis import redis_server

WRK_SCRIPT = """wrk.method = "POST"
wrk.body = '{body}'
wrk.headers["Content-Type"] = "application/json"
"""


def hit_latency(direct: str, state_url: str, hits: int) -> list[float]:
    """(added p50, added p99) of record-hit turns at 128k tokens with this store."""
    with inflight(direct, f'state: {{url: "{state_url}"}}\n') as proxied, httpx.Client(timeout=120) as client:
        [[_, _, p50, p99]] = record_hit_latency(direct, proxied, client, hits)
    return [float(str(p50)), float(str(p99))]


def record_of_128k() -> tuple[str, list[Record]]:
    """The key and records a 128k-token conversation's compaction leaves (ledger only: no summarizer)."""
    body = grow(128_000)
    body["model"] = "gpt-4o"
    settings = load_settings(None)
    cache = settings.compaction.cache
    store = MemoryRecordStore(max_entries=cache.max_entries, max_bytes=cache.max_bytes, ttl_s=cache.ttl_s)
    pipeline = Pipeline(
        settings,
        counter=TokenCounter(),
        registry=ContextRegistry(settings),
        calibration=Calibration(),
        compactions=ConversationCompactions(store),
        summarizers=None,
    )
    raw = orjson.dumps(body)

    async def compact() -> None:
        counted = pipeline.count(raw, orjson.loads(raw), CHAT_COMPLETIONS)
        assert counted is not None
        accounting = pipeline.account(counted)
        await pipeline.prepare(counted, accounting, Options(session="bench"))

    asyncio.run(compact())
    key = "session:bench"
    return key, asyncio.run(store.load(key))


def load_times(store: RecordStore, key: str, records: list[Record], count: int) -> list[float]:
    """Milliseconds per `load` of the record (what a record-hit turn asks of the store)."""

    async def measure() -> list[float]:
        await store.save(key, records)
        times = []
        for _ in range(count):
            started = time.perf_counter()
            assert await store.load(key) == records
            times.append((time.perf_counter() - started) * 1000)
        await store.close()
        return times

    return asyncio.run(measure())


def throughput(direct: str, state_url: str, workers: int, seconds: float) -> float:
    config = f'state: {{url: "{state_url}"}}\n'
    with inflight(direct, config, "--workers", str(workers)) as proxied:
        url = f"{proxied}/chat/completions"
        load(url, 1)  # every worker warm
        return load(url, seconds)


def load(url: str, seconds: float) -> float:
    """Requests per second at concurrency 32 for `seconds`."""
    if shutil.which("wrk") is None:
        return asyncio.run(concurrent(url, concurrency=32, seconds=seconds))[1]
    with tempfile.NamedTemporaryFile("w", suffix=".lua") as script:
        script.write(WRK_SCRIPT.format(body=CHAT_REQUEST.decode()))
        script.flush()
        command = ["wrk", "-t1", "-c32", f"-d{max(int(seconds), 1)}s", "-s", script.name, url]
        output = subprocess.run(command, capture_output=True, text=True, check=True).stdout
    return float(re.search(r"Requests/sec:\s+([\d.]+)", output).group(1))  # type: ignore[union-attr]


def arguments() -> argparse.ArgumentParser:
    """The command line (`tests/test_docs.py` checks each command the docs show against it)."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hits", type=int, default=30, help="record-hit turns timed per store")
    parser.add_argument("--seconds", type=float, default=8, help="length of each throughput run")
    parser.add_argument("--rounds", type=int, default=2, help="alternated throughput runs per worker count")
    return parser


def main() -> None:
    args = arguments().parse_args()
    folder = Path(tempfile.mkdtemp())
    with fake_upstream() as direct, redis_server() as redis_url:
        stores = [("memory", "memory://"), ("sqlite", f"sqlite:///{folder}/hits.db"), ("redis", redis_url)]
        latencies = {name: hit_latency(direct, url, args.hits) for name, url in stores}
        memory_p50 = latencies["memory"][0]
        rows = [
            [name, args.hits, f"{p50:+.2f}", f"{p99:+.2f}", f"{p50 - memory_p50:+.2f}"]
            for name, (p50, p99) in latencies.items()
        ]
        print(table(rows, ["state.url", "turns", "added p50 ms", "added p99 ms", "vs memory p50 ms"]))
        key, records = record_of_128k()
        loads: list[tuple[str, RecordStore]] = [
            ("memory", MemoryRecordStore(max_entries=10, max_bytes=2**30, ttl_s=60)),
            ("sqlite", SqliteRecordStore(f"{folder}/load.db", ttl_s=60, max_bytes=2**30)),
            ("redis", RedisRecordStore(redis_url, ttl_s=60)),
        ]
        size = len(encode(records)) // 1024
        rows = []
        for name, store in loads:
            times = load_times(store, key, records, 200)
            rows.append([name, f"{size} kB", f"{median(times):.3f}", f"{percentile(times, 99):.3f}"])
        print(table(rows, ["store", "record (JSON)", "load p50 ms", "load p99 ms"]))
        rates: dict[int, list[float]] = {1: [], 2: []}
        for _ in range(args.rounds):
            for workers in (1, 2):
                rates[workers].append(throughput(direct, f"sqlite:///{folder}/rps.db", workers, args.seconds))
    one = median(rates[1])
    rows = [
        [
            f"--workers {w}",
            " ".join(f"{r:.0f}" for r in rates[w]),
            f"{median(rates[w]):.0f}",
            f"{median(rates[w]) / one:.2f}x",
        ]
        for w in (1, 2)
    ]
    client = "wrk" if shutil.which("wrk") else "the Python client"
    print(table(rows, ["workers", f"requests/s per round ({client}, c=32)", "median", "vs one worker"]))


if __name__ == "__main__":
    main()
