"""Credentials in upstream.base_url: sent as Basic auth, and nowhere else (Host, errors, the log)."""

from __future__ import annotations

import base64
import logging

import httpx
import pytest

from inflight.config import ConfigError, load_settings
from tests.conftest import ProxyFactory
from tests.support.logs import log_lines
from tests.support.servers import free_port
from tests.support.upstream import UpstreamApp

SECRET = "s3cr3t-pa55"


def test_userinfo_becomes_basic_auth_and_leaves_the_host_alone(
    upstream: tuple[UpstreamApp, str], start_proxy: ProxyFactory, caplog: pytest.LogCaptureFixture
) -> None:
    app, url = upstream
    caplog.set_level(logging.DEBUG, logger="inflight")
    with_credentials = url.replace("http://", f"http://gateway:{SECRET}@")
    with start_proxy(with_credentials) as proxy_url:
        body = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}]}
        response = httpx.post(f"{proxy_url}/chat/completions", json=body, headers={"authorization": "Bearer sk-c"})
        log_lines(caplog, "POST /v1/chat/completions")
    assert response.status_code == 200
    sent = app.chat_requests()[-1].headers
    assert sent["authorization"] == "Basic " + base64.b64encode(f"gateway:{SECRET}".encode()).decode()
    assert SECRET not in sent["host"] and "@" not in sent["host"]
    assert all(SECRET not in record.getMessage() for record in caplog.records)


def test_an_unreachable_upstream_with_credentials_does_not_show_them(
    start_proxy: ProxyFactory, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="inflight")
    dead = f"http://gateway:{SECRET}@127.0.0.1:{free_port()}/v1"
    with start_proxy(dead) as proxy_url:
        response = httpx.post(f"{proxy_url}/chat/completions", json={"model": "m", "messages": []})
        log_lines(caplog, "POST /v1/chat/completions")
    assert response.status_code == 502
    assert SECRET not in response.text
    assert all(SECRET not in record.getMessage() for record in caplog.records)


def test_credentials_and_an_api_key_together_are_a_config_error() -> None:
    with pytest.raises(ConfigError, match="keep one"):
        load_settings(None, overrides={"upstream": {"base_url": "https://u:p@example.com/v1", "api_key": "k"}})
    settings = load_settings(None, overrides={"upstream": {"base_url": "https://u:p%40ss@example.com:8443/v1"}})
    assert settings.upstream.base_url == "https://example.com:8443/v1"
    assert base64.b64decode(settings.upstream.basic_auth) == b"u:p@ss"
