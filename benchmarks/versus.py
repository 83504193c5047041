"""This checkout's idle throughput against another checkout's, measured in alternating rounds.

Starts one fake upstream and two proxies in front of it, this checkout's and the one at `--against`
(a `git worktree` of an older commit; its package may still be called `proxy`; both run on this Python
environment, so it must have the other's dependencies), then loads them in turn
at concurrency 32, `--rounds` rounds of `--seconds` each, the order flipped every round. A shared
machine's speed drifts by tens of percent within minutes, so two benchmark runs made one after the
other compare the drift as much as the code; alternating short rounds gives both the same machine.
Prints each proxy's requests/s per round and their medians, and its CPU time per request (read from
/proc). Asserts nothing.

    python -m benchmarks.versus --against ../old [--rounds 6] [--seconds 2]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from benchmarks.harness import table
from benchmarks.overhead import EVENTS, INTERVAL_S, concurrent
from tests.support.processes import fake_upstream, wait_for_port
from tests.support.servers import free_port

HERE = Path(__file__).resolve().parents[1]


def cpu_seconds(pid: int) -> float:
    """The user and system CPU time the process has used (Linux's /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@contextmanager
def proxy_of(checkout: Path, upstream: str) -> Iterator[tuple[int, str]]:
    """The checkout's proxy, run from its own directory, in front of `upstream`; yields its pid and chat URL."""
    package = "inflight" if (checkout / "inflight" / "__main__.py").exists() else "proxy"
    port = free_port()
    with tempfile.NamedTemporaryFile("w", suffix=".yaml") as config:
        command = [sys.executable, "-m", package, "serve", "--config", config.name, "--port", str(port)]
        process = subprocess.Popen(
            [*command, "--upstream", upstream],
            cwd=checkout,
            env={**os.environ, "PYTHONPATH": str(checkout)},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            wait_for_port(port)
            yield process.pid, f"http://127.0.0.1:{port}/v1/chat/completions"
        finally:
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


Rounds = dict[str, list[tuple[float, float]]]  # per target: requests/s and CPU microseconds per request, by round


def measure(targets: dict[str, tuple[int, str]], *, rounds: int, seconds: float) -> Rounds:
    """Each target's requests/s and CPU microseconds per request, round by round, the order flipped each round."""
    results: Rounds = {name: [] for name in targets}
    for _, url in targets.values():  # warm-up: connections, caches, the tokenizer
        asyncio.run(concurrent(url, concurrency=32, seconds=1))
    order = list(targets)
    for number in range(rounds):
        for name in order if number % 2 == 0 else reversed(order):
            pid, url = targets[name]
            before = cpu_seconds(pid)
            latencies, rps = asyncio.run(concurrent(url, concurrency=32, seconds=seconds))
            results[name].append((rps, (cpu_seconds(pid) - before) / max(len(latencies), 1) * 1e6))
    return results


def arguments() -> argparse.ArgumentParser:
    """The command line (`tests/test_docs.py` checks each command the docs show against it)."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--against", type=Path, required=True, help="the other checkout (a git worktree)")
    parser.add_argument("--rounds", type=int, default=6, help="rounds per proxy")
    parser.add_argument("--seconds", type=float, default=2.0, help="length of each round")
    return parser


def main() -> None:
    args = arguments().parse_args()
    other = args.against.resolve()
    with (
        fake_upstream("--stream-chunks", str(EVENTS), "--stream-interval", str(INTERVAL_S)) as upstream,
        proxy_of(HERE, upstream) as this,
        proxy_of(other, upstream) as that,
    ):
        results = measure({"this checkout": this, str(other): that}, rounds=args.rounds, seconds=args.seconds)
    rows = []
    for name, rounds in results.items():
        rates = [rps for rps, _ in rounds]
        cpu = statistics.median(us for _, us in rounds)
        rows.append([name, " / ".join(f"{rps:.0f}" for rps in rates), f"{statistics.median(rates):.0f}", f"{cpu:.0f}"])
    print(table(rows, ["proxy", "requests/s, concurrency 32, by round", "median", "CPU µs a request"]))
    this_rps, that_rps = (statistics.median(rps for rps, _ in rounds) for rounds in results.values())
    print(f"this checkout serves {this_rps / that_rps:.2f}x the other's requests/s")


if __name__ == "__main__":
    main()
