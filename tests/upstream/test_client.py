"""Where a client's path goes upstream: `upstream.base_url`'s path in place of a whole `/v1` segment only."""

from __future__ import annotations

from inflight.config import Upstream
from inflight.upstream.client import UpstreamClient


def test_only_a_whole_v1_segment_gives_way_to_the_base_urls_path() -> None:
    openai = UpstreamClient(Upstream(base_url="https://gateway.example/openai/v1"))
    assert openai.target_for(b"/v1/chat/completions", b"x=1") == b"/openai/v1/chat/completions?x=1"
    assert openai.target_for(b"/v1") == b"/openai/v1"
    bare = UpstreamClient(Upstream(base_url="https://generativelanguage.example"))
    # Gemini's API lives under /v1beta: it reaches the upstream as the client sent it, not as `beta/...`.
    assert bare.target_for(b"/v1beta/models/x:generateContent") == b"/v1beta/models/x:generateContent"
    assert bare.target_for(b"/v1beta/models/x:streamGenerateContent", b"alt=sse") == (
        b"/v1beta/models/x:streamGenerateContent?alt=sse"
    )
    assert bare.target_for(b"/v1/models") == b"/models"
