"""The `inflight` command: serve, count, compact."""

from __future__ import annotations

import argparse
import logging
import sys
from typing import Any

import uvicorn

from proxy.app import create_app
from proxy.config import ConfigError, Settings, load_settings


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


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="inflight", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)

    serve_cmd = commands.add_parser("serve", help="run the proxy")
    serve_cmd.add_argument("--config", help="YAML config file (default: built-in defaults)")
    serve_cmd.add_argument("--host")
    serve_cmd.add_argument("--port", type=int)
    serve_cmd.add_argument("--upstream", metavar="URL", help="upstream base URL, e.g. http://127.0.0.1:8080/v1")
    serve_cmd.set_defaults(run=serve)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.run(args))
    except ConfigError as exc:
        print(f"inflight: config error: {exc}", file=sys.stderr)
        return 2
