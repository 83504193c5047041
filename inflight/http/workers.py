"""`inflight serve --workers N`: N processes on one port, sharing their state through `state.url`.

Each worker binds a socket of its own with SO_REUSEPORT, so the kernel spreads new connections
evenly across them. uvicorn's own multi-worker mode shares one listening socket instead, and the
worker that wakes first takes most connections (README has the measured throughput:
`python -m benchmarks.state`).

The parent only supervises: it starts the workers, restarts one that dies, and passes SIGTERM or
SIGINT on to all of them (each then finishes its requests, as uvicorn does on its own). Each worker's
slot has a restart budget of its own (`Slot`): one that keeps dying is started again after a growing
pause while the others keep serving; the parent stops when all of them keep dying. It also
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
from dataclasses import dataclass, field
from multiprocessing.process import BaseProcess
from types import FrameType

import uvicorn
from prometheus_client.multiprocess import mark_process_dead

from inflight.app import create_app, tune_collector
from inflight.config import ConfigError, Settings
from inflight.http.server import prepare_process, uvicorn_options

log = logging.getLogger("inflight")

RESTART_PAUSE_S = 1.0  # before a dead worker's replacement starts
MAX_RESTARTS, CRASH_WINDOW_S = 5, 60  # this many deaths of one worker's slot within the window: a crash loop
MAX_PAUSE_S = 60.0  # a crash-looping slot waits 2 * RESTART_PAUSE_S, then twice as long each death, up to this
TICK_S = 0.2  # how often the parent looks at its workers
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
    """The worker's socket on the shared port, bound but not yet listening: uvicorn listens once the app has
    started, so the kernel gives a starting worker (or one that dies as it starts) no connection to hold."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind((host, port))
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
    """Run `workers` worker processes until SIGTERM or SIGINT; restart any that dies meanwhile (`Slot`)."""
    with shared_metrics() as metrics_directory:
        return supervise(with_one_item_key(settings), workers, metrics_directory)


def supervise(settings: Settings, workers: int, metrics_directory: str) -> int:
    return Supervisor(settings, metrics_directory).run(workers)


def describe_exit(exitcode: int | None) -> str:
    """How a worker ended, in words for the log: its exit status, or the signal that killed it, by name."""
    if exitcode is None or exitcode >= 0:
        return f"exited with status {exitcode}"
    try:
        name = signal.Signals(-exitcode).name
    except ValueError:
        name = f"signal {-exitcode}"
    if name == "SIGKILL":  # nothing in inflight sends it: most often the kernel, out of memory
        return "was killed by SIGKILL (the out-of-memory killer sends this)"
    return f"was killed by {name}"


@dataclass
class Slot:
    """One of the N workers, across its restarts. Each keeps a restart budget of its own: before, all deaths were
    counted together, and one worker killed 6 times in a minute made the parent stop the healthy ones too."""

    process: BaseProcess | None = None  # None while it waits to be started again
    started: float = 0.0
    deaths: list[float] = field(default_factory=list)  # when it died, within the last CRASH_WINDOW_S
    pause_s: float = 0.0  # its back-off while it is crash-looping, else 0
    restart_at: float = 0.0

    @property
    def crash_looping(self) -> bool:
        return self.pause_s > 0

    def died(self, now: float) -> float:
        """Count a death at `now`; return how long to wait before starting the slot again.

        RESTART_PAUSE_S, until the slot dies MAX_RESTARTS times within CRASH_WINDOW_S: then a pause that doubles
        with each death up to MAX_PAUSE_S, rather than giving up on it, so that a fault that passes heals. A
        worker that stayed up a whole window starts the slot afresh."""
        if now - self.started >= CRASH_WINDOW_S:
            self.deaths, self.pause_s = [], 0.0
        self.deaths = [t for t in self.deaths if t > now - CRASH_WINDOW_S] + [now]
        if self.crash_looping or len(self.deaths) >= MAX_RESTARTS:
            self.pause_s = min(MAX_PAUSE_S, 2 * (self.pause_s or RESTART_PAUSE_S))
        return self.pause_s or RESTART_PAUSE_S


class Supervisor:
    """The parent's loop: start the workers, replace one that exits, pass a stop signal on to all."""

    def __init__(self, settings: Settings, metrics_directory: str) -> None:
        self.settings = settings
        self.metrics_directory = metrics_directory
        self.context = multiprocessing.get_context("spawn")
        self.slots: list[Slot] = []
        self.stopping = False
        self.exit_status = 0  # PORT_IN_USE_EXIT if a worker found the port taken, 1 if every worker keeps dying

    def run(self, workers: int) -> int:
        signal.signal(signal.SIGTERM, self.stop)
        signal.signal(signal.SIGINT, self.stop)
        self.slots = [Slot() for _ in range(workers)]
        for slot in self.slots:
            self.start(slot)
        log.info("inflight: %d workers on port %d", workers, self.settings.listen.port)
        while not self.stopping:
            self.tend()
            time.sleep(TICK_S)
        for slot in self.slots:
            if slot.process is not None and slot.process.pid is not None:
                slot.process.join(timeout=30)
                forget_metrics_of(slot.process, self.metrics_directory)
        return self.exit_status

    def spawn(self) -> BaseProcess:
        process = self.context.Process(target=run_worker, args=(self.settings,), daemon=False)
        process.start()
        return process

    def start(self, slot: Slot) -> None:
        slot.process, slot.started = self.spawn(), time.monotonic()
        if self.stopping:  # the signal came while it started, before `stop` could see it
            slot.process.terminate()

    def stop(self, signum: int, frame: FrameType | None) -> None:
        self.stopping = True
        for slot in self.slots:
            process = slot.process
            if process is not None and process.pid is not None and process.is_alive():
                process.terminate()  # SIGTERM: uvicorn finishes what it is serving, then exits

    def give_up(self, exit_status: int) -> None:
        self.exit_status = exit_status
        self.stop(signal.SIGTERM, None)

    def tend(self) -> None:
        """Note the workers that died since the last look, and start again those whose pause is over."""
        now = time.monotonic()
        for number, slot in enumerate(self.slots, start=1):
            if self.stopping:  # a signal came meanwhile: workers exiting now were told to
                return
            process = slot.process
            if process is None:
                if now >= slot.restart_at:
                    self.start(slot)
            elif not process.is_alive():
                if process.exitcode == PORT_IN_USE_EXIT:  # it said why; no restart would do better
                    self.give_up(PORT_IN_USE_EXIT)
                    return
                self.bury(number, slot, now)
        if all(slot.process is None and slot.crash_looping for slot in self.slots):
            log.error("inflight: all %d workers keep exiting, none is left running; stopping", len(self.slots))
            self.give_up(1)

    def bury(self, number: int, slot: Slot, now: float) -> None:
        """A worker died without being told to: say how, and when its slot starts again."""
        process = slot.process
        assert process is not None
        forget_metrics_of(process, self.metrics_directory)
        slot.process = None
        pause = slot.died(now)
        slot.restart_at = now + pause
        who = f"inflight: worker {number} of {len(self.slots)} (pid {process.pid}) {describe_exit(process.exitcode)}"
        if slot.crash_looping:
            log.error(
                "%s, %d deaths in the last %d s: crash loop, backing off %g s before starting it again "
                "(the other workers keep serving)",
                who,
                len(slot.deaths),
                CRASH_WINDOW_S,
                pause,
            )
        else:
            log.warning("%s; starting another in %g s", who, pause)
