"""The real Gemini CLI's 30-step task against the fake Gemini API, directly and through inflight, with its cost.

    python -m benchmarks.gemini_cli [--window 45000] [--steps 30] [--lines 170] [--model gemini-2.5-pro]
        [--read 0.25] [--output 5]

Runs `gemini -p` (the program `.ci/run` installs under `.cache/agents/`, or `INFLIGHT_GEMINI`) against the
fake upstream's Gemini API, whose window the task outgrows about three times. The runs: straight to the
upstream with no window; with the window (Gemini CLI assumes 1,048,576 tokens, so its own compression never
starts, and it exits on the refusal); through inflight, learning the window from the refusal or told it, and
told it with `gemini.count_tokens: near`. Every request the upstream answers is billed in units of one
uncached input token (an implicit-cache read `--read`, as Google bills it about a quarter; no write premium;
an output token `--output`); a refusal costs nothing. Prints, per run, the steps finished, the requests the
upstream answered and refused, the signatures it verified, inflight's summaries, the counts asked, the share
of prompt tokens its implicit cache served, the cost and its ratio to the run with no window. Asserts nothing.
"""

from __future__ import annotations

import argparse

from benchmarks.harness import table
from inflight.app import create_app
from inflight.config import Prices, load_settings
from inflight.config.pricing import DEFAULT_FORMAT_PRICES
from inflight.http.server import uvicorn_options
from tests.agents.gemini_cli import gemini_binary, run_gemini
from tests.support.gemini import GeminiTaskAgent
from tests.support.responses import TASK_MARKER, last_step
from tests.support.servers import serve
from tests.support.upstream import UpstreamApp

PROMPT = f"Do the {TASK_MARKER}: run the steps one by one."
RUNS = (  # label, whether the window is enforced, how (direct, learned, told, counted)
    ("alone, no window", False, "direct"),
    ("alone", True, "direct"),
    ("inflight, learns the window", True, "learned"),
    ("inflight, told the window", True, "told"),
    ("inflight, told, count_tokens near thresholds", True, "counted"),
)


def run(
    binary: str, args: argparse.Namespace, *, windowed: bool, via: str, prices: Prices
) -> tuple[list[object], float]:
    """One run's row (its cost not yet compared) and its cost."""
    app = UpstreamApp(windows={args.model: args.window} if windowed else {})
    app.gemini.agent = GeminiTaskAgent(steps=args.steps, output_lines=args.lines)
    with serve(app) as url:
        if via == "direct":
            done = run_gemini(binary, url.removesuffix("/v1"), PROMPT, model=args.model)
        else:
            models = {args.model: {"context_window": args.window}} if via in ("told", "counted") else {}
            pricing = {"formats": {"gemini": {"cache_read": prices.cache_read, "output": prices.output}}}
            overrides = {
                "upstream": {"base_url": url},
                "upstreams": {"gemini": {"base_url": url.removesuffix("/v1")}},
                "models": models,
                "pricing": pricing,
            }
            if via == "counted":
                overrides["gemini"] = {"count_tokens": "near"}
            settings = load_settings(None, overrides=overrides)
            with serve(create_app(settings), **{**uvicorn_options(settings), "log_level": "warning"}) as proxy:
                done = run_gemini(binary, proxy, PROMPT, model=args.model)
    answered = app.gemini_requests()
    finished = last_step(answered[-1].body.decode(), args.steps) if answered else 0
    fake, bill = app.gemini, app.bill
    cost = bill.cost(prices)
    row: list[object] = [
        f"{finished}/{args.steps}" + (" FINISHED" if "FINISHED" in done.output else ""),
        bill.requests(),
        fake.refused,
        fake.signatures_seen,
        len(app.summaries),
        sum(1 for r in app.requests if r.path.endswith(":countTokens")),
        f"{bill.cached_share:.1%}",
        f"{cost / 1000:.0f}k",
    ]
    return row, cost


def arguments() -> argparse.ArgumentParser:
    """The command line (`tests/test_docs.py` checks each command the docs show against it)."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--window", type=int, default=45_000, help="the fake upstream's window (tokens)")
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--lines", type=int, default=170, help="lines each step's command prints")
    parser.add_argument("--model", default="gemini-2.5-pro")
    gemini = DEFAULT_FORMAT_PRICES["gemini"]
    parser.add_argument("--read", type=float, default=gemini.cache_read, help="an implicit-cache read's price")
    parser.add_argument("--output", type=float, default=gemini.output, help="an output token's price")
    return parser


def main() -> None:
    args = arguments().parse_args()
    binary = gemini_binary()
    if binary is None:
        raise SystemExit("Gemini CLI is not installed: npm install --prefix .cache/agents @google/gemini-cli")
    prices = Prices(cache_read=args.read, cache_write=1.0, output=args.output)
    rows, baseline = [], None
    for label, windowed, via in RUNS:
        row, cost = run(binary, args, windowed=windowed, via=via, prices=prices)
        baseline = cost if baseline is None else baseline  # the first run: no window
        rows.append([label, *row, f"{cost / baseline:.2f}x"])
    print(f"{args.model}, window {args.window}, {args.steps} steps of {args.lines} lines")
    print(f"prices per token: uncached input 1, implicit-cache read {prices.cache_read}, output {prices.output}")
    header = [
        "run",
        "steps",
        "billed requests",
        "refused",
        "signatures verified",
        "inflight's summaries",
        "counts asked",
    ]
    print(table(rows, [*header, "cached share", "cost", "vs no window"]))


if __name__ == "__main__":
    main()
