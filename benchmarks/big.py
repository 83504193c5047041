"""What a huge request costs the proxy, measured from outside: a 25 MB agent conversation.

Starts the fake upstream and an inflight proxy (each in its own process; the proxy's log to a file),
warms the proxy with one small request, then sends 1, and then 3 different, conversations of `--outputs`
tool outputs of `--kb` KB of distinct log text each (25 MB, about 6.6M tokens, by default) at once,
while another process polls `GET /healthz` every 10 ms. Each compacts to fit gpt-4o's window.

For each request it prints the proxy's own time as the client sees it (from sending until the request
reaches the upstream, both on this machine's wall clock), the upstream's time (from that arrival to the
end of the answer at the client, loopback included), and what the proxy's log line says (`upstream_ms`,
`queue_ms`, `total_ms`); then the `/healthz` p99 before and during the load. The goals: one request
<= 1.5 s of proxy time, three within 3 s, `/healthz` p99 within 20 ms of idle, and the log's
`upstream_ms` within 1 s of the upstream's real share. It asserts nothing.

    python -m benchmarks.big [--outputs 125] [--kb 200] [--rounds 1,3]
"""

from __future__ import annotations

import argparse
import random
import re
import socket
import tempfile
import threading
import time
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import orjson

from benchmarks.harness import percentile, table
from benchmarks.hostile import watching
from tests.support.processes import fake_upstream, inflight_process

LEVELS = ["DEBUG", "INFO", "INFO", "INFO", "WARN", "ERROR"]
VERBS = ["GET", "POST", "PUT", "DELETE"]
RESOURCES = ["users", "orders", "items", "sessions", "builds", "jobs", "files", "reports"]
MODEL = "gpt-4o"
LOG_FIGURES = re.compile(r"upstream_ms=(\S+) total_ms=(\S+)")
QUEUE_FIGURE = re.compile(r"queue_ms=(\S+)")


def log_output(rng: random.Random, turn: int, size: int) -> str:
    """About `size` bytes of a service's log, no two lines alike."""
    lines: list[str] = []
    length = 0
    while length < size:
        second = rng.randrange(86_400)
        line = (
            f"2026-11-{1 + turn % 28:02d}T{second // 3600:02d}:{second // 60 % 60:02d}:{second % 60:02d}."
            f"{rng.randrange(1000):03d}Z {rng.choice(LEVELS):5} [worker-{rng.randrange(64)}] "
            f"{rng.choice(VERBS)} /api/v{rng.randrange(1, 4)}/{rng.choice(RESOURCES)}/{rng.randrange(10**6)} "
            f"{rng.choice((200, 200, 201, 204, 404, 500))} {rng.random() * 900:.1f}ms req={rng.getrandbits(48):012x}"
        )
        lines.append(line)
        length += len(line) + 1
    return "\n".join(lines)


def conversation(seed: int, outputs: int, kb: int) -> bytes:
    """A coding agent's conversation: the task, then `outputs` tool calls each answered by a big log."""
    rng = random.Random(seed)
    messages: list[dict[str, object]] = [
        {"role": "system", "content": "You are a coding agent. Use the tools to investigate and fix bugs."},
        {"role": "user", "content": f"Find out why the service {seed} drops requests under load, and fix it."},
    ]
    for turn in range(outputs):
        call_id = f"call_{seed}_{turn}"
        arguments = orjson.dumps({"cmd": f"kubectl logs deploy/api-{seed} --since={turn + 1}h"}).decode()
        call = {"id": call_id, "type": "function", "function": {"name": "bash", "arguments": arguments}}
        messages.append({"role": "assistant", "content": f"Reading the logs of hour {turn}.", "tool_calls": [call]})
        messages.append({"role": "tool", "tool_call_id": call_id, "content": log_output(rng, turn, kb * 1024)})
    tools = [
        {
            "type": "function",
            "function": {
                "name": "bash",
                "description": "Run a shell command.",
                "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}, "required": ["cmd"]},
            },
        }
    ]
    return orjson.dumps({"model": MODEL, "messages": messages, "tools": tools})


def post(proxy_url: str, body: bytes, tag: str, out: dict[str, float]) -> None:
    """POST `body` on a fresh connection; the wall-clock time of its send and of the answer's end in `out`."""
    parts = urlsplit(proxy_url)
    head = (
        f"POST {parts.path}/chat/completions HTTP/1.1\r\nHost: {parts.netloc}\r\nContent-Type: application/json\r\n"
        f"x-bench-tag: {tag}\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    ).encode()
    with socket.create_connection((parts.hostname, parts.port), timeout=300) as sock:
        out["sent"] = time.time()
        sock.sendall(head + body)
        received = b""
        while chunk := sock.recv(65536):
            received += chunk
        out["done"] = time.time()
        out["status"] = float(received.split(b" ", 2)[1])


def log_lines(path: Path, skip: int) -> list[str]:
    lines = path.read_text(errors="replace").splitlines()
    return [line for line in lines[skip:] if "POST /v1/chat/completions" in line]


def one_round(proxy_url: str, upstream_url: str, pid: int, log: Path, count: int, args: argparse.Namespace) -> None:
    bodies = [conversation(seed, args.outputs, args.kb) for seed in range(100 * count, 100 * count + count)]
    tags = [f"big-{count}-{i}" for i in range(count)]
    skip = len(log.read_text(errors="replace").splitlines())
    times: list[dict[str, float]] = [{} for _ in bodies]
    threads = [
        threading.Thread(target=post, args=(proxy_url, body, tag, out))
        for body, tag, out in zip(bodies, tags, times, strict=True)
    ]
    with watching(pid, proxy_url) as watch:
        time.sleep(2)
        start = time.monotonic()
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        end = time.monotonic()
    time.sleep(0.5)  # the log lines are written once the answers are out
    stats = httpx.get(upstream_url.removesuffix("/v1") + "/_upstream/stats", timeout=10).json()
    arrived = {}
    for arrival in stats["arrivals"]:
        if arrival["path"] == "/v1/chat/completions" and not arrival["summary"]:
            arrived[arrival.get("tag")] = arrival
    lines = log_lines(log, skip)
    rows = []
    for index, (tag, out) in enumerate(zip(tags, times, strict=True)):
        arrival = arrived.get(tag)
        proxy_s = arrival["at"] - out["sent"] if arrival else float("nan")
        upstream_s = out["done"] - arrival["at"] if arrival else float("nan")
        line = next((line for line in lines if f"tag={tag}" in line), lines[index] if index < len(lines) else "")
        figures = LOG_FIGURES.search(line)
        queue = QUEUE_FIGURE.search(line)
        rows.append(
            [
                tag,
                f"{len(bodies[index]) / 1e6:.1f}",
                int(out.get("status", 0)),
                f"{arrival['bytes'] / 1e3:,.0f}" if arrival else "-",
                f"{proxy_s:.2f}",
                f"{upstream_s:.3f}",
                figures.group(1) if figures else "-",
                queue.group(1) if queue else "-",
                figures.group(2) if figures else "-",
            ]
        )
    idle = [ms for when, ms in watch.health if when < start]
    during = [ms for when, ms in watch.health if start <= when <= end]
    print(f"{count} at once: the last reached the upstream {max(float(r[4]) for r in rows):.2f} s after its send")
    header = ["request", "MB", "status", "KB sent upstream", "proxy s", "upstream s", "log upstream_ms"]
    print(table(rows, [*header, "log queue_ms", "log total_ms"]))
    print(f"/healthz p99 idle {percentile(idle, 99):.1f} ms, during {percentile(during, 99):.1f} ms (n={len(during)})")
    print()


def arguments() -> argparse.ArgumentParser:
    """The command line (`tests/test_docs.py` checks each command the docs show against it)."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--outputs", type=int, default=125, help="tool outputs per conversation")
    parser.add_argument("--kb", type=int, default=200, help="KB of each tool output")
    parser.add_argument("--rounds", default="1,3", help="how many requests at once, for each round")
    return parser


def main() -> None:
    args = arguments().parse_args()
    with tempfile.TemporaryDirectory() as folder:
        log = Path(folder) / "inflight.log"
        with fake_upstream() as upstream_url, inflight_process(upstream_url, output=log) as (proxy_url, pid):
            httpx.post(
                f"{proxy_url}/chat/completions",
                json={"model": MODEL, "messages": [{"role": "user", "content": "Say ok."}]},
                timeout=30,
            )
            for count in (int(n) for n in args.rounds.split(",")):
                one_round(proxy_url, upstream_url, pid, log, count, args)


if __name__ == "__main__":
    main()
