"""`inflight serve --workers N`: N processes on one port, sharing their state through `state.url`.

Each worker binds a socket of its own with SO_REUSEPORT, so the kernel spreads new connections
evenly across them. uvicorn's own multi-worker mode shares one listening socket instead, and the
worker that wakes first takes most connections (README has the measured throughput:
`python -m benchmarks.state`).

The parent only supervises: it starts the workers, restarts one that dies, and passes SIGTERM or
SIGINT on to all of them (each then finishes its requests, as uvicorn does on its own). It also
gives them a directory for their metrics, so that `GET /metrics` on any worker counts them all.
"""

from __future__ import annotations

import errno
import logging
import multiprocessing
import os
import secrets
import shutil
import signal
import socket
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from multiprocessing.process import BaseProcess
from types import FrameType

import uvicorn
from prometheus_client.multiprocess import mark_process_dead

from inflight.app import create_app, tune_collector
from inflight.config import ConfigError, Settings
from inflight.http.server import prepare_process, uvicorn_options

log = logging.getLogger("inflight")

RESTART_PAUSE_S = 1.0
MAX_RESTARTS, CRASH_WINDOW_S = 5, 60
PORT_IN_USE_EXIT = 2  # a worker that finds its port taken exits with this: the parent stops instead of restarting


class PortInUse(Exception):
    """The address to listen on is taken: by another server, or by another `inflight serve` on that port."""

    def __init__(self, host: str, port: int) -> None:
        super().__init__(
            f"port {port} on {host} is in use (another inflight or another server listens there): "
            "stop it, or give this one another --port"
        )


def check_port_free(host: str, port: int) -> None:
    """Raise `PortInUse` if anything is bound to `host:port`, before any worker starts.

    The probe binds without SO_REUSEPORT, so it fails even where the holder is another `--workers` proxy,
    whose SO_REUSEPORT sockets would otherwise let a second one join silently and take part of the traffic."""
    if port == 0:
        return
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # a connection in TIME_WAIT is no holder
        try:
            probe.bind((host, port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise PortInUse(host, port) from None
            raise


def with_one_item_key(settings: Settings) -> Settings:
    """The settings every worker gets: with one `responses.item_key`, so each opens the compaction items the others
    sealed. Without the key configured or the upstream's key to derive it from, the parent makes one at random for
    all of its workers (items then stay readable while it runs, a restarted worker included, but not after)."""
    if settings.responses.item_key or settings.upstream_for("responses").api_key:
        return settings
    shared = settings.responses.model_copy(update={"item_key": secrets.token_hex(32)})
    return settings.model_copy(update={"responses": shared})


def check_workers(settings: Settings, workers: int) -> None:
    """Refuse what cannot work with `workers` processes, saying why."""
    if workers < 1:
        raise ConfigError("--workers must be at least 1")
    if workers > 1 and not settings.state.shared:
        raise ConfigError(
            f"--workers {workers} with state.url memory:// would give each worker its own compaction records: "
            "a conversation whose turns reach different workers would be summarized by each and sent different "
            "prefixes. Set state.url to sqlite:///inflight.db (one machine) or redis://HOST:PORT/0"
        )
    if workers > 1 and settings.listen.port == 0:
        raise ConfigError("--workers needs a fixed listen.port: with port 0 each worker would get a port of its own")


def listening_socket(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind((host, port))
    sock.listen(2048)
    sock.set_inheritable(True)
    return sock


def run_worker(settings: Settings) -> None:
    """One worker: its own socket on the shared port, its own app and event loop."""
    prepare_process(settings)
    try:
        sock = listening_socket(settings.listen.host, settings.listen.port)
    except OSError as exc:
        if exc.errno != errno.EADDRINUSE:
            raise
        log.error("inflight: %s", PortInUse(settings.listen.host, settings.listen.port))
        sys.exit(PORT_IN_USE_EXIT)
    config = uvicorn.Config(create_app(settings, on_started=tune_collector), **uvicorn_options(settings))
    uvicorn.Server(config).run(sockets=[sock])


@contextmanager
def shared_metrics() -> Iterator[str]:
    """Where every worker keeps its metrics (prometheus_client's multiprocess mode): the directory
    PROMETHEUS_MULTIPROC_DIR names if it is set, else a fresh one, removed at the end."""
    given = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    if given:
        yield given
        return
    directory = tempfile.mkdtemp(prefix="inflight-metrics-")
    # Spawned workers inherit it, and import prometheus_client afresh: their values then go to files there.
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = directory
    try:
        yield directory
    finally:
        del os.environ["PROMETHEUS_MULTIPROC_DIR"]
        shutil.rmtree(directory, ignore_errors=True)


def forget_metrics_of(process: BaseProcess, metrics_directory: str) -> None:
    """A worker exited: its gauges (jobs queued and running) go; what it counted stays in the totals."""
    if process.pid is not None:
        mark_process_dead(process.pid, metrics_directory)  # type: ignore[no-untyped-call]


def serve_workers(settings: Settings, workers: int) -> int:
    """Run `workers` worker processes until SIGTERM or SIGINT; restart any that dies meanwhile."""
    with shared_metrics() as metrics_directory:
        return supervise(with_one_item_key(settings), workers, metrics_directory)


def supervise(settings: Settings, workers: int, metrics_directory: str) -> int:
    return Supervisor(settings, metrics_directory).run(workers)


class Supervisor:
    """The parent's loop: start the workers, replace one that exits, pass a stop signal on to all."""

    def __init__(self, settings: Settings, metrics_directory: str) -> None:
        self.settings = settings
        self.metrics_directory = metrics_directory
        self.context = multiprocessing.get_context("spawn")
        self.running: list[BaseProcess] = []
        self.restarts: list[float] = []
        self.stopping = False
        self.port_in_use = False  # a worker found the port taken (it said so): no restart would do better

    def run(self, workers: int) -> int:
        signal.signal(signal.SIGTERM, self.stop)
        signal.signal(signal.SIGINT, self.stop)
        self.running.extend(self.start() for _ in range(workers))
        log.info("inflight: %d workers on port %d", workers, self.settings.listen.port)
        while not self.stopping:
            self.replace_exited()
            time.sleep(0.2)
        for process in self.running:
            process.join(timeout=30)
            forget_metrics_of(process, self.metrics_directory)
        if self.port_in_use:
            return PORT_IN_USE_EXIT
        return 1 if self.crashing else 0

    @property
    def crashing(self) -> bool:
        """Workers die as fast as they start (the port taken, a broken config)."""
        return len(self.restarts) > MAX_RESTARTS

    def start(self) -> BaseProcess:
        process = self.context.Process(target=run_worker, args=(self.settings,), daemon=False)
        process.start()
        return process

    def stop(self, signum: int, frame: FrameType | None) -> None:
        self.stopping = True
        for process in self.running:
            if process.pid is not None and process.is_alive():
                process.terminate()  # SIGTERM: uvicorn finishes what it is serving, then exits

    def replace_exited(self) -> None:
        for index, process in enumerate(self.running):
            if process.is_alive() or self.stopping:
                continue
            if process.exitcode == PORT_IN_USE_EXIT:
                self.port_in_use = True
                self.stop(signal.SIGTERM, None)
                return
            now = time.monotonic()
            self.restarts = [t for t in self.restarts if t > now - CRASH_WINDOW_S] + [now]
            if self.crashing:
                log.error("inflight: workers keep exiting (%d in %d s); stopping", len(self.restarts), CRASH_WINDOW_S)
                self.stop(signal.SIGTERM, None)
                return
            log.warning("inflight: worker %d exited with %s; starting another", process.pid, process.exitcode)
            forget_metrics_of(process, self.metrics_directory)
            time.sleep(RESTART_PAUSE_S)
            if not self.stopping:  # a signal may have come during the pause
                self.running[index] = self.start()
