"""Servers in their own processes, for benchmarks: the proxy and the fake upstream, each on a loopback port.

A benchmark client in the same process as the servers would share their interpreter and skew every
figure; subprocesses keep client, proxy and upstream apart.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from tests.support.servers import free_port

ROOT = Path(__file__).resolve().parents[2]


def wait_for_port(port: int, timeout: float = 20.0) -> None:
    """Until something listens on `port`. A connection from `port` to itself is not that: a port picked by
    binding port 0 is an ephemeral one, and the kernel may give the probe's own socket that very port as its
    source, and connect it to itself with nobody listening (TCP's simultaneous open)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0 and sock.getsockname()[1] != port:
                return
        time.sleep(0.02)
    raise RuntimeError(f"nothing listening on port {port}")


@contextmanager
def process(
    args: Sequence[str],
    port: int,
    *,
    env: dict[str, str] | None = None,
    output: Path | None = None,
    cwd: Path = ROOT,
) -> Iterator[int]:
    """Run a server subprocess (in `cwd`) until the block ends; yields its pid. Its output goes to `output`,
    else nowhere."""
    sink = open(output, "ab") if output is not None else subprocess.DEVNULL  # noqa: SIM115 (closed below)
    proc = subprocess.Popen(
        list(args),
        cwd=cwd,
        env={**os.environ, **(env or {})},
        stdout=sink,
        stderr=sink,
    )
    try:
        wait_for_port(port)
        yield proc.pid
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        if output is not None:
            sink.close()  # type: ignore[union-attr]


@contextmanager
def fake_upstream(*options: str) -> Iterator[str]:
    """`tests.support.upstream` in its own process (options as on its command line); yields its /v1 URL."""
    port = free_port()
    with process([sys.executable, "-m", "tests.support.upstream", "--port", str(port), *options], port):
        yield f"http://127.0.0.1:{port}/v1"


@contextmanager
def inflight(upstream_url: str, config: str = "", *args: str) -> Iterator[str]:
    """An inflight proxy subprocess in front of `upstream_url` (`args` added to `inflight serve`); yields
    its /v1 base URL."""
    with inflight_process(upstream_url, config, *args) as (url, _):
        yield url


@contextmanager
def inflight_process(
    upstream_url: str, config: str = "", *args: str, output: Path | None = None
) -> Iterator[tuple[str, int]]:
    """`inflight`, also yielding the process id (to watch its memory and file descriptors); its log goes to
    `output` when given."""
    port = free_port()
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as handle:
        handle.write(config)
    cmd = [sys.executable, "-m", "inflight", "serve", "--config", handle.name, "--port", str(port)]
    try:
        with process([*cmd, "--upstream", upstream_url, *args], port, output=output) as pid:
            yield f"http://127.0.0.1:{port}/v1", pid
    finally:
        os.unlink(handle.name)
