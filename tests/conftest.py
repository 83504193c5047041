from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any

import pytest

from inflight.app import create_app
from inflight.config import load_settings
from inflight.http.server import uvicorn_options
from tests.support.servers import serve
from tests.support.upstream import UpstreamApp


@pytest.fixture
def upstream() -> Iterator[tuple[UpstreamApp, str]]:
    """A recording upstream on a loopback port: (app, base URL ending in /v1)."""
    app = UpstreamApp()
    with serve(app) as url:
        yield app, url + "/v1"


ProxyFactory = Callable[..., AbstractContextManager[str]]


@pytest.fixture
def start_proxy() -> ProxyFactory:
    """Start a proxy with config overrides (`formats`: the wire formats it serves, else the registered ones);
    yields its base URL ending in /v1."""

    @contextmanager
    def start(upstream_url: str, **overrides: Any) -> Iterator[str]:
        formats = overrides.pop("formats", None)
        overrides.setdefault("upstream", {})
        overrides["upstream"] = {"base_url": upstream_url, **overrides["upstream"]}
        settings = load_settings(None, overrides=overrides)
        # As `inflight serve` runs it (the bounded protocol, its timeouts), but quieter.
        with serve(
            create_app(settings, formats=formats), **{**uvicorn_options(settings), "log_level": "warning"}
        ) as url:
            yield url + "/v1"

    return start


@pytest.fixture
def proxy(upstream: tuple[UpstreamApp, str], start_proxy: ProxyFactory) -> Iterator[str]:
    with start_proxy(upstream[1]) as url:
        yield url
