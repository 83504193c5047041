"""The `inflight` command: `serve` the proxy, `check` a config, `run` an agent through a proxy of its own,
`health` (is it up?), and the offline commands `count`, `compact` and `eval`. The offline commands keep their
records in memory unless `--state URL` names a store, so they never write into the store a running proxy uses
(a forced compaction's record would otherwise be replayed into the live conversation)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from types import FrameType
from typing import Any

import orjson
import uvicorn

from inflight import __version__
from inflight.app import create_app, tune_collector
from inflight.compaction.prefix import CacheFigures
from inflight.config import ConfigError, Settings, load_settings
from inflight.demo import DemoError, DemoOptions, run_demo
from inflight.errors import BadRequest
from inflight.formats import CHAT_COMPLETIONS
from inflight.http.access import startup_problem
from inflight.http.intake import parse_object
from inflight.http.server import prepare_process, startup_line, state_warning, upstream_warnings, uvicorn_options
from inflight.http.workers import PortInUse, check_port_free, check_workers, serve_workers
from inflight.pipeline.accounting import Counted
from inflight.pipeline.engine import Mode, Options, Pipeline, build_pipeline
from inflight.pipeline.evaluation import Compacted, SizedSummarizers, plural, replay, report, totals
from inflight.pipeline.outgoing import Prepared
from inflight.pipeline.summarizer import Summarizers
from inflight.upstream.client import UpstreamClient


class CommandError(Exception):
    """A problem with a command's input, printed as one line."""


def _load(args: argparse.Namespace, overrides: dict[str, Any] | None = None) -> Settings:
    return load_settings(args.config, overrides=overrides)


def offline_settings(args: argparse.Namespace, overrides: dict[str, Any] | None = None) -> Settings:
    """An offline command's settings: the config's, but with records in memory (or `--state URL`) and no archive,
    whatever `state.url` and `archive.enabled` say."""
    offline = {"state": {"url": args.state or "memory://"}, "archive": {"enabled": False}}
    return _load(args, {**(overrides or {}), **offline})


def serving_settings(args: argparse.Namespace) -> Settings:
    """The settings `serve` runs with (and `check` shows, `health` asks about): the config, then `--host`, `--port`,
    `--upstream`, `--upstream-messages`, `--upstream-gemini`."""
    overrides: dict[str, Any] = {}
    if args.host is not None:
        overrides.setdefault("listen", {})["host"] = args.host
    if args.port is not None:
        overrides.setdefault("listen", {})["port"] = args.port
    if getattr(args, "upstream", None) is not None:
        overrides.setdefault("upstream", {})["base_url"] = args.upstream
    for wire in ("messages", "gemini"):
        if (url := getattr(args, f"upstream_{wire}", None)) is not None:
            overrides.setdefault("upstreams", {}).setdefault(wire, {})["base_url"] = url
    if getattr(args, "log_level", None) is not None:
        overrides["log_level"] = args.log_level
    return _load(args, overrides)


def serve(args: argparse.Namespace) -> int:
    settings = serving_settings(args)
    problem = startup_problem(settings)
    if problem is not None:
        raise ConfigError(problem)
    check_workers(settings, args.workers)
    check_port_free(settings.listen.host, settings.listen.port)
    prepare_process(settings)
    log = logging.getLogger("inflight")
    log.info("%s", startup_line(settings, workers=args.workers))
    if (warning := state_warning(settings)) is not None:
        log.warning("%s", warning)
    for hint in upstream_warnings(settings):
        log.warning("%s", hint)
    if args.workers > 1:
        return serve_workers(settings, args.workers)
    uvicorn.run(
        create_app(settings, on_started=tune_collector),
        host=settings.listen.host,
        port=settings.listen.port,
        **uvicorn_options(settings),
    )
    return 0


def health(args: argparse.Namespace) -> int:
    """Exit 0 if the server the config (and `--host`, `--port`) describes answers `GET /healthz` with 200, else 1.

    This is the container's HEALTHCHECK, so it follows the configured port."""
    settings = serving_settings(args)
    url = f"http://{local_address(settings.listen.host)}:{settings.listen.port}/healthz"
    try:
        status, _ = asked_locally(url, args.timeout)
    except OSError as exc:  # refused, timed out, or an HTTP error status (HTTPError is an OSError too)
        print(f"inflight: {url}: {getattr(exc, 'reason', exc)}", file=sys.stderr)
        return 1
    print(f"inflight: {url}: {status}")
    return 0 if status == 200 else 1


def asked_locally(url: str, timeout_s: float) -> tuple[int, bytes]:
    """`GET url` on this machine: its status and body, any proxy from the environment (HTTP_PROXY) ignored. Raises
    OSError when refused, timed out or answered with an HTTP error status (HTTPError is an OSError too)."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(url, timeout=timeout_s) as response:
        return response.status, response.read()


FORMATS = ("chat_completions", "responses", "messages", "gemini")


def check(args: argparse.Namespace) -> int:
    """Validate the config as `serve` would (the same loader, `${VAR}` expanded, the same refusals to start) and
    say where it listens and where each wire format's requests go; exit 2 (in `main`) with the problem if invalid."""
    settings = serving_settings(args)
    problem = startup_problem(settings)
    if problem is not None:
        raise ConfigError(problem)
    listen = settings.listen
    host = f"[{listen.host}]" if ":" in listen.host else listen.host
    print(f"inflight: {args.config or 'the built-in defaults'}: valid")
    print(f"listen: http://{host}:{listen.port}/v1")
    width = max(len(wire) for wire in FORMATS)
    for wire in FORMATS:
        print(f"{wire:<{width}} -> {settings.destination(wire)}")
    for hint in upstream_warnings(settings):
        print(f"warning: {hint}")
    return 0


def local_address(host: str) -> str:
    """The address to reach a server listening on `host` from the same machine (loopback if it listens on all)."""
    if host in ("", "0.0.0.0"):
        return "127.0.0.1"
    if host == "::":
        return "[::1]"
    return f"[{host}]" if ":" in host else host


# `inflight run`: a command given a proxy of its own on loopback, as a child process.
READY_TIMEOUT_S = 60.0  # the longest the proxy may take to answer /healthz
STOP_TIMEOUT_S = 20.0  # after SIGTERM, the longest it may take to finish its requests before it is killed
CODEX_PROVIDER = "inflight"


def agent_environment(base: str) -> dict[str, str]:
    """The variables that point the agents at a proxy on `base` (`http://127.0.0.1:P`): the OpenAI SDKs take the
    `/v1` URL, Claude Code and Gemini CLI the origin (they add `/v1/messages`, `/v1beta/...` themselves)."""
    return {"OPENAI_BASE_URL": f"{base}/v1", "ANTHROPIC_BASE_URL": base, "GOOGLE_GEMINI_BASE_URL": base}


def agent_command(command: list[str], base: str, environ: dict[str, str]) -> list[str]:
    """`command`, and for the Codex CLI (which reads no base URL from the environment for a custom provider) a
    provider pointed at the proxy, on its command line as `-c` overrides: the keys of docs/agents.md's
    `config.toml`, the key from `OPENAI_API_KEY` when it is set (else none: the proxy's, or a server's that needs
    none)."""
    if Path(command[0]).name != "codex":
        return command
    provider = f"model_providers.{CODEX_PROVIDER}"
    overrides = [
        f'model_provider="{CODEX_PROVIDER}"',
        f'{provider}.name="OpenAI through inflight"',
        f'{provider}.base_url="{base}/v1"',
        f'{provider}.wire_api="responses"',
        f"{provider}.supports_websockets=false",
    ]
    if environ.get("OPENAI_API_KEY"):
        overrides.append(f'{provider}.env_key="OPENAI_API_KEY"')
    return [command[0], *(word for override in overrides for word in ("-c", override)), *command[1:]]


def answers_healthz(port: int, timeout_s: float = 2.0) -> bool:
    """Whether an inflight answers `GET /healthz` on 127.0.0.1:`port` (200, a JSON object whose `status` is ok)."""
    try:
        status, body = asked_locally(f"http://127.0.0.1:{port}/healthz", timeout_s)
        said = orjson.loads(body) if status == 200 else None
    except (OSError, ValueError):
        return False
    return isinstance(said, dict) and said.get("status") == "ok"


def own_log() -> Path:
    """A new log file of this user's own (created, not followed through a link someone placed at a guessable name)."""
    handle, name = tempfile.mkstemp(prefix="inflight-run-", suffix=".log")
    os.close(handle)
    return Path(name)


def free_loopback_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def die_with_parent() -> Callable[[], None] | None:
    """What the proxy's process runs before `inflight serve` (Linux): ask for SIGTERM when `inflight run` dies, so
    that even a killed `run` leaves no proxy behind. Looked up here, in the parent, so the child only calls it."""
    if sys.platform != "linux":
        return None
    import ctypes

    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    return lambda: prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


@contextlib.contextmanager
def own_proxy(args: argparse.Namespace, port: int, log: Path) -> Iterator[None]:
    """`python -m inflight serve` on 127.0.0.1:`port`, its output in `log`, until it answers /healthz; stopped
    (SIGTERM, then waited for) when the block ends. In a session of its own, so a Ctrl-C meant for the agent
    does not stop it under the agent."""
    command = [sys.executable, "-m", "inflight", "serve", "--host", "127.0.0.1", "--port", str(port)]
    command += ["--config", args.config] if args.config else []
    with log.open("ab") as sink:
        proxy = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=sink,
            stderr=sink,
            start_new_session=True,
            preexec_fn=die_with_parent(),  # `run` has started no thread, so the fork is safe
        )
    try:
        deadline = time.monotonic() + READY_TIMEOUT_S
        while not answers_healthz(port, timeout_s=1.0):
            if proxy.poll() is not None or time.monotonic() > deadline:
                tail = log.read_text(errors="replace").strip().splitlines()[-5:]
                said = "".join(f"\n  {line}" for line in tail)
                raise CommandError(f"run: the proxy did not start on port {port} (its log, {log}):{said}")
            time.sleep(0.05)
        yield
    finally:
        if proxy.poll() is None:
            proxy.terminate()
            try:
                proxy.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                proxy.kill()
                proxy.wait()


def run_command(args: argparse.Namespace) -> int:
    """Run a command (an agent) with its base URLs pointed at a proxy: one already answering on `--port` or on
    the config's `listen.port`, else one started for it on `--port` or a free loopback port, and stopped after.
    Its exit code is the command's (128+N if a signal N ended it, 127 if it cannot be run)."""
    command = args.command[1:] if args.command[:1] == ["--"] else list(args.command)
    if not command:
        raise CommandError("run: name the command to run after --, e.g. inflight run -- claude")
    if shutil.which(command[0]) is None:  # said before a proxy is started for it
        print(f"inflight run: {command[0]}: command not found", file=sys.stderr)
        return 127
    settings = _load(args)  # a config error is said here, before anything starts
    named = args.port or (settings.listen.port if args.config else 0)  # 0: none named
    if named and answers_healthz(named):
        base = f"http://127.0.0.1:{named}"
        print(f"inflight run: using the inflight already on {base}/v1", file=sys.stderr)
        return _run_agent(command, base)
    port = args.port or free_loopback_port()
    base = f"http://127.0.0.1:{port}"
    log = Path(args.log) if args.log else own_log()
    try:
        with own_proxy(args, port, log):
            print(f"inflight run: proxy on {base}/v1 (log {log})", file=sys.stderr)
            return _run_agent(command, base)
    except KeyboardInterrupt:  # Ctrl-C while the proxy was starting: it is stopped on the way out
        return 130


def _run_agent(command: list[str], base: str) -> int:
    """The command, with the agents' variables set; SIGTERM and SIGHUP passed on to it, SIGINT left to it (the
    terminal sends it to the command too), until it exits."""
    env = {**os.environ, **agent_environment(base)}
    try:
        child = subprocess.Popen(agent_command(command, base, env), env=env)
    except OSError as exc:
        print(f"inflight run: {command[0]}: {exc.strerror}", file=sys.stderr)
        return 127 if isinstance(exc, FileNotFoundError) else 126

    def forward(signum: int, frame: FrameType | None) -> None:
        if signum != signal.SIGINT:
            child.send_signal(signum)

    passed = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    before = {signum: signal.signal(signum, forward) for signum in passed}
    try:
        code = child.wait()
    finally:
        for signum, handler in before.items():
            signal.signal(signum, handler)
    return 128 - code if code < 0 else code


def read_request(path: str) -> dict[str, Any]:
    try:
        data = sys.stdin.buffer.read() if path == "-" else Path(path).read_bytes()
    except OSError as exc:
        raise CommandError(f"cannot read {path}: {exc.strerror}") from exc
    try:
        return parse_object(data)
    except BadRequest as exc:
        raise CommandError(f"{path}: {exc.message}") from exc


def offline_pipeline(settings: Settings, summarizers: Summarizers | None) -> Pipeline:
    """The server's pipeline without a server: no discovery, and records in memory for this run (`offline_settings`)."""
    return build_pipeline(settings, summarizers=summarizers)


def counted_request(
    args: argparse.Namespace, pipeline: Pipeline, *, exact: bool = False
) -> tuple[dict[str, Any], Counted]:
    """Read and count the request file as `--model` (default: its own model); `exact` counts every message."""
    payload = read_request(args.file)
    model = args.model or payload.get("model")
    if not isinstance(model, str):
        raise CommandError(f"{args.file} names no model; pass --model")
    body = {**payload, "model": model, "messages": payload.get("messages", [])}
    counted = pipeline.count(orjson.dumps(payload), body, CHAT_COMPLETIONS, exact=exact)
    if counted is None:
        raise CommandError(f"{args.file}: messages must be a list of objects")
    return payload, counted


def count(args: argparse.Namespace) -> int:
    """Count a request offline; the window comes from the config, then the built-in table (no discovery)."""
    pipeline = offline_pipeline(offline_settings(args), None)
    _, counted = counted_request(args, pipeline, exact=True)
    accounting = pipeline.account(counted)
    tokens, budget, limits = counted.count.total, accounting.budget, accounting.limits
    if args.json:
        document = {"model": counted.model, "prompt_tokens": tokens, "context_window": limits.context_window}
        print(orjson.dumps(document | {"budget": budget}).decode())
        return 0
    kind = "exact" if counted.encoding.exact else "estimate"
    share = 100 * tokens / max(budget, 1)
    print(
        f"{counted.model}: {tokens:,} prompt tokens ({counted.encoding.name}, {kind}); window "
        f"{limits.context_window:,} ({limits.source}); budget {budget:,}; {share:.1f}% of budget"
    )
    return 0


def compact(args: argparse.Namespace) -> int:
    """Print the body as the proxy would send it under the config's mode (`--force`: compacted even if it fits),
    and a one-line report on stderr."""
    settings = offline_settings(args)
    payload, prepared = asyncio.run(_compact(args, settings))
    outcome = prepared.outcome
    if "compaction_error" in prepared.fields:
        print(
            f"inflight: compaction failed ({prepared.fields['compaction_error']}); see the log above", file=sys.stderr
        )
        return 1
    if outcome is None:
        print(orjson.dumps(payload).decode())
        print(f"inflight: nothing to do ({prepared.limit:,}-token budget)", file=sys.stderr)
        return 0
    if prepared.shadow:  # the proxy sends the client's body; what compaction would have sent is only reported
        print(orjson.dumps(payload).decode())
        print(
            f"inflight: compaction.mode is shadow: sent as it came; compaction would have sent "
            f"{outcome.tokens_after:,} of {outcome.tokens_before:,} tokens (actions {','.join(outcome.actions)})",
            file=sys.stderr,
        )
        return 0
    print(orjson.dumps({**payload, "messages": outcome.messages}).decode())
    print(
        f"inflight: {outcome.tokens_before:,} -> {outcome.tokens_after:,} tokens (budget {prepared.limit:,}); "
        f"actions {','.join(outcome.actions)}; {plural(outcome.messages_replaced, 'message')} summarized; "
        f"{plural(outcome.summarizer_calls, 'summarizer call')}"
        + "".join(f"; {key}={value}" for key, value in outcome.notes.items()),
        file=sys.stderr,
    )
    if prepared.too_long:
        print(f"inflight: {prepared.too_long}", file=sys.stderr)
    return 0 if outcome.fits else 1


async def _compact(args: argparse.Namespace, settings: Settings) -> tuple[dict[str, Any], Prepared]:
    upstream = UpstreamClient(settings.upstream)
    summarizers = None if args.no_llm else Summarizers(settings, upstream)
    pipeline = offline_pipeline(settings, summarizers)
    try:
        payload, counted = counted_request(args, pipeline)
        accounting = pipeline.account(counted)
        key = os.environ.get("OPENAI_API_KEY", "")
        mode = Mode.FORCE if args.force else Mode.CONFIGURED
        options = Options(mode=mode, credentials=[(b"authorization", b"Bearer " + key.encode())] if key else [])
        return payload, await pipeline.prepare(counted, accounting, options)
    finally:
        await pipeline.aclose()
        if summarizers is not None:
            await summarizers.aclose()
        await upstream.aclose()


def evaluate(args: argparse.Namespace) -> int:
    """Replay traces offline at a window; print what each compaction kept."""
    overrides: dict[str, Any] = {"discover_context_window": False}
    if args.summarizer:
        overrides["compaction"] = {"summarize": {"base_url": args.summarizer, "model": args.summarizer_model}}
    traces = {path: read_request(path) for path in args.traces}
    models = {str(body.get("model")) for body in traces.values()}
    settings = offline_settings(args, {**overrides, "models": {m: {"context_window": args.window} for m in models}})
    results, caches, calls, oversize = asyncio.run(_evaluate(settings, traces, use_llm=bool(args.summarizer)))
    if args.json:
        figures = totals(results, caches)
        print(
            orjson.dumps(
                {"window": args.window, **figures, "summarizer_calls": calls, "summarizer_oversize": oversize}
            ).decode()
        )
    else:
        print(report(results, caches, window=args.window, summarizer_calls=calls, oversize=oversize))
    return 0


async def _evaluate(
    settings: Settings, traces: dict[str, dict[str, Any]], *, use_llm: bool
) -> tuple[list[Compacted], dict[str, CacheFigures], int, int]:
    upstream = UpstreamClient(settings.upstream)
    holder: list[Pipeline] = []
    summarizers = Summarizers(settings, upstream)
    sized = SizedSummarizers(summarizers, holder) if use_llm else None
    pipeline = build_pipeline(settings, summarizers=sized)
    holder.append(pipeline)
    try:
        results: list[Compacted] = []
        caches: dict[str, CacheFigures] = {}
        for path, body in traces.items():
            replayed = await replay(pipeline, Path(path).stem, body)
            results += replayed.compacted
            caches[Path(path).stem] = replayed.cache
        return results, caches, (sized.calls if sized else 0), (sized.oversize if sized else 0)
    finally:
        await pipeline.aclose()
        await summarizers.aclose()
        await upstream.aclose()


def add_state_option(command: argparse.ArgumentParser) -> None:
    command.add_argument(
        "--state",
        metavar="URL",
        help="keep its compaction records here, e.g. sqlite:///offline.db (default: memory, never the config's "
        "state.url, which a running proxy serves from)",
    )


def demo(args: argparse.Namespace) -> int:
    """A recorded conversation through a real proxy and a scripted upstream, on loopback (`inflight.demo`)."""
    try:
        options = DemoOptions(
            window=args.window, port=args.port, turns=args.turns, config=args.config, serve=args.serve
        )
        return asyncio.run(run_demo(options))
    except DemoError as exc:
        raise CommandError(str(exc)) from exc
    except KeyboardInterrupt:  # Ctrl-C during the replay: both servers are stopped with the event loop
        print("inflight demo: interrupted", file=sys.stderr)
        return 130


def add_upstream_options(command: argparse.ArgumentParser) -> None:
    command.add_argument("--upstream", metavar="URL", help="upstream base URL, e.g. http://127.0.0.1:8080/v1")
    command.add_argument(
        "--upstream-messages", metavar="URL", help="the Messages API's own upstream (upstreams.messages.base_url)"
    )
    command.add_argument(
        "--upstream-gemini",
        metavar="URL",
        help="the Gemini API's own upstream, an origin (upstreams.gemini.base_url), e.g. http://127.0.0.1:9000",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="inflight", description="A proxy that keeps agent conversations in context.")
    parser.add_argument("--version", action="version", version=f"inflight {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)

    demo_cmd = commands.add_parser(
        "demo", help="replay a recorded agent conversation through inflight and a scripted upstream (no key)"
    )
    demo_cmd.add_argument("--window", type=int, default=8000, help="the model's context window (default 8000)")
    demo_cmd.add_argument("--turns", type=int, help="replay only the first N turns (default: all 14)")
    demo_cmd.add_argument("--config", help="YAML config file (compaction settings to try; state stays in memory)")
    demo_cmd.add_argument("--port", type=int, default=0, help="the proxy's port on 127.0.0.1 (default: a free one)")
    demo_cmd.add_argument(
        "--serve", action="store_true", help="keep both servers running after the replay, with the viewer on"
    )
    demo_cmd.set_defaults(run=demo)

    serve_cmd = commands.add_parser("serve", help="run the proxy")
    serve_cmd.add_argument("--config", help="YAML config file (default: built-in defaults)")
    serve_cmd.add_argument("--host", help="address to listen on (default: listen.host, 127.0.0.1)")
    serve_cmd.add_argument("--port", type=int, help="port to listen on (default: listen.port, 8787)")
    add_upstream_options(serve_cmd)
    serve_cmd.add_argument(
        "--log-level", choices=["debug", "info", "warning", "error"], help="log verbosity (default: log_level, info)"
    )
    serve_cmd.add_argument(
        "--workers", type=int, default=1, help="processes on the port, sharing state.url (not memory://; default 1)"
    )
    serve_cmd.set_defaults(run=serve)

    check_cmd = commands.add_parser(
        "check", help="validate a config as serve reads it; say where it listens and where each format's requests go"
    )
    check_cmd.add_argument("--config", help="YAML config file (default: built-in defaults)")
    check_cmd.add_argument("--host", help="as serve's --host")
    check_cmd.add_argument("--port", type=int, help="as serve's --port")
    add_upstream_options(check_cmd)
    check_cmd.set_defaults(run=check)

    run_cmd = commands.add_parser(
        "run", help="run a command (an agent) through a proxy on loopback, its base URLs pointed at it"
    )
    run_cmd.add_argument("--config", help="YAML config file for the proxy it starts (default: built-in defaults)")
    run_cmd.add_argument(
        "--port",
        type=int,
        help="use the inflight on this port, or start one there (default: the config's listen.port if an inflight "
        "answers there, else a free port)",
    )
    run_cmd.add_argument(
        "--log", metavar="FILE", help="the started proxy's log (default: a file in the temp directory)"
    )
    run_cmd.add_argument("command", nargs=argparse.REMAINDER, metavar="-- COMMAND ...", help="the command to run")
    run_cmd.set_defaults(run=run_command)

    health_cmd = commands.add_parser("health", help="exit 0 if the server the config describes answers /healthz")
    health_cmd.add_argument("--config", help="YAML config file (listen.host and listen.port)")
    health_cmd.add_argument("--host", help="the server's listen address (default: listen.host)")
    health_cmd.add_argument("--port", type=int, help="the server's port (default: listen.port)")
    health_cmd.add_argument("--timeout", type=float, default=3.0, help="seconds to wait for the answer (default 3)")
    health_cmd.set_defaults(run=health)

    count_cmd = commands.add_parser("count", help="count a chat-completion request body's prompt tokens")
    count_cmd.add_argument("file", help="request body JSON file (- for stdin)")
    count_cmd.add_argument("--model", help="count as this model (default: the body's model)")
    count_cmd.add_argument("--config", help="YAML config file (for models: and compaction.reserve_tokens)")
    count_cmd.add_argument("--json", action="store_true", help="print a JSON object instead of a sentence")
    add_state_option(count_cmd)
    count_cmd.set_defaults(run=count)

    compact_cmd = commands.add_parser("compact", help="print a request body compacted as the proxy would send it")
    compact_cmd.add_argument("file", help="request body JSON file (- for stdin)")
    compact_cmd.add_argument("--config", help="YAML config file")
    compact_cmd.add_argument("--model", help="compact as this model (default: the body's model)")
    compact_cmd.add_argument("--no-llm", action="store_true", help="use the local digest instead of a summarizer call")
    compact_cmd.add_argument(
        "--force", action="store_true", help="compact even if it fits the budget (as `x-inflight-compaction: force`)"
    )
    add_state_option(compact_cmd)
    compact_cmd.set_defaults(run=compact)

    eval_cmd = commands.add_parser("eval", help="replay conversations offline and report what compaction keeps")
    eval_cmd.add_argument("traces", nargs="+", metavar="TRACE", help="chat-completion request body JSON files")
    eval_cmd.add_argument("--window", type=int, required=True, help="the context window to replay them at")
    eval_cmd.add_argument("--config", help="YAML config file (compaction settings to try)")
    eval_cmd.add_argument(
        "--summarizer",
        metavar="URL",
        help="an OpenAI-compatible /v1 URL for summaries (default: none, the ledger alone)",
    )
    eval_cmd.add_argument("--summarizer-model", help="the summarizer's model (default: each trace's own)")
    eval_cmd.add_argument("--json", action="store_true", help="print the totals as one JSON object")
    add_state_option(eval_cmd)
    eval_cmd.set_defaults(run=evaluate)

    parser.description = f"{parser.description} Commands: {', '.join(commands.choices)}."
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.run(args))
    except ConfigError as exc:
        print(f"inflight: config error: {exc}", file=sys.stderr)
        return 2
    except PortInUse as exc:
        print(f"inflight: {exc}", file=sys.stderr)
        return 2
    except CommandError as exc:
        print(f"inflight: {exc}", file=sys.stderr)
        return 1
