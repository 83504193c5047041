"""`GET /readyz`: 200 when the default upstream answers at all (a 401 too), 503 naming it and why when it does
not; one probe of the upstream stands for a few seconds, whatever the number of probes. `/healthz` is unchanged."""

from __future__ import annotations

import asyncio
import socket
from typing import Any

import httpx

from inflight.config import load_settings
from inflight.http.admin import Readiness
from inflight.upstream.client import UpstreamClient
from tests.conftest import ProxyFactory
from tests.support.servers import free_port, serve
from tests.support.upstream import UpstreamApp


def base(proxy_url: str) -> str:
    return proxy_url.removesuffix("/v1")


def test_ready_when_the_upstream_answers(upstream: tuple[UpstreamApp, str], proxy: str) -> None:
    answer = httpx.get(f"{base(proxy)}/readyz", timeout=10)
    assert answer.status_code == 200
    assert answer.json() == {"status": "ready", "upstream": upstream[1], "upstream_status": 200}
    assert httpx.get(f"{base(proxy)}/healthz", timeout=10).json() == {"status": "ok"}


def test_not_ready_names_the_upstream_and_why(start_proxy: ProxyFactory) -> None:
    closed = f"http://user:secret@127.0.0.1:{free_port()}/v1?api_key=sk-query"  # nothing listens there
    with start_proxy(closed) as proxy_url:
        answer = httpx.get(f"{base(proxy_url)}/readyz", timeout=10)
        alive = httpx.get(f"{base(proxy_url)}/healthz", timeout=10)
    assert answer.status_code == 503
    body = answer.json()
    assert body["status"] == "not_ready" and body["reason"] == "connection refused"
    assert body["upstream"].startswith("http://127.0.0.1:") and "secret" not in body["upstream"]
    assert "sk-query" not in body["upstream"]
    assert alive.status_code == 200  # liveness is not readiness


async def refuse(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] == "http":
        await send({"type": "http.response.start", "status": 401, "headers": [(b"content-type", b"text/plain")]})
        await send({"type": "http.response.body", "body": b"who are you"})


def test_any_http_answer_is_ready(start_proxy: ProxyFactory) -> None:
    with serve(refuse) as url, start_proxy(url + "/v1") as proxy_url:
        answer = httpx.get(f"{base(proxy_url)}/readyz", timeout=10)
    assert answer.status_code == 200 and answer.json()["upstream_status"] == 401


def client_for(url: str) -> UpstreamClient:
    return UpstreamClient(load_settings(None, overrides={"upstream": {"base_url": url}}).upstream)


def test_a_probe_stands_for_its_cache_time_and_probes_at_once_share_one() -> None:
    app = UpstreamApp()
    now = [0.0]

    async def run(readiness: Readiness) -> None:
        await asyncio.gather(*(readiness.probe() for _ in range(20)))  # a storm: one request upstream
        assert len(app.requests) == 1
        now[0] += 4.9
        assert (await readiness.probe()).answered == 200 and len(app.requests) == 1
        now[0] += 0.2  # past the 5 s: asked again
        assert (await readiness.probe()).answered == 200 and len(app.requests) == 2
        await readiness.upstream.aclose()

    with serve(app) as url:
        asyncio.run(run(Readiness(client_for(url + "/v1"), cache_s=5.0, clock=lambda: now[0])))
    assert {(r.method, r.path) for r in app.requests} == {("GET", "/v1/models")}


def test_an_upstream_that_never_answers_is_not_ready() -> None:
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen()  # connections are taken into the backlog, and never answered

        async def run() -> None:
            readiness = Readiness(client_for(f"http://127.0.0.1:{silent.getsockname()[1]}/v1"), timeout_s=0.2)
            found = await readiness.probe()
            await readiness.upstream.aclose()
            assert found.answered is None and found.reason == "no answer within 0.2 s"

        asyncio.run(run())
