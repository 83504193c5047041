"""Header hygiene between client and upstream: hop-by-hop headers dropped, `Host` and auth rewritten."""

from __future__ import annotations

from collections.abc import Iterable

RawHeaders = list[tuple[bytes, bytes]]

# RFC 9110 §7.6.1 plus the legacy ones that proxies must not forward.
HOP_BY_HOP = frozenset(
    {
        b"connection",
        b"keep-alive",
        b"proxy-connection",
        b"proxy-authenticate",
        b"proxy-authorization",
        b"te",
        b"trailer",
        b"transfer-encoding",
        b"upgrade",
    }
)
# Who the client is, beside its key: what requests the proxy makes on its own behalf (model discovery) carry.
IDENTITY_HEADERS = frozenset({b"openai-organization", b"openai-project", b"api-key", b"anthropic-version"})


def filter_headers(raw: Iterable[tuple[bytes, bytes]], drop: frozenset[bytes] = frozenset()) -> RawHeaders:
    """Drop hop-by-hop headers, those named by `Connection`, and `drop` (all lower-case names)."""
    pairs = [(name.lower(), value) for name, value in raw]
    named = {
        token.strip().lower()
        for name, value in pairs
        if name == b"connection"
        for token in value.split(b",")
        if token.strip()
    }
    return [(name, value) for name, value in pairs if name not in HOP_BY_HOP and name not in named and name not in drop]


def header_value(raw: Iterable[tuple[bytes, bytes]], name: bytes) -> bytes | None:
    for key, value in raw:
        if key.lower() == name:
            return value
    return None


def is_event_stream(raw: Iterable[tuple[bytes, bytes]]) -> bool:
    return (header_value(raw, b"content-type") or b"").startswith(b"text/event-stream")


def request_headers(
    raw: Iterable[tuple[bytes, bytes]],
    *,
    host: bytes,
    api_key: str,
    basic_auth: str = "",
    key_header: bytes = b"authorization",
    client_keys: frozenset[bytes] = frozenset({b"authorization"}),
    rewrite_body: bool = False,
) -> RawHeaders:
    """The client's headers as the upstream gets them: `Host` ours, the configured key instead of theirs
    (every header in `client_keys`, the wire formats' credential headers, dropped)."""
    drop = {b"host"}
    if rewrite_body:
        # The body sent is not the client's: its length is recomputed, and it is not compressed.
        drop |= {b"content-length", b"content-encoding"}
    headers = filter_headers(raw, frozenset(drop))
    headers.insert(0, (b"host", host))
    own = key_headers(api_key, basic_auth, key_header)
    if own:
        headers = [(n, v) for n, v in headers if n not in client_keys] + own
    return headers


def key_headers(api_key: str, basic_auth: str, key_header: bytes) -> RawHeaders:
    """The proxy's own key as its upstream takes it, in `key_header`: `Authorization: Bearer <key>`, any other
    header (`x-api-key`, `x-goog-api-key`) the key alone; none: []."""
    if api_key:
        key = api_key.encode("latin-1")
        return [(b"authorization", b"Bearer " + key)] if key_header == b"authorization" else [(key_header, key)]
    return [(b"authorization", b"Basic " + basic_auth.encode("ascii"))] if basic_auth else []


def response_headers(
    raw: Iterable[tuple[bytes, bytes]], extra: dict[str, str] | None = None, *, event_stream: bool
) -> RawHeaders:
    """The upstream's headers as the client gets them, with the proxy's own `x-inflight-*` added (`event_stream`: the
    answer is `text/event-stream`)."""
    headers = filter_headers(raw)
    if event_stream:
        # Stop nginx-style buffering between us and the client from batching SSE events.
        headers.append((b"x-accel-buffering", b"no"))
    for name, value in (extra or {}).items():
        headers.append((name.lower().encode("latin-1"), value.encode("latin-1")))
    return headers
