"""Wire formats: one module per API shape, each translating between its bytes and the core's conversation.

Every format implements `seam.WireFormat` (whose module docstring describes it in full). Chat
Completions is `chat_completions`, the Responses API `responses`, Anthropic Messages `messages`, the
Gemini API `gemini`.
`registered` lists them. The app's routes, the credentials it replaces, its error shapes and the
metrics' route labels all come from that list, so adding a format takes its module and one line there.
Only the pipeline and the edge import this package; the core never does.
"""

from __future__ import annotations

from collections.abc import Sequence

from inflight.formats.chat_completions import CHAT_COMPLETIONS, ChatCompletions
from inflight.formats.compaction_items import ItemKey
from inflight.formats.gemini import GEMINI, Gemini
from inflight.formats.messages import MESSAGES, Messages
from inflight.formats.responses import RESPONSES, Responses
from inflight.formats.seam import (
    UNROUTED,
    CoreRequest,
    FormatSpec,
    Message,
    Route,
    Target,
    UpstreamCall,
    WireFormat,
)
from inflight.formats.usage import UsageReader


def registered(item_key: ItemKey | None = None) -> tuple[WireFormat, ...]:
    """The formats the proxy serves; `item_key` decrypts the Responses API compaction items this deployment
    hands out."""
    return (CHAT_COMPLETIONS, Responses(item_key), MESSAGES, GEMINI)


def key_headers(formats: Sequence[WireFormat]) -> frozenset[bytes]:
    """Every header that carries a client's key in one of `formats`; the proxy's own key replaces these."""
    return frozenset(header for wire in formats for header in wire.spec.credentials)


__all__ = [
    "CHAT_COMPLETIONS",
    "GEMINI",
    "MESSAGES",
    "RESPONSES",
    "UNROUTED",
    "ChatCompletions",
    "CoreRequest",
    "FormatSpec",
    "Gemini",
    "Message",
    "Messages",
    "Responses",
    "Route",
    "Target",
    "UpstreamCall",
    "UsageReader",
    "WireFormat",
    "key_headers",
    "registered",
]
