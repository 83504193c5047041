"""Does compaction keep agents alive, cheaply and stably? Replays the shared traces turn by turn.

    python benchmarks/compaction.py [--window 4000 8000] [--hits 30] [--verbose]

A loopback upstream enforces a small context window (counting with o200k_base, refusing like
OpenAI) and answers summarizer calls. Each trace is replayed turn by turn (request k is the first
messages up to the k-th assistant reply), direct and through inflight. Then a 128k-token
conversation measures the latency inflight adds on turns served from the compaction record.
Prints tables; asserts nothing.

"prefix stable": the share of turns, after the first compaction, whose upstream request begins
with the whole of the previous turn's upstream request (what a prompt cache needs to hit).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import httpx  # noqa: E402
import orjson  # noqa: E402
from conversations import grow, load_traces  # noqa: E402
from harness import free_port, inflight, median, percentile, process, read_body, table  # noqa: E402

from proxy.tokens import TokenCounter  # noqa: E402

SMALL_MODEL = "gpt-4o-small-window"


def make_upstream(window: int) -> Any:
    counter = TokenCounter()
    stats: dict[str, Any] = {"summaries": 0}
    last: dict[str, Any] = {"messages": []}

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        body = await read_body(receive)
        status, reply = 200, {}
        if scope["path"] == "/stats":
            reply = stats
        elif scope["path"] == "/last":
            reply = last
        elif scope["path"].endswith("/chat/completions"):
            payload = orjson.loads(body)
            tokens = counter.count_request(payload, "o200k_base").total
            first = payload["messages"][0].get("content") or ""
            text = "ok"
            if isinstance(first, str) and first.startswith("You compact the history"):
                stats["summaries"] += 1
                text = "## Original task\nFix the issue.\n## Progress and decisions\nReproduced; edited fields.py."
            else:
                last["messages"] = payload["messages"]
            if payload["model"] == SMALL_MODEL and tokens > window:
                status = 400
                message_text = (
                    f"This model's maximum context length is {window} tokens. However, your messages resulted in "
                    f"{tokens} tokens. Please reduce the length of the messages."
                )
                error = {"message": message_text, "type": "invalid_request_error", "param": "messages"}
                reply = {"error": {**error, "code": "context_length_exceeded"}}
            if status == 200 and not reply:
                message = {"role": "assistant", "content": text}
                usage = {"prompt_tokens": tokens, "completion_tokens": 1, "total_tokens": tokens + 1}
                reply = {"id": "c", "object": "chat.completion", "model": payload["model"], "usage": usage}
                reply["choices"] = [{"index": 0, "message": message, "finish_reason": "stop"}]
        data = orjson.dumps(reply)
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode())]
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": data})

    return app


def replay_requests(messages: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """Request k: everything before the k-th assistant reply (the first two are the system prompt and task)."""
    return [messages[:k] for k in range(2, len(messages)) if messages[k]["role"] == "assistant"]


def replay(name: str, body: dict[str, Any], direct: str, proxied: str, client: httpx.Client) -> list[object]:
    counter = TokenCounter()
    fail_direct = fail_proxy = hits = stable = after_first = 0
    tokens_direct = tokens_proxy = 0
    summaries_before = client.get(direct.removesuffix("/v1") + "/stats").json()["summaries"]
    previous: list[Any] | None = None
    session = f"{name}-{time.time()}"
    for messages in replay_requests(body["messages"]):
        request = {**body, "model": SMALL_MODEL, "messages": messages}
        direct_response = client.post(f"{direct}/chat/completions", json=request)
        fail_direct += direct_response.status_code != 200
        tokens_direct += counter.count_request(request, "o200k_base").total
        response = client.post(f"{proxied}/chat/completions", json=request, headers={"x-inflight-session": session})
        fail_proxy += response.status_code != 200
        if response.status_code != 200:
            print(f"  {name} turn {len(messages)}: {response.status_code} {response.text[:300]}", file=sys.stderr)
        tokens_proxy += int(response.headers.get("x-inflight-tokens-after", 0))
        actions = response.headers.get("x-inflight-actions", "none").split(",")
        sent = client.get(direct.removesuffix("/v1") + "/last").json()["messages"]
        if previous is not None:
            after_first += 1
            stable += sent[: len(previous)] == previous
        if "--verbose" in sys.argv:
            same = previous is not None and sent[: len(previous)] == previous
            before, after = (
                response.headers.get("x-inflight-tokens-before"),
                response.headers.get("x-inflight-tokens-after"),
            )
            print(
                f"  {name} turn {len(messages)}: {before}->{after} {','.join(actions)} stable={same}", file=sys.stderr
            )
        if (
            actions != ["none"]
            and not {"summarize", "fallback", "mask", "truncate"} & set(actions[1:])
            and ("summary-cached" in actions or previous is not None)
        ):
            hits += 1
        if actions != ["none"] or previous is not None:
            previous = sent
    summaries = client.get(direct.removesuffix("/v1") + "/stats").json()["summaries"] - summaries_before
    stability = f"{100 * stable / after_first:.0f}%" if after_first else "-"
    turns = len(replay_requests(body["messages"]))
    return [name, turns, fail_direct, fail_proxy, f"{tokens_direct:,}", f"{tokens_proxy:,}", summaries, hits, stability]


def record_hit_latency(direct: str, proxied: str, client: httpx.Client, hits: int) -> list[list[object]]:
    body = grow(128_000)
    body["model"] = "gpt-4o"
    headers = {"x-inflight-session": f"latency-{time.time()}"}
    client.post(f"{proxied}/chat/completions", json=body, headers=headers)  # the compaction itself
    added: list[float] = []
    for i in range(hits):
        body["messages"].append({"role": "user", "content": f"Continue with step {i}."})
        data = orjson.dumps(body)
        start = time.perf_counter()
        client.post(f"{direct}/chat/completions", content=data, headers={"content-type": "application/json"})
        direct_ms = (time.perf_counter() - start) * 1000
        start = time.perf_counter()
        response = client.post(
            f"{proxied}/chat/completions", content=data, headers={**headers, "content-type": "application/json"}
        )
        proxy_ms = (time.perf_counter() - start) * 1000
        actions = response.headers["x-inflight-actions"].split(",")
        assert "summarize" not in actions and "none" not in actions, response.headers  # served from the record
        added.append(proxy_ms - direct_ms)
    return [["128k-token record hits", hits, f"{median(added):+.2f}", f"{percentile(added, 99):+.2f}"]]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--window", type=int, nargs="+", default=[4000, 8000], help="the small upstream's windows")
    parser.add_argument("--hits", type=int, default=30, help="record-hit turns to time at 128k tokens")
    parser.add_argument("--verbose", action="store_true", help="print each turn's actions")
    parser.add_argument("--serve-upstream", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_upstream:
        import uvicorn

        uvicorn.run(make_upstream(args.window[0]), port=args.serve_upstream, log_level="warning", access_log=False)
        return
    for number, window in enumerate(args.window):
        port = free_port()
        config = f'models: {{"{SMALL_MODEL}": {{context_window: {window}}}, "gpt-4o": {{context_window: 100000}}}}\n'
        command = [sys.executable, __file__, "--serve-upstream", str(port), "--window", str(window)]
        with process(command, port), httpx.Client(timeout=60) as client:
            direct = f"http://127.0.0.1:{port}/v1"
            with inflight(direct, config) as proxied:
                rows = [replay(name, body, direct, proxied, client) for name, body in load_traces().items()]
                header = ["trace", "turns", "fail direct", "fail inflight", "tokens direct", "tokens inflight"]
                print(f"context window {window:,} tokens")
                print(table(rows, [*header, "summarizer calls", "record hits", "prefix stable"]))
                print()
                if number == len(args.window) - 1:
                    latency = record_hit_latency(direct, proxied, client, args.hits)
                    print(table(latency, ["turns", "n", "added p50 ms", "added p99 ms"]))


if __name__ == "__main__":
    main()
