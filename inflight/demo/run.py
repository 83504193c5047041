"""`inflight demo`: a recorded agent conversation replayed through a real inflight and a scripted upstream.

Both servers run in this process, on loopback ports, under uvicorn: the proxy is `create_app` as
`inflight serve` builds it (records and the archive in memory, whatever the config's `state.url`),
and the upstream is `inflight.demo.upstream`. The client sends each turn's request as the agent did
(every message up to that turn, `inflight.pipeline.evaluation.turns`) over HTTP, and reads what the
proxy did from its `x-inflight-*` headers. No key, no network.
"""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import logging
import signal
import socket
from collections.abc import Generator
from dataclasses import dataclass
from importlib.resources import files
from typing import Any

import orjson
import uvicorn
from starlette.types import ASGIApp

from inflight.app import create_app
from inflight.compaction.summary_job import load_prompt
from inflight.config import ConfigError, Settings, load_settings
from inflight.config import Upstream as UpstreamSettings
from inflight.demo.report import Row, Totals, render
from inflight.demo.summary import PROMPT_OPENING
from inflight.demo.upstream import ScriptedUpstream
from inflight.errors import ProxyError
from inflight.frozen import frozen
from inflight.http.server import prepare_process, uvicorn_options
from inflight.pipeline.evaluation import turns
from inflight.upstream.client import UpstreamClient

TRACE = "swe_agent_marshmallow.json.gz"  # SWE-agent's demonstration on marshmallow (MIT), as in tests/fixtures/traces
SESSION = "inflight-demo"  # the conversation's name in the archive (`x-inflight-session`)
START_TIMEOUT_S = 30.0
REQUEST_TIMEOUT_S = 60.0
MIN_WINDOW = 256  # as `models.<name>.context_window` takes it


class DemoError(Exception):
    """Why the demo could not run (a port in use, a server that did not start), said in one line."""


@frozen
class DemoOptions:
    window: int = 8000
    port: int = 0  # the proxy's; 0: any free port
    turns: int | None = None  # the first this many turns only
    config: str | None = None
    serve: bool = False

    def __post_init__(self) -> None:
        if self.window < MIN_WINDOW:
            raise DemoError(f"--window must be at least {MIN_WINDOW} tokens, got {self.window}")
        if self.turns is not None and self.turns < 1:
            raise DemoError(f"--turns must be at least 1, got {self.turns}")


def load_trace() -> dict[str, Any]:
    """The recorded conversation shipped with the package: one chat-completion request body."""
    trace: dict[str, Any] = orjson.loads(gzip.decompress(files("inflight.demo").joinpath(TRACE).read_bytes()))
    return trace


def demo_settings(config: str | None, *, upstream_url: str, port: int, window: int, model: str) -> Settings:
    """The config's settings (compaction, models), pointed at the scripted upstream and kept in memory.

    Whatever the config says, the demo uses loopback, no keys (none is needed), the scripted upstream
    for everything, records and archive in memory (it never writes into a configured store), the
    summarizer at the upstream, and `window` for the conversation's model (keeping its `models:` entry's
    compaction settings)."""
    base = load_settings(config)
    entry = base.model_entry(model)
    kept = entry.model_dump(exclude_none=True, include={"encoding", "compaction"}) if entry is not None else {}
    upstream = {"base_url": upstream_url, "api_key": "", "auth": None}
    overrides: dict[str, Any] = {
        "listen": {"host": "127.0.0.1", "port": port},
        "upstream": upstream,
        "upstreams": {name: upstream for name in base.upstreams},
        "access": {"keys": [], "admin_keys": None, "allow_anonymous": False},
        "state": {"url": "memory://"},
        "archive": {"enabled": True},
        "models": {model: kept | {"context_window": window}},
        "compaction": {"summarize": {"base_url": None, "api_key": None}},
    }
    return load_settings(config, overrides=overrides)


class Server(uvicorn.Server):
    """uvicorn's server without its signal handlers: two run in one loop here, and the demo stops them."""

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        yield


def bound_socket(port: int) -> socket.socket:
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(("127.0.0.1", port))
    except OSError as exc:
        sock.close()
        raise DemoError(f"cannot listen on 127.0.0.1:{port}: {exc.strerror}") from exc
    return sock


@dataclass
class Running:
    server: Server
    task: asyncio.Task[None]
    sock: socket.socket

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.sock.getsockname()[1]}"

    async def stop(self) -> None:
        self.server.should_exit = True
        await self.task
        self.sock.close()


async def start(app: ASGIApp, sock: socket.socket, options: dict[str, Any], name: str) -> Running:
    """Serve `app` on `sock` and return once it accepts connections (its lifespan has started)."""
    quiet = {"log_level": "warning", "access_log": False, "timeout_graceful_shutdown": 5}
    server = Server(uvicorn.Config(app, **(options | quiet)))
    task = asyncio.create_task(server.serve(sockets=[sock]))
    async with asyncio.timeout(START_TIMEOUT_S):
        while not server.started:
            if task.done():
                sock.close()
                raise DemoError(f"the {name} did not start")
            await asyncio.sleep(0.01)
    return Running(server, task, sock)


async def send_turn(client: UpstreamClient, request: dict[str, Any], host: bytes) -> tuple[int, dict[str, str], Any]:
    """One turn's request through the proxy: its status, its headers, its JSON body."""
    headers = [
        (b"host", host),
        (b"content-type", b"application/json"),
        (b"x-inflight-session", SESSION.encode()),
    ]
    response = await client.open("POST", b"/v1/chat/completions", headers=headers, content=orjson.dumps(request))
    status, body = await client.read_whole(response)
    named = {name.decode("latin-1").lower(): value.decode("latin-1") for name, value in response.headers}
    try:
        return status, named, orjson.loads(body)
    except orjson.JSONDecodeError:
        return status, named, None


def row_of(turn: int, request: dict[str, Any], status: int, headers: dict[str, str], answer: Any) -> Row:
    problem = None
    if status != 200:
        error = answer.get("error") if isinstance(answer, dict) else None
        problem = f"{status}: {error.get('message') if isinstance(error, dict) else ''}"
    return Row(
        turn=turn,
        messages=len(request["messages"]),
        client_tokens=int(headers.get("x-inflight-tokens-before", 0)),
        sent_tokens=int(headers.get("x-inflight-tokens-after", 0)),
        actions=actions_of(headers),
        budget=int(headers.get("x-inflight-budget", 0)),
        problem=problem,
        compaction_id=headers.get("x-inflight-compaction-id") or headers.get("x-inflight-shadow-compaction-id"),
    )


def actions_of(headers: dict[str, str]) -> str:
    """What the proxy did (`x-inflight-actions`); in shadow mode, what it would have done and sent instead."""
    shadow = headers.get("x-inflight-shadow-actions")
    if shadow is not None and shadow != "none":
        would = int(headers.get("x-inflight-shadow-tokens-after", 0))
        return f"shadow, would send {would:,}: {shadow}"
    return headers.get("x-inflight-actions", "-")


async def settled(client: UpstreamClient, host: bytes) -> None:
    """Wait until the proxy has no background summary running (`GET /inflight/stats`).

    A real model's next turn would take seconds, so waiting makes the summary ready for the next turn in
    every run alike."""
    async with asyncio.timeout(REQUEST_TIMEOUT_S):
        while True:
            response = await client.open("GET", b"/inflight/stats", headers=[(b"host", host)], content=None)
            status, body = await client.read_whole(response)
            jobs = orjson.loads(body).get("summary_jobs") if status == 200 else None
            if not jobs or not (jobs.get("queued") or jobs.get("running")):
                return
            await asyncio.sleep(0.01)


async def replay(proxy_url: str, trace: dict[str, Any], limit: int | None) -> list[Row]:
    """Each turn's request as the agent sent it, through the proxy, one after the other."""
    messages = trace["messages"]
    ends = turns(messages)[:limit]
    client = UpstreamClient(UpstreamSettings(base_url=proxy_url, read_timeout_s=REQUEST_TIMEOUT_S))
    host = proxy_url.partition("://")[2].encode()
    rows = []
    try:
        for turn, end in enumerate(ends, start=1):
            request = {**trace, "messages": messages[:end]}
            try:
                status, headers, answer = await send_turn(client, request, host)
            except ProxyError as exc:  # the proxy did not answer at all: nothing to show for this turn
                raise DemoError(f"turn {turn}: no answer from the proxy ({exc.message})") from exc
            rows.append(row_of(turn, request, status, headers, answer))
            await settled(client, host)
    finally:
        await client.aclose()
    return rows


async def run_demo(options: DemoOptions) -> int:
    """Start both servers, replay, print the table; with `serve`, keep them running until SIGINT or SIGTERM."""
    trace = load_trace()
    model = str(trace["model"])
    upstream_sock = bound_socket(0)
    try:
        proxy_sock = bound_socket(options.port)
    except DemoError:
        upstream_sock.close()
        raise
    upstream_url = f"http://127.0.0.1:{upstream_sock.getsockname()[1]}"
    proxy_url = f"http://127.0.0.1:{proxy_sock.getsockname()[1]}"
    try:
        settings = demo_settings(
            options.config,
            upstream_url=f"{upstream_url}/v1",
            port=proxy_sock.getsockname()[1],
            window=options.window,
            model=model,
        )
    except ConfigError:
        upstream_sock.close()
        proxy_sock.close()
        raise
    prepare_process(settings)
    inflight_log = logging.getLogger("inflight")
    inflight_log.setLevel(logging.WARNING)  # the table says what each request did
    opening = load_prompt(settings.compaction.summarize.prompt_file)[: len(PROMPT_OPENING)]
    upstream = ScriptedUpstream(trace["messages"], model=model, window=options.window, prompt_opening=opening)
    upstream_server = await start(upstream, upstream_sock, {"lifespan": "off"}, "scripted upstream")
    shadow = False
    try:
        proxy = await start(create_app(settings), proxy_sock, uvicorn_options(settings), "inflight proxy")
        try:
            rows = await replay(proxy_url, trace, options.turns)
            totals = Totals.of(rows, upstream.seen, window=options.window)
            print(render(rows, totals, proxy=proxy_url, upstream=upstream_url, window=options.window, model=model))
            shadow = settings.for_model(model).compaction.mode == "shadow"
            if shadow and totals.failed:  # in shadow mode requests go unchanged, so these failures are not inflight's
                print("shadow mode: every request went as the client sent it; those the upstream refused, it would")
                print("have refused without inflight. The actions say what inflight would have sent instead.")
            if options.serve:
                inflight_log.setLevel(settings.log_level.upper())
                print(serving(proxy_url, model), flush=True)
                await until_stopped()
        finally:
            await proxy.stop()
    finally:
        await upstream_server.stop()
    return 0 if shadow or all(row.problem is None for row in rows) else 1


def serving(proxy_url: str, model: str) -> str:
    return "\n".join(
        [
            "",
            f"Serving. The viewer: {proxy_url}/inflight/ui (the conversation is {SESSION!r})",
            f"  its JSON: {proxy_url}/inflight/conversations",
            "Point a client at the proxy (any key; the scripted upstream answers every conversation):",
            f"  export OPENAI_BASE_URL={proxy_url}/v1 OPENAI_API_KEY=demo",
            f"  curl -s {proxy_url}/v1/chat/completions -H 'content-type: application/json' \\",
            f'    -d \'{{"model": "{model}", "messages": [{{"role": "user", "content": "hello"}}]}}\'',
            "Ctrl-C stops both servers.",
        ]
    )


async def until_stopped() -> None:
    """Wait for SIGINT or SIGTERM (then the servers are stopped in order, and the demo exits 0)."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    try:
        await stop.wait()
    finally:
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(signum)
