"""What a request asks of the proxy, read from its headers: the `x-inflight-*` ones, the format's session
header, and the client's key."""

from __future__ import annotations

import pytest
from starlette.requests import Request

from inflight.errors import BadRequest
from inflight.formats import registered
from inflight.formats.seam import WireFormat
from inflight.http.conversation_handler import options_of
from inflight.pipeline.engine import Mode
from inflight.policy.tenants import tenant_of

KEYS = frozenset({b"authorization", b"x-api-key"})


def wire(name: str) -> WireFormat:
    return next(item for item in registered() if item.spec.name == name)


def request(*headers: tuple[bytes, bytes]) -> Request:
    """A request as uvicorn hands it over: header names lower-case, in the order sent."""
    scope = {"type": "http", "method": "POST", "path": "/v1/messages", "headers": list(headers)}
    return Request({**scope, "client": ("10.0.0.7", 51000), "query_string": b""})


def test_the_first_of_a_repeated_header_is_the_one_read_and_every_key_header_is_kept() -> None:
    options = options_of(
        request(
            (b"x-inflight-session", b"first"),
            (b"x-api-key", b"sk-a"),
            (b"x-inflight-session", b"second"),
            (b"x-inflight-compaction", b"Shadow"),
            (b"x-inflight-retrieval", b"off"),
            (b"x-claude-code-session-id", b"cc-1"),
        ),
        wire("messages"),
        client_keys=KEYS,
    )
    assert options.session == "first" and options.session_hint == "cc-1"
    assert options.mode == Mode.SHADOW and options.retrieval == "off"
    assert options.credentials == [(b"x-api-key", b"sk-a")] and options.tenant == tenant_of([(b"x-api-key", b"sk-a")])
    assert options.client == "10.0.0.7"


def test_a_format_without_a_session_header_reads_none_and_a_typo_is_refused() -> None:
    options = options_of(request((b"x-claude-code-session-id", b"cc-1")), wire("chat_completions"), client_keys=KEYS)
    assert options.session_hint is None and options.session is None and options.tenant == ""
    with pytest.raises(BadRequest, match="x-inflight-compaction"):
        options_of(request((b"x-inflight-compaction", b"shadw")), wire("chat_completions"), client_keys=KEYS)
