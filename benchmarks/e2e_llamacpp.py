"""The agent loop of the e2e test through inflight against a real llama.cpp server, turn by turn.

    python -m benchmarks.e2e_llamacpp [--learn]

Needs llama-cpp-python[server] and the SmolLM2 GGUF (`.ci/run` fetches both). Prints, per turn:
the server's own prompt tokens (usage), inflight's estimate and how far it was from them, the
calibration learned once the turn's usage was read (`/inflight/stats`: upstream tokens per token
of ours, for message text and for the fixed part), the action taken, the latency, and the server's
prompt-processing time for that turn (from its log: llama.cpp reuses its KV cache for an unchanged
prefix, so turns that replay a stored record should process far fewer prompt tokens). `--learn`
leaves the window out of the config, so inflight learns it from the first refusal.
"""

from __future__ import annotations

import argparse
import re
import statistics
import tempfile
from pathlib import Path

import httpx

from benchmarks.harness import table
from tests.e2e.agent import N_CTX, AgentLoop, llama_server, tool_outputs
from tests.support.processes import inflight
from tests.support.servers import free_port

PROMPT_EVAL = re.compile(r"prompt eval time =\s+([\d.]+) ms /\s+(\d+) tokens")


def arguments() -> argparse.ArgumentParser:
    """The command line (`tests/test_docs.py` checks each command the docs show against it)."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--learn", action="store_true", help="leave the window out of the config")
    return parser


def main() -> None:
    args = arguments().parse_args()
    outputs = tool_outputs()
    log = Path(tempfile.mkdtemp()) / "server.log"
    config = "" if args.learn else f"models: {{smollm2: {{context_window: {N_CTX}}}}}\n"
    with llama_server(free_port(), log) as server, inflight(server.url, config) as proxied:
        timings: list[tuple[float, int]] = []
        seen = 0

        def server_prompt() -> tuple[float, int]:
            nonlocal seen
            found = PROMPT_EVAL.findall(log.read_text(errors="replace"))
            new, seen = found[seen:], len(found)
            return sum(float(ms) for ms, _ in new), sum(int(n) for _, n in new)

        turns = []
        learned: list[dict[str, float]] = []
        stats = proxied.removesuffix("/v1") + "/inflight/stats"
        with AgentLoop(proxied) as loop:
            for number, (tool, path, output) in enumerate(outputs):
                turns.append(loop.step(number, tool, path, output))
                timings.append(server_prompt())
                learned.append(httpx.get(stats).json()["calibration"].get("smollm2", {}))
    rows = []
    for turn, (ms, evaluated), calibration in zip(turns, timings, learned, strict=True):
        estimate = turn.headers.get("x-inflight-tokens-after")
        rows.append(
            [
                turn.number,
                "stream" if turn.stream else "json",
                turn.prompt_tokens if turn.prompt_tokens is not None else "-",
                estimate or "-",
                _error(estimate, turn.prompt_tokens),
                calibration.get("ratio", "-"),
                calibration.get("fixed_ratio", "-"),
                turn.headers.get("x-inflight-actions", turn.error or "-"),
                f"{turn.seconds * 1000:.0f}",
                evaluated,
                f"{ms:.0f}",
            ]
        )
    header = ["turn", "mode", "server prompt tokens", "inflight estimate", "error", "ratio", "fixed ratio", "actions"]
    header.append("latency ms")
    print(table(rows, [*header, "tokens evaluated", "server prompt ms"]))
    hits = [t[1] for t, turn in zip(timings, turns, strict=True) if _is_hit(turn.headers.get("x-inflight-actions", ""))]
    fresh = [
        t[1]
        for t, turn in zip(timings, turns, strict=True)
        if "summarize" in turn.headers.get("x-inflight-actions", "")
    ]
    if hits and fresh:
        print(
            f"prompt tokens evaluated by the server: record-hit turns median {statistics.median(hits):.0f}, "
            f"freshly compacted turns median {statistics.median(fresh):.0f}"
        )


def _error(estimate: str | None, actual: int | None) -> str:
    """How far the estimate the turn was sent with was from the server's count (+: over)."""
    if estimate is None or not actual:
        return "-"
    return f"{(int(estimate) - actual) / actual:+.1%}"


def _is_hit(actions: str) -> bool:
    return "summary-cached" in actions and "summarize" not in actions


if __name__ == "__main__":
    main()
