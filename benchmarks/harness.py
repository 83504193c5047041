"""Shared pieces of the benchmark scripts: start servers as subprocesses, wait for ports, summarise."""

from __future__ import annotations

import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.support.servers import free_port, read_body  # noqa: E402

__all__ = ["free_port", "read_body", "inflight", "median", "percentile", "process", "table", "wait_for_port"]


def wait_for_port(port: int, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.02)
    raise RuntimeError(f"nothing listening on port {port}")


@contextmanager
def process(args: Sequence[str], port: int, *, env: dict[str, str] | None = None) -> Iterator[None]:
    """Run a server subprocess until the block ends; its output is discarded."""
    proc = subprocess.Popen(
        list(args),
        cwd=ROOT,
        env={**os.environ, **(env or {})},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_for_port(port)
        yield
    finally:
        proc.terminate()
        proc.wait(timeout=10)


@contextmanager
def inflight(upstream_url: str, config: str = "") -> Iterator[str]:
    """An inflight proxy subprocess in front of `upstream_url`; yields its /v1 base URL."""
    port = free_port()
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as handle:
        handle.write(config)
    cmd = [sys.executable, "-m", "proxy", "serve", "--config", handle.name, "--port", str(port)]
    try:
        with process([*cmd, "--upstream", upstream_url], port):
            yield f"http://127.0.0.1:{port}/v1"
    finally:
        os.unlink(handle.name)


def percentile(values: Sequence[float], pct: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(pct / 100 * (len(ordered) - 1))))
    return ordered[index]


def median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else float("nan")


def table(rows: Sequence[Sequence[object]], header: Sequence[str]) -> str:
    cells = [list(map(str, header))] + [[str(c) for c in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    lines = ["| " + " | ".join(cell.ljust(widths[i]) for i, cell in enumerate(row)) + " |" for row in cells]
    lines.insert(1, "|" + "|".join("-" * (w + 2) for w in widths) + "|")
    return "\n".join(lines)
