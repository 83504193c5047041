"""What a hostile client or upstream costs the proxy: a set of probes, each against a fresh proxy.

Starts an inflight process per probe (in front of the fake upstream's process, or of a raw-socket
upstream on loopback for responses no well-behaved server sends), warms it with one ordinary request,
then runs the probe while another process polls `GET /healthz` every 10 ms and a thread samples
the proxy's RSS (`/proc/PID/status`). Prints one table: what the proxy answered, its RSS before,
its growth (one second after the probe) and its peak, and the `/healthz` p99 over the two seconds
before the probe compared with while it runs. The goal: growth under 64 MB, p99 within 20 ms of
idle. It asserts nothing. The G rows give the growth of work with what was sent (a size series and the
seconds each size took: linear is twice the time for twice the size), N and S what unreadable bodies get.
Issue 41's probes (L to Z) read only an answer: what one tenant could do to another, and the operator's
traps, each with the proxy and the fake upstream in this process. The R rows are issue 53's (hostile round
five): read-backs that do not fit or call too often, streaming clients that never read, the originals' bound
in bytes, a worker killed again and again, and the heaviest round of big requests at once.

    python -m benchmarks.hostile
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gzip
import hashlib
import multiprocessing
import os
import random
import signal
import socket
import stat
import string
import tempfile
import threading
import time
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import orjson

from benchmarks.harness import percentile, table
from inflight.app import create_app
from inflight.config import load_settings
from inflight.http.access import startup_problem
from inflight.http.server import uvicorn_options
from inflight.tokens import TokenCounter
from tests.support.hostile import ECHOED_ROLE_ERROR, ENCODED_DOT_PATHS
from tests.support.processes import fake_upstream, inflight_process
from tests.support.raw import HEADER_OPENING, EndlessField, raw_upstream, read_post
from tests.support.retriever import HANDLE, RetrievingModel
from tests.support.servers import serve
from tests.support.upstream import Scripted, UpstreamApp

MiB = 1024 * 1024
POLL_INTERVAL_S = 0.01
IDLE_S = 2.0
SETTLE_S = 1.0
CHAT = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "Say ok."}]}
WARMUP_MODEL = "warmup-model"
# A small window and summaries made on the turn that needs one: the agent conversation below compacts.
COMPACTING: dict[str, Any] = {
    "models": {"gpt-4o": {"context_window": 4000}, "big-summarizer": {"context_window": 100_000}},
    "compaction": {"summarize": {"background_at": None, "model": "big-summarizer"}},
}


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def poll_healthz(port: int, stop: Any, out: Connection, ready: Any) -> None:
    """In its own process: (start, latency in ms) of a keep-alive `GET /healthz` every POLL_INTERVAL_S; `ready` is
    set once the first is in."""
    request = f"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode()
    samples: list[tuple[float, float]] = []
    sock: socket.socket | None = None
    while not stop.is_set():
        start = time.monotonic()
        try:
            if sock is None:
                sock = socket.create_connection(("127.0.0.1", port), timeout=30)
            sock.sendall(request)
            received = b""
            while b"\r\n\r\n" not in received or not received.endswith(b"}"):
                chunk = sock.recv(65536)
                if not chunk:
                    raise ConnectionError("closed")
                received += chunk
        except OSError:
            if sock is not None:
                sock.close()
            sock = None
        samples.append((start, (time.monotonic() - start) * 1000))
        ready.set()
        time.sleep(POLL_INTERVAL_S)
    out.send(samples)


@dataclass
class Watch:
    """The proxy's RSS, sampled by a thread, and its /healthz latency, polled by another process."""

    pid: int
    port: int
    rss: list[tuple[float, float]] = field(default_factory=list)
    health: list[tuple[float, float]] = field(default_factory=list)


@contextmanager
def watching(pid: int, proxy_url: str) -> Iterator[Watch]:
    watch = Watch(pid, urlsplit(proxy_url).port or 0)
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            with contextlib.suppress(OSError):
                watch.rss.append((time.monotonic(), rss_mb(pid)))
            time.sleep(0.01)

    context = multiprocessing.get_context("spawn")
    stop, ready = context.Event(), context.Event()
    receiving, sending = context.Pipe(duplex=False)
    poller = context.Process(target=poll_healthz, args=(watch.port, stop, sending, ready))
    poller.start()
    ready.wait(60)  # a loaded machine takes seconds to start the poller: the idle samples come after it is up
    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        yield watch
    finally:
        stop.set()
        watch.health = receiving.recv()
        poller.join(10)
        done.set()
        sampler.join(5)


@dataclass
class Row:
    probe: str
    answer: str = ""
    before: float = float("nan")
    after: float = float("nan")
    peak: float = float("nan")
    idle_p99: float = float("nan")
    during_p99: float = float("nan")
    during_max: float = float("nan")

    def cells(self) -> list[object]:
        if self.before != self.before:  # not measured (nan): a probe that only reads a result
            return [self.probe, self.answer, "-", "-", "-", "-", "-", "-"]
        growth = self.after - self.before
        miss = []
        if growth >= 64:
            miss.append("RSS")
        if self.during_p99 - self.idle_p99 > 20:
            miss.append("p99")
        return [
            self.probe,
            self.answer,
            f"{self.before:.0f}",
            f"{growth:+.1f}",
            f"{self.peak:.0f}",
            f"{self.idle_p99:.1f} / {self.during_p99:.1f}",
            f"{self.during_max:.0f}",
            ", ".join(miss) or "met",
        ]


def measure(row: Row, pid: int, proxy_url: str, probe: Callable[[], str]) -> Row:
    """Run `probe` (which returns what the proxy answered) under watch, after IDLE_S of idle polling."""
    with watching(pid, proxy_url) as watch:
        time.sleep(IDLE_S)
        row.before = rss_mb(pid)
        start = time.monotonic()
        row.answer = probe()
        end = time.monotonic()
        time.sleep(SETTLE_S)
        row.after = rss_mb(pid)
    idle = [ms for when, ms in watch.health if when < start]
    during = [ms for when, ms in watch.health if start <= when <= end]
    row.idle_p99, row.during_p99 = percentile(idle, 99), percentile(during, 99)
    row.during_max = max(during, default=float("nan"))
    row.peak = max((mb for when, mb in watch.rss if start <= when <= end + SETTLE_S), default=row.after)
    return row


def warm(proxy_url: str, **headers: str) -> None:
    """One ordinary request first, so that what loads on the first one (the tokenizer) is in `before`."""
    httpx.post(f"{proxy_url}/chat/completions", json={**CHAT, "model": WARMUP_MODEL}, headers=headers, timeout=30)


def config(**sections: Any) -> str:
    return orjson.dumps(sections).decode()  # JSON is YAML


def connect(proxy_url: str, timeout: float = 60) -> socket.socket:
    parts = urlsplit(proxy_url)
    sock = socket.create_connection((parts.hostname, parts.port))
    sock.settimeout(timeout)
    return sock


def status_of(received: bytes) -> str:
    return received.split(b" ", 2)[1].decode() if received.startswith(b"HTTP/1.1 ") else "none"


def agent_conversation(turns: int, tag: str) -> list[dict[str, Any]]:
    """An agent's conversation, `tag` making it its own: with the COMPACTING window it needs a summary."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a coding agent."},
        {"role": "user", "content": f"Fix the failing test in src/app.py ({tag})."},
    ]
    for turn in range(turns):
        call = {"id": f"call_{turn}", "type": "function", "function": {"name": "bash", "arguments": f'{{"n": {turn}}}'}}
        messages.append({"role": "assistant", "content": f"Step {turn} of {tag}.", "tool_calls": [call]})
        output = "\n".join(f"{turn}:{i} output line with some words in it" for i in range(5))
        messages.append({"role": "tool", "tool_call_id": f"call_{turn}", "content": output})
    return messages


def counts(values: list[str]) -> str:
    """As `tally`, for values of several words: "10 answered, 2 refused"."""
    found: dict[str, int] = {}
    for value in values:
        found[value] = found.get(value, 0) + 1
    return ", ".join(f"{n} {value}" for value, n in sorted(found.items()))


def tally(values: list[str]) -> str:
    counts: dict[str, int] = {}
    for value in values:
        counts[value] = counts.get(value, 0) + 1
    return " ".join(f"{value}x{n}" for value, n in sorted(counts.items()))


# --- raw upstreams -------------------------------------------------------------------------------

WARM_BODY = orjson.dumps(
    {
        "id": "c",
        "object": "chat.completion",
        "model": WARMUP_MODEL,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 5, "completion_tokens": 1, "total_tokens": 6},
    }
)


def misbehaving(act: Callable[[asyncio.StreamReader, asyncio.StreamWriter], Any]) -> Any:
    """A raw upstream handler: the warm-up request answered as a server would, the next one with `act`."""

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, number: int) -> None:
        while True:
            request = await read_post(reader, writer)
            if WARMUP_MODEL.encode() not in request:
                await act(reader, writer)
                return
            head = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n"
            writer.write(head % len(WARM_BODY) + WARM_BODY)
            await writer.drain()

    return handler


# --- the probes ----------------------------------------------------------------------------------


def probe_k(upstream_url: str) -> Row:
    """K: three clients with no key, each sending a 64 MB request header that never ends."""
    row = Row("K: 3 clients x 64 MB request header, no key")
    settings = config(access={"keys": ["sk-inbound"]}, upstream={"api_key": "sk-up"})
    with inflight_process(upstream_url, settings) as (proxy_url, pid):
        warm(proxy_url, authorization="Bearer sk-inbound")

        def client(out: list[str]) -> None:
            piece = b"a" * MiB
            with connect(proxy_url) as sock:
                with contextlib.suppress(OSError):  # the proxy closes once past its bound
                    sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nx-big: ")
                    for _ in range(64):
                        sock.sendall(piece)
                received = b""
                with contextlib.suppress(OSError):
                    while chunk := sock.recv(65536):
                        received += chunk
            out.append(status_of(received))

        def run() -> str:
            statuses: list[str] = []
            threads = [threading.Thread(target=client, args=(statuses,)) for _ in range(3)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            return tally(statuses)

        return measure(row, pid, proxy_url, run)


def probe_c() -> Row:
    """C: an upstream whose answer's header is 200 MB."""
    row = Row("C: upstream sends a 200 MB response header")
    flood = EndlessField(HEADER_OPENING, 200 * MiB)

    async def act(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await flood.send(writer)

    with (
        raw_upstream(misbehaving(act)) as url,
        inflight_process(url, config(upstream={"read_timeout_s": 60})) as (
            proxy_url,
            pid,
        ),
    ):
        warm(proxy_url)

        def run() -> str:
            start = time.monotonic()
            response = httpx.post(f"{proxy_url}/chat/completions", json=CHAT, timeout=120)
            took = time.monotonic() - start
            return f"{response.status_code} in {took:.2f} s; upstream wrote {flood.sent / MiB:.0f} MB before the drop"

        return measure(row, pid, proxy_url, run)


def probe_b_line() -> Row:
    """B: an upstream stream whose first SSE line is 300 MB, with no newline, then silence."""
    size = 300 * MiB
    row = Row("B: first SSE line 300 MB, no newline")

    async def act(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n")
        piece = b"x" * MiB
        writer.write(b"%x\r\ndata: \r\n" % len(b"data: "))
        for _ in range(size // MiB):
            writer.write(b"%x\r\n%b\r\n" % (len(piece), piece))
            await writer.drain()
        # The stream stays open (a proxy that holds it gives the client nothing) until the proxy hangs up.
        await reader.read()

    with raw_upstream(misbehaving(act)) as url, inflight_process(url) as (proxy_url, pid):
        warm(proxy_url)

        def run() -> str:
            start = time.monotonic()
            first = 0.0
            received = 0
            body = {**CHAT, "stream": True}
            with httpx.stream("POST", f"{proxy_url}/chat/completions", json=body, timeout=60) as response:
                for chunk in response.iter_raw():
                    first = first or time.monotonic() - start
                    received += len(chunk)
                    if received >= size + len(b"data: ") or time.monotonic() - start > 90:
                        break
            took = time.monotonic() - start
            return (
                f"{response.status_code}; first byte {first * 1000:.0f} ms, "
                f"{received / MiB:.0f} MB relayed in {took:.1f} s"
            )

        return measure(row, pid, proxy_url, run)


def gzip_bomb(megabytes: int) -> bytes:
    """SSE-looking zeros that inflate to `megabytes` MiB, compressed a MiB at a time."""
    compressor = zlib.compressobj(9, zlib.DEFLATED, 31)
    zeros = b"\0" * MiB
    parts = [compressor.compress(b"data: ")]
    parts += [compressor.compress(zeros) for _ in range(megabytes)]
    return b"".join([*parts, compressor.flush()])


def probe_b_gzip() -> Row:
    """B: a gzip SSE answer of under 1 MB that inflates to 800 MB."""
    bomb = gzip_bomb(800)
    row = Row(f"B: gzip SSE, {len(bomb) / 1024:.0f} KB inflating to 800 MB")

    async def act(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-encoding: gzip\r\n"
            b"content-length: %d\r\n\r\n%b" % (len(bomb), bomb)
        )
        await writer.drain()

    with raw_upstream(misbehaving(act)) as url, inflight_process(url) as (proxy_url, pid):
        warm(proxy_url)

        def run() -> str:
            received = b""
            body = {**CHAT, "stream": True}
            with httpx.stream("POST", f"{proxy_url}/chat/completions", json=body, timeout=60) as response:
                for chunk in response.iter_raw():  # the bytes as sent, still gzip
                    received += chunk
            intact = "intact" if received == bomb else f"{len(received)} of {len(bomb)} bytes"
            return f"{response.status_code}; relayed {intact}"

        return measure(row, pid, proxy_url, run)


async def send_all(proxy_url: str, bodies: list[bytes], connections: int) -> list[str]:
    """POST each body on one of `connections` keep-alive connections; their statuses."""
    parts = urlsplit(proxy_url)
    queue = list(reversed(bodies))
    statuses: list[str] = []

    async def worker() -> None:
        reader, writer = await asyncio.open_connection(parts.hostname, parts.port)
        while queue:
            body = queue.pop()
            head = f"POST /v1/chat/completions HTTP/1.1\r\nHost: {parts.netloc}\r\nContent-Length: {len(body)}\r\n\r\n"
            writer.write(head.encode() + body)
            answer = await reader.readuntil(b"\r\n\r\n")
            length = int(answer.lower().split(b"content-length:")[1].split(b"\r\n")[0])
            await reader.readexactly(length)
            statuses.append(status_of(answer))
        writer.close()

    await asyncio.gather(*(worker() for _ in range(connections)))
    return statuses


def probe_a(upstream_url: str) -> Row:
    """A: 5,000 random model names of 1,000 characters; `/inflight/stats` before and after."""
    row = Row("A: 5,000 random 1,000-char model names")
    rng = random.Random(26)
    names = ["".join(rng.choices(string.ascii_lowercase, k=1000)) for _ in range(5000)]
    bodies = [orjson.dumps({**CHAT, "model": name}) for name in names]
    with inflight_process(upstream_url) as (proxy_url, pid):
        warm(proxy_url)
        stats_url = proxy_url.removesuffix("/v1") + "/inflight/stats"
        stats_before = len(httpx.get(stats_url).content)

        def run() -> str:
            statuses = asyncio.run(send_all(proxy_url, bodies, connections=4))
            stats_after = len(httpx.get(stats_url).content)
            return f"{tally(statuses)}; /inflight/stats {stats_before:,} B -> {stats_after:,} B"

        return measure(row, pid, proxy_url, run)


def post_each(
    proxy_url: str, requests: list[tuple[list[dict[str, Any]], dict[str, str]]]
) -> tuple[list[str], list[str]]:
    """The statuses and the last `x-inflight-actions` step of each chat request, sent one after another."""
    statuses: list[str] = []
    actions: list[str] = []
    with httpx.Client(base_url=proxy_url, timeout=60) as client:
        for messages, headers in requests:
            response = client.post("/chat/completions", json={"model": "gpt-4o", "messages": messages}, headers=headers)
            statuses.append(str(response.status_code))
            steps = response.headers.get("x-inflight-actions", "none").split(",")
            actions.append("summary-budget" if "summary-budget" in steps else steps[-1])
    return statuses, actions


def probe_d(upstream_url: str, session_bytes: int = MiB) -> Row:
    """D: 150 compacting requests, each with its own 1 MB `x-inflight-session`; records bounded at 1 MiB.
    With short session ids: the same compactions' own cost, to tell it from the hostile part."""
    row = Row(f"D: 150 compactions, {session_bytes:,} B session ids")
    settings = config(
        models=COMPACTING["models"],
        compaction={**COMPACTING["compaction"], "cache": {"max_bytes": MiB}},
        limits={"max_header_bytes": 4 * MiB},  # past the default 64 KiB a 1 MB header gets 431 before anything
    )
    with inflight_process(upstream_url, settings) as (proxy_url, pid):
        warm(proxy_url)

        def run() -> str:
            sessions = [f"{n}-" + "s" * session_bytes for n in range(150)]
            requests = [(agent_conversation(120, f"d{n}"), {"x-inflight-session": sessions[n]}) for n in range(150)]
            statuses, actions = post_each(proxy_url, requests)
            return f"{tally(statuses)}; last step {tally(actions)}"

        return measure(row, pid, proxy_url, run)


def wal_size(path: Path) -> int:
    wal = path.with_name(path.name + "-wal")
    return wal.stat().st_size if wal.exists() else 0


def probe_e(upstream_url: str, folder: Path) -> tuple[Row, Row]:
    """E: the archive on SQLite, bounded at 1 MiB, and 30 compacting requests with 2 MB session labels.
    J: the modes of the files it made."""
    row = Row("E: archive max_bytes 1 MiB, 30 x 2 MB labels")
    path = folder / "state" / "inflight.db"
    settings = config(
        models=COMPACTING["models"],
        compaction=COMPACTING["compaction"],
        state={"url": f"sqlite:///{path}"},
        archive={"enabled": True, "max_bytes": MiB},
        limits={"max_header_bytes": 4 * MiB},
    )
    with inflight_process(upstream_url, settings) as (proxy_url, pid):
        warm(proxy_url)

        def run() -> str:
            requests = [
                (agent_conversation(120, f"e{n}"), {"x-inflight-session": f"{n}-" + "l" * (2 * MiB)}) for n in range(30)
            ]
            statuses, _ = post_each(proxy_url, requests)
            time.sleep(1)  # the archive writes a moment after the reply
            listing = httpx.get(proxy_url.removesuffix("/v1") + "/inflight/conversations", timeout=60)
            return (
                f"{tally(statuses)}; db {path.stat().st_size / MiB:.1f} MB + wal {wal_size(path) / MiB:.1f} MB; "
                f"/inflight/conversations {listing.status_code}, {len(listing.content) / 1024:.0f} KB"
            )

        measure(row, pid, proxy_url, run)
        modes = {p.name: oct(stat.S_IMODE(p.stat().st_mode)) for p in [path.parent, *path.parent.glob(path.name + "*")]}
    j = Row(f"J: SQLite file modes (umask {oct(current_umask())})")
    j.answer = ", ".join(f"{name} {mode}" for name, mode in modes.items())
    return row, j


def current_umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def probe_f(upstream_url: str) -> Row:
    """F: 40 forced compactions from one key (the default budget is 30 calls a minute); summarizer calls."""
    row = Row("F: 40 forced compactions, one key")
    stats_url = upstream_url.removesuffix("/v1") + "/_upstream/stats"
    with inflight_process(upstream_url, config(**COMPACTING)) as (proxy_url, pid):
        warm(proxy_url)

        def run() -> str:
            made = httpx.get(stats_url).json()["summaries"]
            headers = {"authorization": "Bearer sk-a", "x-inflight-compaction": "force"}
            requests = [(agent_conversation(120, f"f{n}"), headers) for n in range(40)]
            statuses, actions = post_each(proxy_url, requests)
            calls = httpx.get(stats_url).json()["summaries"] - made
            return f"{tally(statuses)}; {calls} summarizer calls; last step {tally(actions)}"

        return measure(row, pid, proxy_url, run)


def probe_i(upstream_url: str) -> Row:
    """I: DNS rebinding: a text/plain POST naming another host, while the proxy holds the upstream key."""
    row = Row("I: 300 POSTs with a rebinding Host, held key")
    with inflight_process(upstream_url, config(upstream={"api_key": "sk-operator"})) as (proxy_url, pid):
        warm(proxy_url)
        port = urlsplit(proxy_url).port

        def run() -> str:
            body = orjson.dumps(CHAT)
            request = (
                f"POST /v1/chat/completions HTTP/1.1\r\nHost: rebind.example:{port}\r\n"
                f"Origin: http://rebind.example:{port}\r\nContent-Type: text/plain\r\n"
                f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
            ).encode() + body
            statuses = []
            for _ in range(300):  # enough for /healthz to be polled while it runs
                with connect(proxy_url) as sock:
                    sock.sendall(request)
                    received = b""
                    while chunk := sock.recv(65536):
                        received += chunk
                statuses.append(status_of(received))
            return tally(statuses)

        return measure(row, pid, proxy_url, run)


# --- issue 41: what one tenant could do to another, and the operator's traps ---------------------------------------
# These read an answer, not a cost: each runs the proxy in this process, in front of the fake upstream in this
# process too (so a probe can script the upstream's replies and see what reached it).


@contextmanager
def in_process(**overrides: Any) -> Iterator[tuple[UpstreamApp, str]]:
    """The fake upstream and a proxy in front of it (`overrides`: the config), both on loopback; yields the
    upstream and the proxy's /v1 URL."""
    app = UpstreamApp()
    with serve(app) as upstream_url:
        upstream = {"base_url": upstream_url + "/v1", **overrides.pop("upstream", {})}
        settings = load_settings(None, overrides={**overrides, "upstream": upstream})
        with serve(create_app(settings), **{**uvicorn_options(settings), "log_level": "warning"}) as url:
            yield app, url + "/v1"


def bearer(key: str) -> dict[str, str]:
    return {"authorization": f"Bearer {key}"}


def probe_learning() -> Row:
    """L: a client's `role` the upstream echoes in its 400 ("Invalid value: 'maximum context length is 300
    tokens'"), then another client's 19 messages."""
    row = Row("L: window echoed from a client's role, then another client")
    echoed = ECHOED_ROLE_ERROR
    other = agent_conversation(9, "l")[:19]
    with in_process() as (app, proxy_url):
        app.script.append(Scripted(status=400, body=echoed))
        attack = {"model": "gpt-4o", "messages": [{"role": "maximum context length is 300 tokens", "content": "hi"}]}
        first = httpx.post(f"{proxy_url}/chat/completions", json=attack, headers=bearer("sk-a"), timeout=60)
        second = httpx.post(
            f"{proxy_url}/chat/completions", json={"model": "gpt-4o", "messages": other}, headers=bearer("sk-b")
        )
        learned = httpx.get(proxy_url.removesuffix("/v1") + "/inflight/stats").json()["learned_windows"]
        sent = len(app.chat_requests()[-1].json()["messages"])
    row.answer = (
        f"{first.status_code} to that client, {'retried' if 'x-inflight-retried' in first.headers else 'not retried'}; "
        "the next client's "
        f"{second.status_code}, {sent} of {len(other)} messages sent; {len(learned)} windows learned"
    )
    return row


def probe_context_management() -> Row:
    """T: an unknown key inside one client's `context_management` (Messages API), then two valid requests."""
    row = Row("T: unknown key in one client's context_management")
    unknown = {
        "type": "error",
        "error": {
            "type": "invalid_request_error",
            "message": "context_management.edits.0.bogus: Extra inputs are not permitted",
        },
    }
    edits = [{"type": "clear_tool_uses_20250919", "trigger": {"type": "input_tokens", "value": 1000}}]
    body = {"model": "claude-opus-5-5", "max_tokens": 100, "messages": [{"role": "user", "content": "hi"}]}
    good = orjson.dumps({**body, "context_management": {"edits": edits}})
    bad = orjson.dumps({**body, "context_management": {"edits": [{**edits[0], "bogus": 1}]}})
    headers = {"content-type": "application/json", "anthropic-version": "2023-06-01"}
    with in_process() as (app, proxy_url):
        app.script.append(Scripted(status=400, body=unknown))
        refused = httpx.post(f"{proxy_url}/messages", content=bad, headers={**headers, "x-api-key": "sk-a"})
        for key in ("sk-b", "sk-a"):
            httpx.post(f"{proxy_url}/messages", content=good, headers={**headers, "x-api-key": key})
        intact = sum(request.body == good for request in app.messages_requests())
    row.answer = f"{refused.status_code} to that client; valid context_management forwarded as sent: {intact} of 2"
    return row


def probe_summarizer_key() -> Row:
    """U: only `compaction.summarize.api_key` held, no `access.keys`: ten compactions with ten made-up keys, at a
    budget of 2 calls a minute; and the startup check on 0.0.0.0."""
    row = Row("U: summarizer key held, 10 made-up client keys, budget 2/min")
    summarize = {**COMPACTING["compaction"]["summarize"], "api_key": "sk-operator"}
    limits = {"summarizer": {"calls_per_minute": 2, "global_calls_per_minute": 0}}
    with in_process(models=COMPACTING["models"], compaction={"summarize": summarize}, limits=limits) as (app, url):
        requests = [(agent_conversation(120, f"u{n}"), bearer(f"sk-made-up-{n}")) for n in range(10)]
        statuses, _ = post_each(url, requests)
        calls = len(app.summaries)
    public = load_settings(None, overrides={"listen": {"host": "0.0.0.0"}, "compaction": {"summarize": summarize}})
    problem = startup_problem(public) or ""
    refused = "refused, naming compaction.summarize.api_key" if "summarize.api_key" in problem else "started"
    row.answer = f"{tally(statuses)}; {calls} summarizer calls; on 0.0.0.0 without access.keys: {refused}"
    return row


def probe_credentials() -> Row:
    """V: `summarize.base_url` set, no key for it: a Claude client's and an OpenAI client's compacting requests."""
    row = Row("V: client keys sent to a summarizer elsewhere")
    summarizer = UpstreamApp()
    with serve(summarizer) as summarizer_url:
        models = {**COMPACTING["models"], "claude-opus-5-5": {"context_window": 4000}}
        summarize = {**COMPACTING["compaction"]["summarize"], "base_url": summarizer_url + "/v1"}
        with in_process(models=models, compaction={"summarize": summarize}) as (_, url):
            post_each(url, [(agent_conversation(120, "v"), bearer("sk-openai-client"))])
            messages = [{"role": "user", "content": "Fix it."}]
            for turn in range(60):
                messages += [
                    {"role": "assistant", "content": f"Step {turn}: reading the log of module {turn}."},
                    {"role": "user", "content": "\n".join(f"{turn}:{i} log line with some words" for i in range(6))},
                ]
            body = {"model": "claude-opus-5-5", "max_tokens": 256, "messages": messages}
            headers = {"x-api-key": "sk-ant-client", "anthropic-version": "2023-06-01"}
            httpx.post(f"{url}/messages", json=body, headers=headers, timeout=60)
    seen = sum(
        any(b"client" in value for name, value in request.raw_headers if name in (b"authorization", b"x-api-key"))
        for request in summarizer.requests
    )
    row.answer = f"{len(summarizer.summaries)} summaries asked there; {seen} carried a client's key"
    return row


def probe_admin_keys() -> Row:
    """W: `access.keys` and no `access.admin_keys`: a client's key at the archive, the stats and the metrics."""
    row = Row("W: a client key at /inflight/* and /metrics, no admin_keys")
    config = {"access": {"keys": ["sk-tenant"]}, "upstream": {"api_key": "sk-up"}, "archive": {"enabled": True}}
    with in_process(**config) as (_, url):
        base = url.removesuffix("/v1")
        paths = ("/inflight/conversations", "/inflight/stats", "/metrics")
        statuses = [str(httpx.get(f"{base}{path}", headers=bearer("sk-tenant")).status_code) for path in paths]
    row.answer = tally(statuses)
    return row


def sized(fraction: float, tag: str) -> list[dict[str, Any]]:
    """The shortest agent conversation over `fraction` of the 6,000-token budget of `BACKGROUND`'s window."""
    counter = TokenCounter()
    turns = 1
    while counter.count_request(
        {"model": "gpt-4o", "messages": agent_conversation(turns, tag)}, "o200k_base"
    ).total <= (fraction * 6000):
        turns += 1
    return agent_conversation(turns, tag)


def probe_job_slots() -> Row:
    """X: two background slots; one client starts four summaries that hang, then another client's conversation
    passes `background_at` and, later, `summarize_at`."""
    row = Row("X: one client's 4 hanging jobs, 2 slots, another client")
    released = threading.Event()
    config = {"models": {"gpt-4o": {"context_window": 8000}}, "compaction": {"summarize": {"max_concurrent_jobs": 2}}}
    try:
        with in_process(**config) as (app, url):
            app.summarizer_holds = {"(a": released}
            stats = url.removesuffix("/v1") + "/inflight/stats"
            post_each(url, [(sized(0.62, f"a{n}"), bearer("sk-a")) for n in range(4)])
            jobs = httpx.get(stats).json()["summary_jobs"]
            post_each(url, [(sized(0.62, "b"), bearer("sk-b"))])
            deadline = time.monotonic() + 30
            while httpx.get(stats).json()["summary_jobs"]["landed"] < 1 and time.monotonic() < deadline:
                time.sleep(0.05)
            _, actions = post_each(url, [(sized(0.9, "b"), bearer("sk-b"))])
            released.set()
    finally:
        released.set()
    row.answer = (
        f"that client: {jobs['running']} running, {jobs['queued']} queued, {jobs['refused']} refused; "
        f"the other's crossing turn: {actions[0]}"
    )
    return row


def probe_dot_segments() -> Row:
    """Y: paths whose dot segments show only once `%2F`, `\\` or `;` is decoded or taken for a separator."""
    row = Row("Y: encoded dot segments (8 paths)")
    paths = ENCODED_DOT_PATHS
    with in_process(upstream={"api_key": "sk-operator"}) as (app, url):
        statuses = []
        for path in paths:
            with connect(url) as sock:
                sock.sendall(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n".encode())
                received = b""
                while chunk := sock.recv(65536):
                    received += chunk
            statuses.append(status_of(received))
        forwarded = len(app.requests)
    row.answer = f"{tally(statuses)}; {forwarded} reached the upstream"
    return row


def probe_day_one() -> Row:
    """Z: README's `inflight serve --config config/inflight.yaml`: where Claude Code's `/v1/messages` goes, and
    what it is told with `access.keys` and no `upstreams.messages`."""
    row = Row("Z: Messages API under the example config")
    example = load_settings(Path(__file__).resolve().parents[1] / "config" / "inflight.yaml")
    keyed = load_settings(None, overrides={"access": {"keys": ["k"]}, "upstream": {"api_key": "sk"}})
    with serve(create_app(keyed)) as url:
        body = {"model": "claude", "max_tokens": 1, "messages": [{"role": "user", "content": "hi"}]}
        answer = httpx.post(f"{url}/v1/messages", json=body, headers={"x-api-key": "k"}, timeout=30)
    row.answer = (
        f"messages -> {example.upstream_for('messages').base_url}; with access.keys: {answer.status_code} "
        f"{answer.json()['error']['message'][-70:]!r}"
    )
    return row


def timed_series(send: Callable[[int], str], sizes: tuple[int, ...], unit: str) -> str:
    """`send(size)` at each size: the sizes, what was answered, and the seconds each took (its growth)."""
    answers, seconds = [], []
    for size in sizes:
        start = time.monotonic()
        answers.append(send(size))
        seconds.append(time.monotonic() - start)
    shown = "/".join(f"{size // 1000}k" for size in sizes)
    took = "/".join(f"{s:.2f}" for s in seconds)
    return f"{shown} {unit}: {took} s ({tally(answers)})"


def probe_g_last_resort(upstream_url: str) -> Row:
    """G: user-only conversations (all head: only the last resort shrinks them); each cut rebuilt the view."""
    row = Row("G: last resort, 1k/2k/4k user-only messages")
    settings = config(models={"gpt-4o": {"context_window": 8000}})
    with inflight_process(upstream_url, settings) as (proxy_url, pid):
        warm(proxy_url)

        def send(size: int) -> str:
            messages = [{"role": "user", "content": f"message {i}: " + "word " * 120} for i in range(size)]
            body = {"model": "gpt-4o", "messages": messages}
            return str(httpx.post(f"{proxy_url}/chat/completions", json=body, timeout=300).status_code)

        return measure(row, pid, proxy_url, lambda: timed_series(send, (1_000, 2_000, 4_000), "messages"))


def wide_turn(results: int, *, marked: bool = False) -> dict[str, Any]:
    """One Anthropic turn of `results` tool uses, answered in one user message (each with a breakpoint)."""
    uses = [{"type": "tool_use", "id": f"t{i}", "name": "Bash", "input": {}} for i in range(results)]
    mark = {"cache_control": {"type": "ephemeral"}} if marked else {}
    answers = [{"type": "tool_result", "tool_use_id": f"t{i}", "content": "ok", **mark} for i in range(results)]
    messages = [{"role": "user", "content": "Go."}, {"role": "assistant", "content": uses}]
    return {"model": "claude-x", "max_tokens": 64, "messages": [*messages, {"role": "user", "content": answers}]}


def probe_g_read(upstream_url: str) -> Row:
    """G: one turn of 10k/20k/40k `tool_result` blocks, with compaction off: a list's membership test per block."""
    row = Row("G: read /v1/messages, 10k/20k/40k tool results, off")
    with inflight_process(upstream_url) as (proxy_url, pid):
        warm(proxy_url)

        def send(size: int) -> str:
            # The fake upstream answers at once, unread (its own Messages API is slow on such a turn): the time is
            # the proxy's.
            headers = {"x-inflight-compaction": "off", "x-scenario": "status-200"}
            response = httpx.post(f"{proxy_url}/messages", json=wide_turn(size), headers=headers, timeout=300)
            return str(response.status_code)

        return measure(row, pid, proxy_url, lambda: timed_series(send, (10_000, 20_000, 40_000), "blocks"))


def probe_g_breakpoints() -> Row:
    """G: a turn of 8k/16k/32k breakpoints written back after a compaction (in this process: the format's write)."""
    from inflight.formats import MESSAGES

    def write(size: int) -> str:
        payload = wide_turn(size, marked=True)
        request = MESSAGES.read(payload)
        assert request is not None
        kept = [request.messages[0], *request.messages[2:]]
        return "written" if MESSAGES.write(payload, request, kept) else "empty"

    return Row("G: place breakpoints, 8k/16k/32k marks", timed_series(write, (8_000, 16_000, 32_000), "marks"))


def probe_g_edits(upstream_url: str) -> Row:
    """G: 8,000 no-op context edits (a trigger never reached: each still lists the tool uses) in a 1 MB body of
    5,000 tool uses, done by inflight (`messages.context_management: inflight`)."""
    row = Row("G: 8,000 no-op context edits, 1 MB body")
    settings = config(messages={"context_management": "inflight"})
    with inflight_process(upstream_url, settings) as (proxy_url, pid):
        warm(proxy_url)
        body = wide_turn(5_000)
        body["messages"][0]["content"] = "word " * 160_000
        never = {"type": "clear_tool_uses_20250919", "trigger": {"type": "input_tokens", "value": 10**9}}
        body["context_management"] = {"edits": [never] * 8_000}

        def run() -> str:
            start = time.monotonic()
            status = httpx.post(f"{proxy_url}/messages", json=body, timeout=300).status_code
            return f"{status} in {time.monotonic() - start:.2f} s"

        return measure(row, pid, proxy_url, run)


def probe_g_summary() -> Row:
    """G: a summarizer that answers 10 MB: the loop's longest turn, in CPU ms (in this process, as the tests do)."""
    from tests.http.test_event_loop import SMALL_WINDOW, big_agent_conversation, monitored_proxy
    from tests.support.servers import serve
    from tests.support.upstream import UpstreamApp

    app = UpstreamApp()
    app.summarizer_reply = ("## Task\n" + "the cause is in the parser; " * 360_000, "stop")
    body = big_agent_conversation(12)
    with (
        serve(app) as upstream_url,
        monitored_proxy(upstream_url + "/v1", **SMALL_WINDOW) as (proxy_url, monitor),
        monitor.recording(),
    ):
        response = httpx.post(f"{proxy_url}/chat/completions", content=body, timeout=300)
    actions = response.headers.get("x-inflight-actions", "")
    answer = f"{response.status_code} {actions}; longest loop turn {monitor.longest_cpu * 1000:.1f} ms CPU"
    return Row("G: 10 MB summarizer reply", answer)


def probe_n(upstream_url: str) -> Row:
    """N: JSON nested 300 deep to each conversation route, in each mode: never a 5xx of inflight's own."""
    row = Row("N: JSON nested 300 deep, 3 routes x 4 modes")
    deep = b"[" * 300 + b"]" * 300
    bodies = {
        "/chat/completions": b'{"model":"gpt-4o","messages":[{"role":"user","content":%s}]}' % deep,
        "/responses": b'{"model":"gpt-4o","input":[{"role":"user","content":%s}]}' % deep,
        "/messages": b'{"model":"claude-x","max_tokens":64,"messages":[{"role":"user","content":%s}]}' % deep,
    }
    answers = []
    modes: list[tuple[dict[str, Any], dict[str, str]]] = [
        ({}, {}),
        ({"compaction": {"mode": "shadow"}}, {}),
        ({}, {"x-inflight-compaction": "off"}),
        ({"compaction": {"enabled": False}}, {}),
    ]
    for settings, headers in modes:
        with inflight_process(upstream_url, config(**settings)) as (proxy_url, _):
            for path, body in bodies.items():
                sent = {"content-type": "application/json", **headers}
                response = httpx.post(proxy_url + path, content=body, headers=sent, timeout=30)
                ours = "inflight internal error" in response.text
                answers.append(f"{response.status_code}{' (ours)' if ours else ' (upstream)'}")
    row.answer = tally(answers)
    return row


def probe_s(upstream_url: str) -> Row:
    """S: bodies inflight cannot read, in shadow mode: zstd, br, gzip twice, not JSON, empty, an array."""
    row = Row("S: 6 unreadable bodies, shadow mode")
    plain = orjson.dumps(CHAT)
    gzipped = zlib.compressobj(wbits=31)
    twice = gzipped.compress(plain) + gzipped.flush()
    again = zlib.compressobj(wbits=31)
    twice = again.compress(twice) + again.flush()
    cases = [(b"(\xb5/\xfd", "zstd"), (b"\x0b\x02\x80", "br"), (twice, "gzip, gzip"), (b"hello", ""), (b"", "")]
    cases.append((b"[1]", ""))
    with inflight_process(upstream_url, config(compaction={"mode": "shadow"})) as (proxy_url, _):
        answers = []
        for body, encoding in cases:
            headers = {"content-type": "application/json"} | ({"content-encoding": encoding} if encoding else {})
            response = httpx.post(f"{proxy_url}/chat/completions", content=body, headers=headers, timeout=30)
            forwarded = "could not parse" in response.text  # the fake upstream's own answer to what it cannot read
            answers.append(f"{response.status_code} {'from the upstream' if forwarded else 'refused by inflight'}")
    row.answer = tally(answers)
    return row


# --- issue 53, hostile round five (R): read-backs, clients that never read, originals in bytes, workers, the heaviest
# round. The proxy runs as its own process (its event loop its own); a fake upstream that must be scripted or read
# (`Recorded.flooded`) is served in this process.

READ_BACK_MODEL = "gpt-4o"
BASH_TOOL: dict[str, Any] = {"type": "function", "function": {"name": "bash", "parameters": {"type": "object"}}}
READ_BACK_WINDOW = 6000
FLOOD_BYTES = 32 * MiB  # each flood: past the 4 MiB the kernel buffers for a client that reads nothing, and more
UNAVAILABLE_START = "[inflight_retrieve: unavailable"


def read_back_conversation(tag: str, *, first_lines: int = 600) -> list[dict[str, Any]]:
    """An agent's 12 tool calls (60-line outputs), `tag` making it its own; its first output `first_lines` lines of
    distinct hex (about 25,000 tokens at 600), more than a 6,000-token window has room for."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a coding agent."},
        {"role": "user", "content": f"Fix the failing test in src/app.py ({tag})."},
    ]
    for turn in range(12):
        call = {"id": f"call_{turn}", "type": "function", "function": {"name": "bash", "arguments": f'{{"n": {turn}}}'}}
        messages.append({"role": "assistant", "content": f"Step {turn}.", "tool_calls": [call]})
        if turn == 0 and first_lines:
            lines = (
                f"line {n}: " + hashlib.sha256(f"{tag}:{n}".encode()).hexdigest()[:16] * 3 for n in range(first_lines)
            )
        else:
            lines = (f"{tag} {turn}:{i} output line with some words in it" for i in range(60))
        messages.append({"role": "tool", "tool_call_id": f"call_{turn}", "content": "\n".join(lines)})
    return messages


def read_back_outcome(reply: httpx.Response) -> str:
    """What the client got of a turn whose model read back: the model's answer to what it read, to a call answered
    unread, or only the words it said before its call (the continuation failed)."""
    if reply.status_code != 200:
        return str(reply.status_code)
    content = reply.json()["choices"][0]["message"].get("content") or ""
    if "seen:" not in content:
        return "empty" if not content else "only the words before the call"
    return "answered unread" if f"seen:{UNAVAILABLE_START}" in content else "answered what it read"


def probe_r1(upstream_window: int) -> Row:
    """R1: ten turns whose model reads back a 25,000-token output at a 6,000-token window (`reserve_tokens: 0`),
    the upstream refusing a prompt over `upstream_window` (counting more than inflight does)."""
    row = Row(f"R1: read-back, window 6,000, upstream refuses over {upstream_window:,}")
    app = UpstreamApp(windows={READ_BACK_MODEL: upstream_window})
    app.retriever = RetrievingModel()
    settings = config(
        models={READ_BACK_MODEL: {"context_window": READ_BACK_WINDOW}},
        discover_context_window=False,
        compaction={"reserve_tokens": 0},
    )
    with serve(app) as url, inflight_process(url + "/v1", settings) as (proxy_url, pid):
        warm(proxy_url)

        def run() -> str:
            outcomes = []
            for n in range(10):
                body = {"model": READ_BACK_MODEL, "messages": read_back_conversation(f"r1-{n}"), "tools": [BASH_TOOL]}
                outcomes.append(read_back_outcome(httpx.post(f"{proxy_url}/chat/completions", json=body, timeout=60)))
            refused = sum(request.status == 400 for request in app.chat_requests())
            return f"{counts(outcomes)}; the upstream refused {refused}"

        return measure(row, pid, proxy_url, run)


def probe_r2(*, read_back: bool, clients: int = 150) -> Row:
    """R2: `clients` raw sockets (a 4 KB receive buffer, nothing read) each ask for a stream the upstream floods
    (FLOOD_BYTES of 16 KB events as fast as they are taken); with `read_back`, the first answer calls
    `inflight_retrieve` and the continuation is what floods. `limits.client_send_timeout_s: 1`."""
    what = "a read-back's continuation floods" if read_back else "x-scenario: flood"
    row = Row(f"R2: {clients} streaming clients that never read, {what}, {FLOOD_BYTES // MiB} MiB each")
    app = UpstreamApp()
    if read_back:
        app.retriever, app.flood_read_backs = RetrievingModel(), True
    settings = config(
        models={READ_BACK_MODEL: {"context_window": 8000}},
        discover_context_window=False,
        limits={"client_send_timeout_s": 1},
    )
    if read_back:
        messages = read_back_conversation("r2", first_lines=0)
        body = orjson.dumps({"model": READ_BACK_MODEL, "stream": True, "messages": messages, "tools": [BASH_TOOL]})
        scenario = ""
    else:
        body = orjson.dumps({**CHAT, "stream": True})
        scenario = "x-scenario: flood\r\n"
    with serve(app) as url, inflight_process(url + "/v1", settings) as (proxy_url, pid):
        warm(proxy_url)
        parts = urlsplit(proxy_url)
        head = (
            f"POST /v1/chat/completions HTTP/1.1\r\nhost: proxy\r\ncontent-type: application/json\r\n{scenario}"
            f"x-flood-bytes: {FLOOD_BYTES}\r\ncontent-length: {len(body)}\r\n\r\n"
        ).encode()

        def run() -> str:
            start = time.monotonic()
            seen = len(app.requests)
            sockets = []
            try:
                for _ in range(clients):
                    sock = socket.socket()
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # before connecting: no autotuning
                    sock.connect((parts.hostname, parts.port))
                    sock.sendall(head + body)
                    sockets.append(sock)

                def floods() -> list[Any]:
                    return [request for request in app.requests[seen:] if request.flooded]

                deadline, counted, changed = time.monotonic() + 300, 0, time.monotonic()
                while time.monotonic() < deadline:
                    found = floods()
                    if len(found) != counted:
                        counted, changed = len(found), time.monotonic()
                    ended = all(r.disconnected.is_set() or r.flooded >= FLOOD_BYTES for r in found)
                    if ended and (counted >= clients or time.monotonic() - changed > 5):  # all, or no more coming
                        break
                    time.sleep(0.1)
                found = floods()
                cut = sum(r.disconnected.is_set() and r.flooded < FLOOD_BYTES for r in found)
                sent = sum(r.flooded for r in found)
            finally:
                for sock in sockets:
                    sock.close()
            return (
                f"{cut} of {len(found)} floods closed before their end; the upstream sent {sent / MiB:,.0f} MiB "
                f"in {time.monotonic() - start:.1f} s"
            )

        return measure(row, pid, proxy_url, run)


def many_calls(calls: int, handle: str) -> dict[str, Any]:
    """A Chat Completions answer that calls `inflight_retrieve` `calls` times at once, each for `handle`."""
    arguments = orjson.dumps({"handle": handle}).decode()
    function = {"name": "inflight_retrieve", "arguments": arguments}
    message: dict[str, Any] = {"role": "assistant", "content": "Reading many.", "refusal": None}
    message["tool_calls"] = [{"id": f"call_r{n}", "type": "function", "function": function} for n in range(calls)]
    return {
        "id": "chatcmpl-r",
        "object": "chat.completion",
        "created": 1,
        "model": READ_BACK_MODEL,
        "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls"}],
        "usage": {"prompt_tokens": 100, "completion_tokens": 10, "total_tokens": 110},
    }


def done_answer() -> dict[str, Any]:
    """The model's answer once its calls are answered: no more calls."""
    choice = {"index": 0, "message": {"role": "assistant", "content": "Done."}, "finish_reason": "stop"}
    return {**many_calls(0, ""), "choices": [choice]}


def probe_r3(sizes: tuple[int, ...] = (500, 2_000, 4_000)) -> list[Row]:
    """R3: a model answering with N `inflight_retrieve` calls at once, each for the one handle the compacted turn
    names (its summary's: the whole transcript), at a 1,000,000-token window (room for many); one row per N."""
    rows = []
    app = UpstreamApp()
    settings = config(models={READ_BACK_MODEL: {"context_window": 1_000_000}}, discover_context_window=False)
    body = {"model": READ_BACK_MODEL, "messages": read_back_conversation("r3", first_lines=0), "tools": [BASH_TOOL]}
    forced = {"x-inflight-compaction": "force"}  # compacted (and so offering the tool) though far under the window
    with serve(app) as url, inflight_process(url + "/v1", settings) as (proxy_url, pid):
        warm(proxy_url)
        app.script.append(Scripted(body=done_answer()))
        httpx.post(f"{proxy_url}/chat/completions", json=body, headers=forced, timeout=60)
        handle = HANDLE.findall(app.chat_requests()[-1].body.decode())[0]
        for size in sizes:
            app.script.clear()
            app.script.extend([Scripted(body=many_calls(size, handle)), Scripted(body=done_answer())])

            def run() -> str:
                reply = httpx.post(f"{proxy_url}/chat/completions", json=body, headers=forced, timeout=600)
                content = reply.json()["choices"][0]["message"].get("content") if reply.status_code == 200 else None
                last = app.chat_requests()[-1].json()["messages"]
                results = [m["content"] for m in last if m["role"] == "tool" and m["tool_call_id"].startswith("call_r")]
                kinds = [
                    "too many" if "too many calls" in text else "no room" if "no room left" in text else "read"
                    for text in results
                ]
                return (
                    f"{reply.status_code} {content!r}; calls answered: {counts(kinds) or 'none (no continuation went)'}"
                )

            rows.append(measure(Row(f"R3: {size:,} read-back calls in one answer"), pid, proxy_url, run))
    return rows


WIDE_LETTERS = "".join(chr(0x1D41A + n) for n in range(26))  # MATHEMATICAL BOLD SMALL A to Z: 4 bytes each in UTF-8


def distinct_outputs(
    letters: str, tag: str, *, conversations: int = 80, outputs: int = 8, chars: int = 30_000
) -> list[bytes]:
    """`conversations` chat requests of `outputs` tool outputs of about `chars` random words of `letters` each, no two
    outputs alike."""
    rng = random.Random(5)
    bodies = []
    for n in range(conversations):
        messages: list[dict[str, Any]] = [
            {"role": "system", "content": "You are a coding agent."},
            {"role": "user", "content": f"Fix the failing test ({tag} {n})."},
        ]
        for turn in range(outputs):
            call = {"id": f"call_{turn}", "type": "function", "function": {"name": "bash", "arguments": "{}"}}
            messages.append({"role": "assistant", "content": f"Step {turn}.", "tool_calls": [call]})
            words = " ".join("".join(rng.choices(letters, k=rng.randint(3, 9))) for _ in range(chars // 7))
            messages.append({"role": "tool", "tool_call_id": f"call_{turn}", "content": f"{n}-{turn} {words}"})
        bodies.append(orjson.dumps({"model": READ_BACK_MODEL, "messages": messages, "tools": [BASH_TOOL]}))
    return bodies


def fill_originals(proxy_url: str, bodies: list[bytes]) -> str:
    """Each body sent in turn; their statuses, and the originals `/inflight/stats` says are kept."""
    with httpx.Client(timeout=300, headers={"content-type": "application/json"}) as client:
        statuses = [str(client.post(f"{proxy_url}/chat/completions", content=body).status_code) for body in bodies]
    kept = httpx.get(proxy_url.removesuffix("/v1") + "/inflight/stats").json()["retrieval"]
    return f"{tally(statuses)}; /inflight/stats: {kept['originals']} originals, {kept['bytes'] / MiB:.1f} MiB"


def probe_r5(upstream_url: str, letters: str, name: str) -> Row:
    """R5: `compaction.retrieval.max_bytes` 16 MiB, filled with originals of `letters` by 80 compacted conversations
    (8 outputs of 30,000 characters each, at a 32,000-token window); the same traffic with `retrieval: off` as the
    control, so that the store's share of the growth shows."""
    probe = f"R5: originals max_bytes 16 MiB, {name}"
    bodies = distinct_outputs(letters, name)
    rows = []
    for mode in ("off", "tool"):
        settings = config(
            models={READ_BACK_MODEL: {"context_window": 32_000}},
            discover_context_window=False,
            compaction={"retrieval": {"mode": mode, "max_bytes": 16 * MiB}},
        )
        with inflight_process(upstream_url, settings) as (proxy_url, pid):
            warm(proxy_url)
            rows.append(measure(Row(probe), pid, proxy_url, partial(fill_originals, proxy_url, bodies)))
    control, row = rows
    row.answer += f"; growth with retrieval off {control.after - control.before:+.1f} MB"
    return row


def proc_stat(pid: int) -> list[str]:
    """A process's /proc stat fields after its name (state, parent, ...); none once it is gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()  # the name may hold spaces or ")"
    except OSError:
        return []


def alive(pid: int) -> bool:
    return proc_stat(pid)[:1] not in ([], ["Z"], ["X"])  # a zombie is dead, only not yet reaped


def worker_processes(parent: int) -> set[int]:
    """The live workers `parent` spawned (multiprocessing's `spawn_main`), scanned from /proc."""
    found = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and proc_stat(int(entry.name))[1:2] == [str(parent)] and alive(int(entry.name)):
            with contextlib.suppress(OSError):
                if b"spawn_main" in (entry / "cmdline").read_bytes():
                    found.add(int(entry.name))
    return found


def probe_r7(upstream_url: str, folder: Path) -> Row:
    """R7: `inflight serve --workers 2` on SQLite; one worker's slot SIGKILLed 6 times, each replacement as soon as
    it is up (6 deaths within the minute); then 20 chat completions, each on a new connection."""
    row = Row("R7: --workers 2, one slot SIGKILLed 6 times, then 20 requests")
    settings = config(state={"url": f"sqlite:///{folder}/r7.db"})
    with inflight_process(upstream_url, settings, "--workers", "2") as (proxy_url, parent):
        stats_url = proxy_url.removesuffix("/v1") + "/inflight/stats"
        deadline, answered = time.monotonic() + 30, set[int]()
        while len(answered) < 2 and time.monotonic() < deadline:  # both up and answering
            answered.add(httpx.get(stats_url, timeout=10).json()["worker_pid"])
        keeper, victim = sorted(answered)
        killed = {victim}
        os.kill(victim, signal.SIGKILL)
        while len(killed) < 6:
            deadline = time.monotonic() + 30
            while not (fresh := worker_processes(parent) - {keeper} - killed) and time.monotonic() < deadline:
                time.sleep(0.01)
            if not fresh:
                break
            victim = fresh.pop()
            killed.add(victim)
            os.kill(victim, signal.SIGKILL)
        time.sleep(3)  # the slot's pause, or the parent's stop
        served = 0
        for _ in range(20):
            with contextlib.suppress(httpx.TransportError):
                served += httpx.post(f"{proxy_url}/chat/completions", json=CHAT, timeout=10).status_code == 200
        running = "the parent running" if alive(parent) else "the parent exited"
        row.answer = f"{served} of 20 served ({len(killed)} kills; {running}, {len(worker_processes(parent))} workers)"
    return row


def probe_r10(upstream_url: str) -> Row:
    """R10: the heaviest round, all at once: five 25 MB chat requests (issue 27's conversation: 125 tool outputs of
    200 KB of distinct log lines), a 27 MB `/v1/messages` turn of 40,000 tool results, and four more 25 MB chat
    requests gzip-compressed (7 MB each as sent)."""
    from benchmarks.big import conversation  # benchmarks.big imports this module

    row = Row("R10: 5 x 25 MB chat, a 27 MB Messages turn of 40k blocks, 4 x 25 MB gzip, at once")
    plain = [conversation(seed, 125, 200) for seed in range(5)]
    zipped = [gzip.compress(conversation(100 + seed, 125, 200), 6) for seed in range(4)]
    uses = [
        {"type": "tool_use", "id": f"t{i}", "name": "Bash", "input": {"cmd": f"cat {i}.log"}} for i in range(40_000)
    ]
    results = [
        {"type": "tool_result", "tool_use_id": f"t{i}", "content": f"part {i}: " + f"log line {i} of the build " * 20}
        for i in range(40_000)
    ]
    turn = [{"role": "user", "content": "Go through the logs."}, {"role": "assistant", "content": uses}]
    wide = {"model": "claude-sonnet-4-5", "max_tokens": 1024, "messages": [*turn, {"role": "user", "content": results}]}
    json_type = {"content-type": "application/json"}
    sends: list[tuple[str, bytes, dict[str, str]]] = [("/chat/completions", body, json_type) for body in plain]
    # The fake upstream answers this one at once, unread (its own Messages API is slow on 40,000 blocks).
    messages_headers = {**json_type, "anthropic-version": "2023-06-01", "x-scenario": "status-200"}
    sends.append(("/messages", orjson.dumps(wide), messages_headers))
    sends += [("/chat/completions", body, {**json_type, "content-encoding": "gzip"}) for body in zipped]
    with inflight_process(upstream_url) as (proxy_url, pid):
        warm(proxy_url)

        def run() -> str:
            statuses: list[str] = []
            took: list[float] = []
            start = time.monotonic()

            def send(path: str, body: bytes, headers: dict[str, str]) -> None:
                try:
                    response = httpx.post(proxy_url + path, content=body, headers=headers, timeout=600)
                    statuses.append(str(response.status_code))
                except httpx.HTTPError as exc:
                    statuses.append(type(exc).__name__)
                took.append(time.monotonic() - start)

            threads = [threading.Thread(target=send, args=sent) for sent in sends]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            return f"{tally(statuses)}; the last answered after {max(took):.1f} s"

        return measure(row, pid, proxy_url, run)


def arguments() -> argparse.ArgumentParser:
    """The command line (`tests/test_docs.py` checks each command the docs show against it)."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", default="", help="the probes to run, by letter (e.g. DF); default: all")
    return parser


def main() -> None:
    only = set(arguments().parse_args().only.upper())
    rows: list[Row] = []
    with fake_upstream() as upstream_url, tempfile.TemporaryDirectory() as folder:
        probes: list[tuple[str, Callable[[], Row | list[Row]]]] = [
            ("K", partial(probe_k, upstream_url)),
            ("C", probe_c),
            ("B", probe_b_line),
            ("B", probe_b_gzip),
            ("A", partial(probe_a, upstream_url)),
            ("D", partial(probe_d, upstream_url, 16)),
            ("D", partial(probe_d, upstream_url)),
            ("F", partial(probe_f, upstream_url)),
            ("I", partial(probe_i, upstream_url)),
            ("G", partial(probe_g_last_resort, upstream_url)),
            ("G", partial(probe_g_read, upstream_url)),
            ("G", probe_g_breakpoints),
            ("G", partial(probe_g_edits, upstream_url)),
            ("G", probe_g_summary),
            ("N", partial(probe_n, upstream_url)),
            ("S", partial(probe_s, upstream_url)),
        ]
        probes += [
            ("L", probe_learning),
            ("T", probe_context_management),
            ("U", probe_summarizer_key),
            ("V", probe_credentials),
            ("W", probe_admin_keys),
            ("X", probe_job_slots),
            ("Y", probe_dot_segments),
            ("Z", probe_day_one),
        ]
        # Issue 53 (hostile round five): items 1-3, 5, 7 and 10; item 8's row goes after R7, with its own change.
        probes += [
            ("R", partial(probe_r1, READ_BACK_WINDOW - 10)),
            ("R", partial(probe_r1, READ_BACK_WINDOW - 1000)),
            ("R", partial(probe_r2, read_back=False)),
            ("R", partial(probe_r2, read_back=True)),
            ("R", probe_r3),
            ("R", partial(probe_r5, upstream_url, string.ascii_lowercase, "ASCII")),
            ("R", partial(probe_r5, upstream_url, WIDE_LETTERS, "4-byte characters")),
            ("R", partial(probe_r7, upstream_url, Path(folder))),
            ("R", partial(probe_r10, upstream_url)),
        ]
        for letter, probe in probes:
            if only and letter not in only:
                continue
            made = probe()
            for row in made if isinstance(made, list) else [made]:
                rows.append(row)
                print(" | ".join(map(str, row.cells())), flush=True)
        if not only or only & set("EJ"):
            rows.extend(probe_e(upstream_url, Path(folder)))
    print()
    header = ["probe", "answer", "RSS before MB", "growth MB", "peak MB", "healthz p99 idle / during ms", "max ms"]
    print(table([row.cells() for row in rows], [*header, "goal"]))


if __name__ == "__main__":
    main()
