"""Where each wire format's requests go: the Gemini API at the upstream's base, less its /v1, unless it is OpenAI's.

`inflight serve --upstream http://127.0.0.1:PORT/v1` (README's way for a local server) once sent Gemini CLI's
`/v1beta/...` to `PORT/v1/v1beta/...`, a 404 on which Gemini CLI exits. Gemini's paths carry their version, so
with any upstream but OpenAI's (whose API has none) they go to the upstream's origin, with its key; with OpenAI's
they still go to Google's, and `upstreams.gemini` (`--upstream-gemini`) names another place.
"""

from __future__ import annotations

import httpx
import pytest

from inflight.config import load_settings
from inflight.http.server import startup_line
from tests.support.processes import inflight_process
from tests.support.servers import serve
from tests.support.upstream import UpstreamApp

HELLO = {"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}
GENERATE = "/v1beta/models/gemini-2.5-pro:generateContent"


@pytest.mark.parametrize(
    ("base_url", "origin"),
    [
        ("http://127.0.0.1:9000/v1", "http://127.0.0.1:9000"),
        ("http://127.0.0.1:9000", "http://127.0.0.1:9000"),
        ("https://openrouter.ai/api/v1", "https://openrouter.ai/api"),
        # A gateway that routes by path: Gemini stays under its prefix, never beside it on the same host.
        ("https://corp.example/llm/v1", "https://corp.example/llm"),
        # Google's OpenAI-compatible endpoint: the Gemini API is its own origin's.
        ("https://generativelanguage.googleapis.com/v1beta/openai", "https://generativelanguage.googleapis.com"),
    ],
)
def test_with_an_upstream_not_openais_gemini_goes_to_its_origin(base_url: str, origin: str) -> None:
    settings = load_settings(None, overrides={"upstream": {"base_url": base_url, "api_key": "sk-local"}})
    gemini = settings.upstream_for("gemini")
    assert gemini.base_url == origin and gemini.api_key == "sk-local"  # the same server: its key
    assert settings.upstream_for("messages").base_url == base_url  # the Messages API as the others
    assert settings.unserved("gemini") is None and settings.unserved("messages") is None


def test_with_openais_upstream_gemini_still_goes_to_googles() -> None:
    settings = load_settings(None)
    assert settings.upstream_for("gemini").base_url == "https://generativelanguage.googleapis.com"
    assert settings.upstream_for("messages").base_url == "https://api.anthropic.com/v1"
    held = load_settings(None, overrides={"access": {"keys": ["k"]}, "upstream": {"api_key": "sk-openai"}})
    assert held.unserved("gemini") is not None  # no client key is Google's: still told what to set


def test_client_keys_and_a_local_upstream_serve_gemini_at_its_origin_with_the_upstreams_key() -> None:
    overrides = {"access": {"keys": ["k"]}, "upstream": {"base_url": "http://127.0.0.1:9000/v1", "api_key": "sk-x"}}
    settings = load_settings(None, overrides=overrides)
    assert settings.unserved("gemini") is None
    assert settings.upstream_for("gemini").base_url == "http://127.0.0.1:9000"
    assert settings.upstream_for("gemini").api_key == "sk-x"


def test_upstreams_gemini_wins_over_the_origin() -> None:
    overrides = {
        "upstream": {"base_url": "http://127.0.0.1:9000/v1"},
        "upstreams": {"gemini": {"base_url": "http://127.0.0.1:9100"}},
    }
    assert load_settings(None, overrides=overrides).upstream_for("gemini").base_url == "http://127.0.0.1:9100"


def test_the_startup_line_names_where_each_format_goes() -> None:
    local = load_settings(None, overrides={"upstream": {"base_url": "http://127.0.0.1:9000/v1"}})
    line = startup_line(local, workers=1)
    assert (
        "/v1 -> http://127.0.0.1:9000/v1, messages -> http://127.0.0.1:9000/v1, gemini -> http://127.0.0.1:9000;"
    ) in line
    own = load_settings(None, overrides={"upstreams": {"responses": {"base_url": "http://127.0.0.1:9200/v1"}}})
    assert (
        "-> https://api.openai.com/v1, responses -> http://127.0.0.1:9200/v1, "
        "messages -> https://api.anthropic.com/v1, gemini -> https://generativelanguage.googleapis.com;"
    ) in startup_line(own, workers=1)


def test_a_gemini_request_through_serve_upstream_v1_reaches_the_servers_v1beta() -> None:
    """As README runs it for a local server: `inflight serve --upstream http://127.0.0.1:PORT/v1`; before, the
    fake got `/v1/v1beta/models/...` and answered 404."""
    app = UpstreamApp()
    with serve(app) as url, inflight_process(f"{url}/v1") as (proxy, _):
        answer = httpx.post(f"{proxy.removesuffix('/v1')}{GENERATE}", json=HELLO, timeout=60)
    assert answer.status_code == 200, answer.text
    assert [r.path for r in app.requests if r.method == "POST"] == [GENERATE]


def test_upstream_gemini_sends_gemini_requests_to_its_own_server() -> None:
    main, google = UpstreamApp(), UpstreamApp()
    with (
        serve(main) as url,
        serve(google) as other,
        inflight_process(f"{url}/v1", "", "--upstream-gemini", other) as (proxy, _),
    ):
        answer = httpx.post(f"{proxy.removesuffix('/v1')}{GENERATE}", json=HELLO, timeout=60)
    assert answer.status_code == 200, answer.text
    assert [r.path for r in google.requests] == [GENERATE] and main.requests == []
