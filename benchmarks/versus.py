"""This checkout's idle throughput against another checkout's, measured in alternating rounds.

Starts one fake upstream and two proxies in front of it, this checkout's and the one at `--against`
(a `git worktree` of an older commit; its package may still be called `proxy`; both run on this Python
environment, so it must have the other's dependencies), then loads them in turn
at concurrency 32, `--rounds` rounds of `--seconds` each, the order flipped every round. A shared
machine's speed drifts by tens of percent within minutes, so two benchmark runs made one after the
other compare the drift as much as the code; alternating short rounds gives both the same machine.
Prints each proxy's requests/s per round and their medians, and its CPU time per request (read from
/proc). With `--collector`, each proxy runs under `benchmarks.collector_probe`, and the table also
shows the time its garbage collections took during the rounds, per request. With `--streams N`, it
then times a stream's first byte N times through each proxy, each time after one sent to the upstream
directly (as `benchmarks.overhead` does), the two proxies' order flipped each time: both are compared
with the same direct streams. Asserts nothing.

    python -m benchmarks.versus --against ../old [--rounds 6] [--seconds 2] [--collector] [--streams 300]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from benchmarks.harness import CHAT_REQUEST, RawConnection, table
from benchmarks.overhead import EVENTS, INTERVAL_S, concurrent, streaming
from tests.support.processes import fake_upstream, wait_for_port
from tests.support.servers import free_port

HERE = Path(__file__).resolve().parents[1]
PROBE = Path(__file__).resolve().with_name("collector_probe.py")


def cpu_seconds(pid: int) -> float:
    """The user and system CPU time the process has used (Linux's /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@dataclass
class Proxy:
    """A proxy being measured: its process, its chat URL, and where its collections are written (or None)."""

    pid: int
    url: str
    collections: Path | None = None
    windows: list[tuple[float, float]] = field(default_factory=list)  # its rounds, by `time.monotonic()`

    def collector_us(self, requests: int) -> float:
        """Microseconds of garbage collection per request during the rounds (read once the process has exited;
        NaN if it was killed before it could write them)."""
        assert self.collections is not None
        if not self.collections.exists():
            return math.nan
        made: list[list[float]] = json.loads(self.collections.read_text())
        spent = sum(length for start, length in made if any(a <= start <= b for a, b in self.windows))
        return spent / max(requests, 1) * 1e6


@contextmanager
def proxy_of(checkout: Path, upstream: str, *, collector: Path | None = None) -> Iterator[Proxy]:
    """The checkout's proxy, run from its own directory, in front of `upstream` (under `collector_probe`, writing
    its collections to `collector`, if given)."""
    package = "inflight" if (checkout / "inflight" / "__main__.py").exists() else "proxy"
    port = free_port()
    with tempfile.NamedTemporaryFile("w", suffix=".yaml") as config:
        serve = ["serve", "--config", config.name, "--port", str(port), "--upstream", upstream]
        command = [sys.executable, "-m", package, *serve]
        if collector is not None:  # the probe's file from this checkout, the proxy from its own
            command = [sys.executable, str(PROBE), package, str(collector), *serve]
        process = subprocess.Popen(
            command,
            cwd=checkout,
            env={**os.environ, "PYTHONPATH": str(checkout)},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            wait_for_port(port)
            yield Proxy(process.pid, f"http://127.0.0.1:{port}/v1/chat/completions", collector)
        finally:
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


Rounds = dict[str, list[tuple[float, float, int]]]  # per target and round: requests/s, CPU µs a request, requests


def measure(targets: dict[str, Proxy], *, rounds: int, seconds: float) -> Rounds:
    """Each target's requests/s and CPU microseconds per request, round by round, the order flipped each round."""
    results: Rounds = {name: [] for name in targets}
    for proxy in targets.values():  # warm-up: connections, caches, the tokenizer
        asyncio.run(concurrent(proxy.url, concurrency=32, seconds=1))
    order = list(targets)
    for number in range(rounds):
        for name in order if number % 2 == 0 else reversed(order):
            proxy = targets[name]
            before, began = cpu_seconds(proxy.pid), time.monotonic()
            latencies, rps = asyncio.run(concurrent(proxy.url, concurrency=32, seconds=seconds))
            proxy.windows.append((began, time.monotonic()))
            cpu = (cpu_seconds(proxy.pid) - before) / max(len(latencies), 1) * 1e6
            results[name].append((rps, cpu, len(latencies)))
    return results


async def first_bytes(direct: str, targets: dict[str, Proxy], count: int) -> dict[str, list[float]]:
    """Each stream's time to its first body byte (ms): one straight to the upstream, then one through each proxy,
    `count` times, the proxies' order flipped each time."""
    request = streaming(CHAT_REQUEST)
    connections = {"direct": await RawConnection.open(direct, request)}
    for name, proxy in targets.items():
        connections[name] = await RawConnection.open(proxy.url, request)
    for connection in connections.values():  # warm-up: connections, caches
        for _ in range(10):
            await connection.stream()
    times: dict[str, list[float]] = {name: [] for name in connections}
    names = list(targets)
    for number in range(count):
        for name in ["direct", *(names if number % 2 == 0 else reversed(names))]:
            times[name].append((await connections[name].stream())[0])
    for connection in connections.values():
        connection.close()
    return times


def arguments() -> argparse.ArgumentParser:
    """The command line (`tests/test_docs.py` checks each command the docs show against it)."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--against", type=Path, required=True, help="the other checkout (a git worktree)")
    parser.add_argument("--rounds", type=int, default=6, help="rounds per proxy")
    parser.add_argument("--seconds", type=float, default=2.0, help="length of each round")
    parser.add_argument("--collector", action="store_true", help="also time each proxy's garbage collections")
    parser.add_argument("--streams", type=int, default=0, help="then time this many streams' first byte through each")
    return parser


def main() -> None:
    args = arguments().parse_args()
    other = args.against.resolve()
    with tempfile.TemporaryDirectory() as scratch:
        probes = (Path(scratch, "this.json"), Path(scratch, "other.json")) if args.collector else (None, None)
        with (
            fake_upstream("--stream-chunks", str(EVENTS), "--stream-interval", str(INTERVAL_S)) as upstream,
            proxy_of(HERE, upstream, collector=probes[0]) as this,
            proxy_of(other, upstream, collector=probes[1]) as that,
        ):
            targets = {"this checkout": this, str(other): that}
            results = measure(targets, rounds=args.rounds, seconds=args.seconds)
            times = (
                asyncio.run(first_bytes(f"{upstream}/chat/completions", targets, args.streams)) if args.streams else {}
            )
        rows = []
        for name, rounds in results.items():
            rates = [rps for rps, _, _ in rounds]
            cpu = statistics.median(us for _, us, _ in rounds)
            row = [name, " / ".join(f"{rps:.0f}" for rps in rates), f"{statistics.median(rates):.0f}", f"{cpu:.0f}"]
            if args.collector:
                row.append(f"{targets[name].collector_us(sum(n for _, _, n in rounds)):.1f}")
            rows.append(row)
    headers = ["proxy", "requests/s, concurrency 32, by round", "median", "CPU µs a request"]
    print(table(rows, [*headers, "collector µs a request"] if args.collector else headers))
    this_rps, that_rps = (statistics.median(rps for rps, _, _ in rounds) for rounds in results.values())
    print(f"this checkout serves {this_rps / that_rps:.2f}x the other's requests/s")
    if times:
        direct = statistics.median(times["direct"])
        rows = [["direct", f"{direct:.3f}", ""]]
        rows += [
            [name, f"{statistics.median(times[name]):.3f}", f"{statistics.median(times[name]) - direct:+.3f}"]
            for name in targets
        ]
        print(table(rows, ["", f"stream TTFB p50 (ms), {args.streams} each", "added"]))


if __name__ == "__main__":
    main()
