"""Inbound keys: the proxy's upstream key is spent only by clients holding one of the proxy's keys."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import httpx
import openai
import orjson
import pytest

from inflight.config import ConfigError, load_settings
from inflight.http.access import OriginGuard, accepted, startup_problem
from tests.conftest import ProxyFactory
from tests.support.upstream import UpstreamApp

KEYS = {"access": {"keys": ["sk-proxy-client"], "admin_keys": ["sk-proxy-admin"]}, "upstream": {"api_key": "sk-up"}}
BODY = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}]}


def test_a_missing_or_wrong_key_is_refused_in_openais_shape(
    upstream: tuple[UpstreamApp, str], start_proxy: ProxyFactory
) -> None:
    app, url = upstream
    with start_proxy(url, **KEYS) as proxy_url:
        missing = httpx.post(f"{proxy_url}/chat/completions", json=BODY)
        wrong = httpx.post(f"{proxy_url}/chat/completions", json=BODY, headers={"authorization": "Bearer sk-up"})
        other = httpx.get(f"{proxy_url}/models", headers={"authorization": "Basic c2stcHJveHktY2xpZW50"})
    for response in (missing, wrong, other):
        assert response.status_code == 401
        assert response.json()["error"]["code"] == "invalid_api_key"
        assert set(response.json()["error"]) == {"message", "type", "param", "code"}
    assert app.requests == []


def test_a_client_key_is_replaced_by_the_upstream_key(
    upstream: tuple[UpstreamApp, str], start_proxy: ProxyFactory
) -> None:
    app, url = upstream
    with (
        start_proxy(url, **KEYS) as proxy_url,
        openai.OpenAI(base_url=proxy_url, api_key="sk-proxy-client", max_retries=0) as client,
    ):
        reply = client.chat.completions.create(model="gpt-4o-mini", messages=BODY["messages"])  # type: ignore[arg-type]
        assert [m.id for m in client.models.list()] == ["gpt-4o-mini"]
    assert reply.choices[0].message.content == "Hello from upstream."
    assert {r.headers["authorization"] for r in app.requests} == {"Bearer sk-up"}


def test_admin_routes_take_admin_keys_and_healthz_stays_open(
    upstream: tuple[UpstreamApp, str], start_proxy: ProxyFactory
) -> None:
    _, url = upstream
    with start_proxy(url, **KEYS) as proxy_url:
        base = proxy_url.removesuffix("/v1")
        as_client = httpx.get(f"{base}/inflight/stats", headers={"authorization": "Bearer sk-proxy-client"})
        as_admin = httpx.get(f"{base}/inflight/stats", headers={"authorization": "Bearer sk-proxy-admin"})
        health = httpx.get(f"{base}/healthz")
    assert as_client.status_code == 401 and as_admin.status_code == 200 and health.status_code == 200


def test_keys_are_compared_whole() -> None:
    keys = ("sk-proxy-client", "sk-other")
    assert accepted(b"sk-proxy-client", keys) and accepted(b"sk-other", keys)
    assert not accepted(b"sk-proxy", keys) and not accepted(b"sk-proxy-client2", keys)
    assert not accepted(None, keys) and not accepted(b"", ("",))


def test_keys_without_an_upstream_key_are_a_config_error() -> None:
    with pytest.raises(ConfigError, match=r"upstream\.api_key"):
        load_settings(None, overrides={"access": {"keys": ["k"]}})


def test_empty_keys_from_unset_variables_are_dropped() -> None:
    settings = load_settings(None, overrides={"access": {"keys": ["", "k"]}, "upstream": {"api_key": "u"}})
    assert settings.access.keys == ("k",)


@pytest.mark.parametrize(
    ("host", "access", "refused"),
    [
        ("0.0.0.0", {}, True),
        ("::", {}, True),
        ("10.1.2.3", {}, True),
        ("127.0.0.1", {}, False),
        ("localhost", {}, False),
        ("0.0.0.0", {"keys": ["k"]}, False),
        ("0.0.0.0", {"allow_anonymous": True}, False),
    ],
)
def test_an_injected_key_on_a_public_address_needs_keys_or_consent(
    host: str, access: dict[str, object], refused: bool
) -> None:
    overrides = {"listen": {"host": host}, "upstream": {"api_key": "sk-up"}, "access": access}
    problem = startup_problem(load_settings(None, overrides=overrides))
    assert (problem is not None) == refused
    no_key = load_settings(None, overrides={"listen": {"host": host}})
    assert startup_problem(no_key) is None  # forwarding each client's own key spends nobody else's


@pytest.mark.parametrize(
    ("host", "access", "refused"),
    [
        ("0.0.0.0", {}, True),
        ("127.0.0.1", {}, False),
        ("0.0.0.0", {"admin_keys": ["a"]}, False),
        ("0.0.0.0", {"keys": ["k"]}, True),  # a client key is a tenant's, never an admin's
        ("0.0.0.0", {"keys": ["k"], "admin_keys": []}, True),  # explicitly none
        ("0.0.0.0", {"allow_anonymous": True}, False),
    ],
)
def test_an_archive_on_a_public_address_needs_admin_keys_or_consent(
    host: str, access: dict[str, object], refused: bool
) -> None:
    upstream = {"api_key": "sk-up"} if access.get("keys") else {}
    overrides = {"listen": {"host": host}, "archive": {"enabled": True}, "access": access, "upstream": upstream}
    problem = startup_problem(load_settings(None, overrides=overrides))
    assert (problem is not None) == refused
    assert problem is None or "archive.enabled" in problem


@pytest.mark.parametrize(
    ("overrides", "named"),
    [
        ({"upstreams": {"messages": {"api_key": "sk-ant"}}}, "upstreams.messages.api_key"),
        ({"compaction": {"summarize": {"api_key": "sk-sum"}}}, "compaction.summarize.api_key"),
        (
            {"compaction": {"summarize": {"base_url": "https://user:pw@summarizer.example/v1"}}},
            "compaction.summarize.base_url's user:password",
        ),
        (
            {"models": {"m*": {"compaction": {"summarize": {"api_key": "sk"}}}}},
            "models.m*.compaction.summarize.api_key",
        ),
        ({"upstream": {"base_url": "https://user:pw@gateway.example/v1"}}, "upstream.base_url's user:password"),
    ],
    ids=["upstreams", "summarizer", "summarizer-url", "model-summarizer", "upstream-url"],
)
def test_every_key_the_proxy_holds_needs_keys_on_a_public_address(overrides: dict[str, object], named: str) -> None:
    problem = startup_problem(load_settings(None, overrides={"listen": {"host": "0.0.0.0"}, **overrides}))
    assert problem is not None and named in problem and "access.keys" in problem
    assert startup_problem(load_settings(None, overrides={"listen": {"host": "127.0.0.1"}, **overrides})) is None


def test_client_keys_never_open_the_admin_paths(upstream: tuple[UpstreamApp, str], start_proxy: ProxyFactory) -> None:
    """With `access.keys` and no `access.admin_keys`, a tenant's key reads no archive, stats or metrics."""
    _, url = upstream
    config = {"access": {"keys": ["sk-tenant"]}, "upstream": {"api_key": "sk-up"}, "archive": {"enabled": True}}
    with start_proxy(url, **config) as proxy_url:
        base = proxy_url.removesuffix("/v1")
        bearer = {"authorization": "Bearer sk-tenant"}
        answers = [
            httpx.get(f"{base}{path}", headers=bearer)
            for path in ("/inflight/conversations", "/inflight/stats", "/metrics")
        ]
        chat = httpx.post(f"{proxy_url}/chat/completions", json=BODY, headers=bearer)
        viewer = httpx.get(f"{base}/inflight/ui")
    for answer in answers:
        assert answer.status_code == 403
        assert (
            answer.json()["error"]["type"] == "permission_error"
            and "access.admin_keys" in answer.json()["error"]["message"]
        )
    assert chat.status_code == 200 and viewer.status_code == 200  # the page holds no data


def test_serve_refuses_to_start_as_an_open_relay(tmp_path: Path) -> None:
    config = tmp_path / "inflight.yaml"
    config.write_text("upstream: {api_key: sk-up}\n")
    command = [sys.executable, "-m", "inflight", "serve", "--config", str(config), "--host", "0.0.0.0", "--port", "0"]
    result = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert "access.keys" in result.stderr and "sk-up" not in result.stderr


def test_a_held_key_answers_only_its_own_address_and_no_other_origins_page(
    upstream: tuple[UpstreamApp, str], start_proxy: ProxyFactory
) -> None:
    """DNS rebinding: a page whose name now points at 127.0.0.1 posts `text/plain` (no preflight) to the
    proxy, which holds the operator's key and asks for none. Refused (403) before anything runs; our own
    names and allowed origins still work, as does every route behind the same guard."""
    app, url = upstream
    config = {"upstream": {"api_key": "sk-operator"}, "access": {"cors_origins": ["http://localhost:3000"]}}
    body = orjson.dumps(BODY)
    with start_proxy(url, **config) as proxy_url:
        port = proxy_url.split(":")[-1].removesuffix("/v1")

        def post(**headers: str) -> httpx.Response:
            return httpx.post(
                f"{proxy_url}/chat/completions", content=body, headers={"content-type": "text/plain", **headers}
            )

        rebound = post(host=f"rebind.example:{port}", origin=f"http://rebind.example:{port}")
        foreign = post(origin="https://evil.example")
        sandboxed = post(origin="null")
        health = httpx.get(f"{proxy_url.removesuffix('/v1')}/healthz", headers={"host": f"rebind.example:{port}"})
        own = post()
        by_name = post(host=f"localhost:{port}", origin=f"http://localhost:{port}")
        allowed = post(origin="http://localhost:3000")
    for refused in (rebound, foreign, sandboxed, health):
        assert refused.status_code == 403 and refused.json()["error"]["type"] == "permission_error"
    assert (own.status_code, by_name.status_code, allowed.status_code) == (200, 200, 200)
    assert len(app.chat_requests()) == 3  # the refused ones reached nothing
    assert {r.headers["authorization"] for r in app.chat_requests()} == {"Bearer sk-operator"}


def test_with_keys_or_without_a_held_key_other_hosts_are_served(
    upstream: tuple[UpstreamApp, str], start_proxy: ProxyFactory
) -> None:
    _, url = upstream
    for config, headers in (({}, {}), (KEYS, {"authorization": "Bearer sk-proxy-client"})):
        with start_proxy(url, **config) as proxy_url:
            port = proxy_url.split(":")[-1].removesuffix("/v1")
            response = httpx.post(
                f"{proxy_url}/chat/completions", json=BODY, headers={"host": f"inflight.internal:{port}", **headers}
            )
        assert response.status_code == 200


def test_listening_everywhere_a_pages_own_origin_must_still_be_one_of_our_names() -> None:
    """With `allow_anonymous` on 0.0.0.0 any Host is ours, but a rebinding page's origin (which matches
    its Host) is still not: only our names and `access.cors_origins` may send from a browser."""
    settings = load_settings(
        None,
        overrides={
            "listen": {"host": "0.0.0.0"},
            "upstream": {"api_key": "sk-operator"},
            "access": {"allow_anonymous": True, "cors_origins": ["https://app.example"]},
        },
    )
    guard = OriginGuard(lambda scope, receive, send: None, settings)  # type: ignore[arg-type,return-value]

    def problem(host: str, origin: str | None = None) -> str | None:
        headers = [(b"host", host.encode())] + ([(b"origin", origin.encode())] if origin else [])
        return guard.problem({"type": "http", "headers": headers, "path": "/v1/chat/completions"})

    assert problem("rebind.example:8787", "http://rebind.example:8787") is not None
    assert problem("inflight.internal:8787") is None  # no Origin: not a browser's cross-origin request
    assert problem("127.0.0.1:8787", "http://127.0.0.1:8787") is None
    assert problem("inflight.internal:8787", "https://app.example") is None
