"""The `inflight` command: serve, count, compact."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
from typing import Any

import httpx
import orjson
import uvicorn

from proxy.app import create_app
from proxy.body import parse_object
from proxy.compaction import Budget, Compactor, Conversation, Outcome, SummaryJob
from proxy.config import ConfigError, Settings, load_settings
from proxy.errors import BadRequest
from proxy.models import ContextRegistry, budget_for
from proxy.summarizer import Summarizer
from proxy.tokens import TokenCounter, choose_encoding

GIL_SWITCH_INTERVAL_S = 0.0005


class CommandError(Exception):
    """A problem with a command's input, printed as one line."""


def _load(args: argparse.Namespace, overrides: dict[str, Any] | None = None) -> Settings:
    return load_settings(args.config, overrides=overrides)


def serve(args: argparse.Namespace) -> int:
    overrides: dict[str, Any] = {}
    if args.host is not None:
        overrides.setdefault("listen", {})["host"] = args.host
    if args.port is not None:
        overrides.setdefault("listen", {})["port"] = args.port
    if args.upstream is not None:
        overrides.setdefault("upstream", {})["base_url"] = args.upstream
    settings = _load(args, overrides)
    logging.basicConfig(
        level=settings.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr
    )
    logging.getLogger("inflight").info(
        "inflight listening on http://%s:%d/v1 -> %s",
        settings.listen.host,
        settings.listen.port,
        settings.upstream.base_url,
    )
    # Counting runs in worker threads; with the default 5 ms GIL switch interval, a counting thread
    # could hold up the event loop (and every small request) for that long.
    sys.setswitchinterval(GIL_SWITCH_INTERVAL_S)
    uvicorn.run(
        create_app(settings),
        host=settings.listen.host,
        port=settings.listen.port,
        log_level=settings.log_level,
        access_log=False,
        # The upstream's own Date/Server headers are relayed; uvicorn must not add a second pair.
        server_header=False,
        date_header=False,
        lifespan="on",
    )
    return 0


def read_request(path: str) -> dict[str, Any]:
    try:
        data = sys.stdin.buffer.read() if path == "-" else open(path, "rb").read()
    except OSError as exc:
        raise CommandError(f"cannot read {path}: {exc.strerror}") from exc
    try:
        return parse_object(data)
    except BadRequest as exc:
        raise CommandError(f"{path}: {exc.message}") from exc


def count(args: argparse.Namespace) -> int:
    """Offline: the window comes from the config, then the built-in table (no discovery)."""
    settings = _load(args)
    payload = read_request(args.file)
    model = args.model or payload.get("model")
    if not isinstance(model, str):
        raise CommandError(f"{args.file} names no model; pass --model")
    choice = choose_encoding(model, settings.encoding_override(model))
    tokens = TokenCounter().count_request(payload, choice.name).total
    limits = ContextRegistry(settings).resolve(model)
    reserve_tokens = settings.compaction_for(model).reserve_tokens
    budget = budget_for(payload, reserve_tokens=reserve_tokens, context_window=limits.context_window)
    if args.json:
        print(
            orjson.dumps(
                {"model": model, "prompt_tokens": tokens, "context_window": limits.context_window, "budget": budget}
            ).decode()
        )
        return 0
    kind = "exact" if choice.exact else "estimate"
    print(
        f"{model}: {tokens:,} prompt tokens ({choice.name}, {kind}); window {limits.context_window:,} "
        f"({limits.source}); budget {budget:,}; {100 * tokens / max(budget, 1):.1f}% of budget"
    )
    return 0


def compact(args: argparse.Namespace) -> int:
    """Print the rewritten body as the proxy would send it (forced), and a one-line report on stderr."""
    settings = _load(args)
    payload = read_request(args.file)
    model = args.model or payload.get("model")
    if not isinstance(model, str) or not isinstance(payload.get("messages"), list):
        raise CommandError(f"{args.file} needs a model (or --model) and a messages list")
    outcome, budget = asyncio.run(_compact(settings, payload, model, use_llm=not args.no_llm))
    if outcome is None:
        print(orjson.dumps(payload).decode())
        print(f"inflight: fits ({budget:,}-token budget); nothing to do", file=sys.stderr)
        return 0
    print(orjson.dumps({**payload, "messages": outcome.messages}).decode())
    print(
        f"inflight: {outcome.tokens_before:,} -> {outcome.tokens_after:,} tokens (budget {budget:,}); "
        f"actions {','.join(outcome.actions)}; {outcome.messages_replaced} messages summarized; "
        f"{outcome.summarizer_calls} summarizer calls" + "".join(f"; {note}" for note in outcome.notes),
        file=sys.stderr,
    )
    return 0 if outcome.fits else 1


async def _compact(
    settings: Settings, payload: dict[str, Any], model: str, *, use_llm: bool
) -> tuple[Outcome | None, int]:
    counter = TokenCounter()
    choice = choose_encoding(model, settings.encoding_override(model))
    count = counter.count_request(payload, choice.name)
    limits = ContextRegistry(settings).resolve(model)
    options = settings.compaction_for(model)
    budget = budget_for(payload, reserve_tokens=options.reserve_tokens, context_window=limits.context_window)
    encoding = counter.encoding(choice.name)
    async with httpx.AsyncClient(trust_env=False) as client:
        summarizer = Summarizer(
            client,
            base_url=options.summarize.base_url or settings.upstream.base_url,
            timeout_s=options.summarize.timeout_s,
        )
        key = options.summarize.api_key or settings.upstream.api_key or os.environ.get("OPENAI_API_KEY", "")
        models = [options.summarize.model or model, *options.summarize.fallback_models]

        async def summarize(job: SummaryJob) -> str:
            return await summarizer(job, models=models, authorization=f"Bearer {key}" if key else None)

        compactor = Compactor(
            options,
            count_message=lambda message: counter.count_message(message, encoding),
            count_text=lambda text: len(encoding.encode_ordinary(text)),
            summarize=summarize if use_llm else None,
            summarizer_input_tokens=budget,
        )
        conversation = Conversation(payload["messages"], count.messages, count.digests, count.fixed)
        outcome = await compactor.run(conversation, budget=Budget.of(budget, options), record=None, force=True)
    return outcome, budget


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="inflight", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)

    serve_cmd = commands.add_parser("serve", help="run the proxy")
    serve_cmd.add_argument("--config", help="YAML config file (default: built-in defaults)")
    serve_cmd.add_argument("--host")
    serve_cmd.add_argument("--port", type=int)
    serve_cmd.add_argument("--upstream", metavar="URL", help="upstream base URL, e.g. http://127.0.0.1:8080/v1")
    serve_cmd.set_defaults(run=serve)

    count_cmd = commands.add_parser("count", help="count a chat-completion request body's prompt tokens")
    count_cmd.add_argument("file", help="request body JSON file (- for stdin)")
    count_cmd.add_argument("--model", help="count as this model (default: the body's model)")
    count_cmd.add_argument("--config", help="YAML config file (for models: and compaction.reserve_tokens)")
    count_cmd.add_argument("--json", action="store_true", help="print a JSON object instead of a sentence")
    count_cmd.set_defaults(run=count)

    compact_cmd = commands.add_parser("compact", help="print a request body compacted as the proxy would send it")
    compact_cmd.add_argument("file", help="request body JSON file (- for stdin)")
    compact_cmd.add_argument("--config", help="YAML config file")
    compact_cmd.add_argument("--model", help="compact as this model (default: the body's model)")
    compact_cmd.add_argument("--no-llm", action="store_true", help="use the local digest instead of a summarizer call")
    compact_cmd.set_defaults(run=compact)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.run(args))
    except ConfigError as exc:
        print(f"inflight: config error: {exc}", file=sys.stderr)
        return 2
    except CommandError as exc:
        print(f"inflight: {exc}", file=sys.stderr)
        return 1
