"""`inflight serve --workers N` when workers die: each worker's slot has a restart budget of its own, so one that
keeps dying (the out-of-memory killer, say) leaves the others serving, and the log says why it died."""

from __future__ import annotations

import logging
import os
import re
import signal
import sys
from collections.abc import Iterator
from multiprocessing.process import BaseProcess
from pathlib import Path

import httpx
import pytest

from inflight.config import load_settings
from inflight.http import workers
from inflight.http.workers import CRASH_WINDOW_S, MAX_RESTARTS, PORT_IN_USE_EXIT, Supervisor
from tests.http.test_shared_state import worker_pids
from tests.support.processes import inflight_process
from tests.support.upstream import UpstreamApp
from tests.support.waiting import wait_until

KILLS = MAX_RESTARTS + 1  # before, the parent stopped every worker at this many deaths within CRASH_WINDOW_S


def parent_of(pid: int) -> int | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:  # it exited meanwhile
        return None
    return int(stat.rsplit(")", 1)[1].split()[1])  # the field after the state; the name may hold spaces or ")"


def worker_processes(parent: int) -> set[int]:
    """The live workers `parent` spawned (multiprocessing's `spawn_main`: neither its resource tracker, nor a child
    not yet past exec, nor a dead one not yet reaped, whose command line is empty)."""
    found = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and parent_of(int(entry.name)) == parent:
            try:
                if b"spawn_main" in (entry / "cmdline").read_bytes():
                    found.add(int(entry.name))
            except OSError:
                continue
    return found


def the_one(parent: int, besides: set[int]) -> int:
    """The single worker of `parent` not in `besides`, once there is one (its slot may be waiting to restart)."""
    seen: set[int] = set()

    def appeared() -> bool:
        seen.clear()
        seen.update(worker_processes(parent) - besides)
        return bool(seen)

    wait_until(appeared, timeout=60)
    assert len(seen) == 1, seen
    return seen.pop()


def served(proxy: str) -> tuple[int, set[int]]:
    """Of 20 chat completions, each on a new connection, how many were answered 200; and which workers answered."""
    ok, answered = 0, set[int]()
    for _ in range(20):
        try:
            body = {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}
            reply = httpx.post(f"{proxy}/chat/completions", json=body, timeout=60)  # however busy the machine
            ok += reply.status_code == 200
            answered.add(httpx.get(proxy.removesuffix("/v1") + "/inflight/stats", timeout=60).json()["worker_pid"])
        except httpx.TransportError:
            continue
    return ok, answered


def test_one_worker_killed_again_and_again_leaves_the_other_serving(
    upstream: tuple[UpstreamApp, str], tmp_path: Path
) -> None:
    """Before: the sixth death within a minute, of any worker, made the parent stop them all, the healthy one
    included (0 of 20 requests served), and the log said neither how the worker died nor why it stopped."""
    _, url = upstream
    output = tmp_path / "inflight.log"
    config = f'state: {{url: "sqlite:///{tmp_path}/inflight.db"}}\n'
    with inflight_process(url, config, "--workers", "2", output=output) as (proxy, parent):
        keeper, victim = sorted(worker_pids(proxy, 2))  # both up and answering
        killed = {victim}
        os.kill(victim, signal.SIGKILL)
        for _ in range(KILLS - 1):  # its replacement, each time, as soon as it is spawned
            replacement = the_one(parent, {keeper} | killed)
            os.kill(replacement, signal.SIGKILL)
            killed.add(replacement)
        wait_until(lambda: "backing off" in output.read_text() or not worker_processes(parent), timeout=60)
        ok, answered = served(proxy)
        assert ok == 20, f"{ok} of 20 requests served"
        assert keeper in answered and keeper in worker_processes(parent)  # the healthy worker was never stopped
    lines = output.read_text().splitlines()
    said = [line for line in lines if "backing off" in line]
    assert said, lines
    assert "was killed by SIGKILL (the out-of-memory killer sends this)" in said[-1]
    deaths = re.search(r"(\d+) deaths in the last (\d+) s", said[-1])
    assert deaths is not None and int(deaths[1]) >= MAX_RESTARTS and int(deaths[2]) == CRASH_WINDOW_S, said[-1]
    assert "the other workers keep serving" in said[-1]
    restarted = [line for line in lines if "starting another in 1 s" in line]
    assert len(restarted) == MAX_RESTARTS - 1 and all("SIGKILL" in line for line in restarted)


def test_how_a_worker_died_is_said_in_words() -> None:
    assert workers.describe_exit(-signal.SIGKILL) == "was killed by SIGKILL (the out-of-memory killer sends this)"
    assert workers.describe_exit(-signal.SIGSEGV) == "was killed by SIGSEGV"
    assert workers.describe_exit(3) == "exited with status 3"


def test_a_crash_looping_slot_waits_longer_each_death_and_starts_afresh_once_it_stays_up() -> None:
    slot, now, pauses = workers.Slot(), 0.0, []
    for _ in range(MAX_RESTARTS + 6):
        slot.started = now
        now += 0.5  # it dies half a second after it starts
        pauses.append(slot.died(now))
        now += pauses[-1]
    assert pauses == [1.0] * (MAX_RESTARTS - 1) + [2.0, 4.0, 8.0, 16.0, 32.0, 60.0, 60.0]
    slot.started = now
    assert slot.died(now + CRASH_WINDOW_S) == 1.0 and not slot.crash_looping  # it had stayed up a whole window


class Exiting(Supervisor):
    """A supervisor whose workers exit at once with `status`, in processes of their own (no uvicorn, no port)."""

    def __init__(self, status: int, metrics_directory: Path) -> None:
        super().__init__(load_settings(None), str(metrics_directory))
        self.status = status

    def spawn(self) -> BaseProcess:
        process = self.context.Process(target=sys.exit, args=(self.status,))
        process.start()
        return process


@pytest.fixture
def crash_loop_at_once(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A crash loop at the first death (then each slot waits 2 s: the two are soon dead at once), and the test
    process's own signal handlers back after `Supervisor.run` replaced them."""
    monkeypatch.setattr(workers, "MAX_RESTARTS", 1)
    handlers = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
    yield
    signal.signal(signal.SIGTERM, handlers[0])
    signal.signal(signal.SIGINT, handlers[1])


@pytest.mark.usefixtures("crash_loop_at_once")
def test_the_parent_stops_when_every_worker_keeps_dying(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A broken setup that kills each worker as it starts still ends `serve` with exit status 1, as before."""
    with caplog.at_level(logging.WARNING, logger="inflight"):
        assert Exiting(3, tmp_path).run(2) == 1
    messages = [record.getMessage() for record in caplog.records]
    assert messages[-1] == "inflight: all 2 workers keep exiting, none is left running; stopping"
    looping = {message.split(" (pid")[0] for message in messages if "status 3" in message and "backing off" in message}
    assert looping == {"inflight: worker 1 of 2", "inflight: worker 2 of 2"}  # each slot was crash-looping


@pytest.mark.usefixtures("crash_loop_at_once")
def test_a_worker_that_finds_the_port_taken_stops_the_parent(tmp_path: Path) -> None:
    assert Exiting(PORT_IN_USE_EXIT, tmp_path).run(2) == PORT_IN_USE_EXIT
