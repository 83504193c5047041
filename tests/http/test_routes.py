"""Routes, credentials, error shapes and the metrics' route labels come from the registered wire formats.

A throwaway format registered in a test app beside the real ones is served with nothing else written for
it: its model in the URL (as Gemini's API has it), its key in a header of its own, its own error shape,
the rest of its API forwarded, and its routes named in `/metrics`.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import orjson
import pytest

from inflight.formats import UNROUTED, ChatCompletions, CoreRequest, FormatSpec, Route, Target, registered
from inflight.formats.seam import data_event
from tests.conftest import ProxyFactory
from tests.http.test_metrics import KEYS, scrape, scrape_when
from tests.support.servers import read_body, serve
from tests.support.upstream import UpstreamApp

GENERATE = "/v1beta/models/{model}:generate"
ADMIN = {"authorization": "Bearer sk-proxy-admin"}
MESSAGES = [{"role": "user", "content": "Say hello."}]


class StatusErrors:
    """An error shape unlike OpenAI's and Anthropic's: `{"error": {"message", "status"}}`."""

    def body(self, message: str, *, error_type: str, param: str | None, code: str | None) -> bytes:
        return orjson.dumps({"error": {"message": message, "status": (code or error_type).upper()}})

    def event(self, body: bytes) -> bytes:
        return data_event(body)


class UrlModel(ChatCompletions):
    """Chat Completions' body under a path that names the model; the key in `x-test-key`."""

    spec = FormatSpec(
        name="url_model",
        routes=(Route(GENERATE),),
        errors=StatusErrors(),
        credentials=(b"x-test-key",),
        forwarded=("/v1beta/{path:path}",),
    )

    def read(self, payload: dict[str, Any], target: Target = UNROUTED, *, tenant: str = "") -> CoreRequest | None:
        model = target.params.get("model")
        return super().read({**payload, "model": model}, target, tenant=tenant) if model is not None else None


@dataclass
class FakeUrlModel:
    """The format's fake upstream: records each request, answers a completion (its prompt counted as 9)."""

    seen: list[tuple[str, str, dict[str, str], bytes]] = field(default_factory=list)

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        body = await read_body(receive)
        headers = {name.decode(): value.decode() for name, value in scope["headers"]}
        self.seen.append((scope["method"], scope["raw_path"].decode(), headers, body))
        answer = {"choices": [{"message": {"role": "assistant", "content": "Hello."}}], "usage": {"prompt_tokens": 9}}
        reply = orjson.dumps(answer if scope["method"] == "POST" else {"models": []})
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/json")]})
        await send({"type": "http.response.body", "body": reply})


@pytest.fixture
def fake() -> Iterator[tuple[FakeUrlModel, str]]:
    """The fake at a base URL without `/v1`: the format's paths reach it as the client sent them."""
    app = FakeUrlModel()
    with serve(app) as url:
        yield app, url


def test_a_registered_format_is_routed_with_its_model_from_the_path_and_its_key_forwarded(
    fake: tuple[FakeUrlModel, str], start_proxy: ProxyFactory
) -> None:
    app, url = fake
    window = {"models": {"m1": {"context_window": 12_345}}}
    with start_proxy(url, formats=[*registered(), UrlModel()], **window) as proxy_url:
        base = proxy_url.removesuffix("/v1")
        reply = httpx.post(
            f"{base}/v1beta/models/m1:generate", json={"messages": MESSAGES}, headers={"x-test-key": "k"}
        )
        listed = httpx.get(f"{base}/v1beta/models", headers={"x-test-key": "k"})
        metrics = scrape_when(
            base, lambda m: m.get("inflight_requests_total", route="/v1beta/{path}", status="200") > 0
        )
    assert reply.status_code == listed.status_code == 200
    assert reply.headers["x-inflight-context-window"] == "12345"  # counted for m1, the model its path names
    [(method, path, headers, body), (_, listed_path, _, _)] = app.seen
    assert (method, path, listed_path) == ("POST", "/v1beta/models/m1:generate", "/v1beta/models")
    assert headers["x-test-key"] == "k" and orjson.loads(body) == {"messages": MESSAGES}
    assert metrics.get("inflight_requests_total", route=GENERATE, status="200") == 1


def test_a_registered_formats_key_header_is_replaced_and_its_refusals_take_its_shape(
    fake: tuple[FakeUrlModel, str], start_proxy: ProxyFactory
) -> None:
    app, url = fake
    with start_proxy(url, formats=[*registered(), UrlModel()], **KEYS) as proxy_url:
        base = proxy_url.removesuffix("/v1")
        path = f"{base}/v1beta/models/m1:generate"
        missing = httpx.post(path, json={"messages": MESSAGES})
        own_header = httpx.post(path, json={"messages": MESSAGES}, headers={"x-test-key": "sk-proxy-client"})
        bearer = httpx.post(path, json={"messages": MESSAGES}, headers={"authorization": "Bearer sk-proxy-client"})
        metrics = scrape(base, **ADMIN)
    assert missing.status_code == 401 and own_header.status_code == bearer.status_code == 200
    assert missing.json()["error"]["status"] == "INVALID_API_KEY" and "'x-test-key: <key>'" in missing.text
    # The client's key, in any format's header, is the proxy's to check: the upstream gets the proxy's own
    # (model discovery included), in the format's header.
    for _, _, headers, _ in app.seen:
        assert headers["x-test-key"] == "sk-up" and "authorization" not in headers and "x-api-key" not in headers
    assert [path for method, path, _, _ in app.seen if method == "POST"] == ["/v1beta/models/m1:generate"] * 2
    assert metrics.get("inflight_requests_total", route=GENERATE, status="401") == 1


def test_refused_requests_are_counted_by_their_routes_label_never_the_raw_path(
    upstream: tuple[UpstreamApp, str], start_proxy: ProxyFactory
) -> None:
    _, url = upstream
    paths = {
        "/v1/chat/completions": "/v1/chat/completions",
        "/v1/models/gpt-4o": "/v1/{path}",
        "/v1/messages/count_tokens": "/v1/messages/{path}",
        "/inflight/conversations/abc": "/inflight/conversations/{id}",
        "/metrics": "/metrics",
        "/wp-admin/login.php": "other",
    }
    with start_proxy(url, **KEYS) as proxy_url:
        base = proxy_url.removesuffix("/v1")
        refused = {path: httpx.post(f"{base}{path}", json={}) for path in paths}
        metrics = scrape(base, **ADMIN)
    assert {response.status_code for response in refused.values()} == {401}
    assert refused["/v1/messages/count_tokens"].json()["type"] == "error"  # Anthropic's shape: its format's path
    assert refused["/v1/models/gpt-4o"].json()["error"]["code"] == "invalid_api_key"  # OpenAI's
    for label in paths.values():
        assert metrics.get("inflight_requests_total", route=label, status="401") == 1, label
    assert not any(path in metrics.label_values() for path in paths if path != paths[path])
