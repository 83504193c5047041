"""Reversible compaction: which requests offer `inflight_retrieve`, the originals kept for it, and its answers.

Once a request is compacted (and not in shadow mode), if it offers tools and its format has the tool's shape,
the originals its placeholders name are kept for the client's tenant and the tool is added to the body that
goes upstream. The edge (`inflight.http.retrieval`) asks `answer` for each call the model makes.
"""

from __future__ import annotations

from collections.abc import Callable

import orjson

from inflight.compaction import Outcome
from inflight.compaction.retrieval import NO_ROOM, TOOL_NAME, fitted, originals, read_back
from inflight.config import Retrieval as RetrievalSettings
from inflight.formats.retrieve_tool import ChatShape, offered, shape_of
from inflight.pipeline.accounting import Counted
from inflight.records.originals import OriginalStore
from inflight.tokens import TokenCounter

HEADER = "x-inflight-retrieval"  # a client's `off` or `tool` overrides the configured mode for its request


class Originals:
    """This process's originals, and the reading back of them for each tenant."""

    def __init__(self, settings: RetrievalSettings) -> None:
        self.store = OriginalStore(max_bytes=settings.max_bytes, ttl_s=settings.ttl_s)
        self.answered = 0  # calls answered with an original
        self.unavailable = 0  # calls answered "unavailable"

    def keep(self, counted: Counted, outcome: Outcome, *, tenant: str) -> int:
        """Keep every original the compacted request's placeholders name; return how many are kept."""
        kept = 0
        for handle, text in originals(outcome.record, counted.request.messages, counted.count.digests):
            kept += self.store.keep(tenant, handle, text)
        return kept

    def answer(
        self,
        arguments: str,
        *,
        tenant: str,
        max_chars: int,
        room: int | None = None,
        count: Callable[[str], int] = len,
    ) -> str:
        """The text a call is answered with: the original the handle names, for this tenant only, within `room`
        tokens as `count` counts them (None: no bound but `max_chars`)."""
        handle = handle_in(arguments)
        original = self.store.get(tenant, handle) if handle is not None else None
        text = read_back(original, arguments, max_chars=max_chars)
        if room is not None:
            text = fitted(text, room=room, count=count)
        if original is None or text == NO_ROOM:
            self.unavailable += 1
        else:
            self.answered += 1
        return text

    def stats(self) -> dict[str, int]:
        return {**self.store.stats(), "answered": self.answered, "unavailable": self.unavailable}


def handle_in(arguments: str) -> str | None:
    """The handle a call's arguments name (None: none, or not JSON)."""
    try:
        asked = orjson.loads(arguments)
    except orjson.JSONDecodeError:
        return None
    handle = asked.get("handle") if isinstance(asked, dict) else None
    return handle.strip() if isinstance(handle, str) else None


def definition_tokens(counted: Counted, counter: TokenCounter) -> int:
    """What the tool's definition adds to the request's count (ours), with the request's own tools beside it."""
    enc = counter.encoding(counted.encoding.name)
    view, key = counted.request.view, counted.count.tools_key
    added, _ = counter.count_tools_with(view, ChatShape.definition, enc, tools_key=key)
    return max(added - counted.count.tools, 0)


def may_offer(counted: Counted, settings: RetrievalSettings, *, asked: str) -> bool:
    """Whether this request may offer the tool once compacted: tools offered, none of them named as ours (a client,
    or another inflight in front, with its own `inflight_retrieve`: its calls are its own to answer), a format
    with the tool's shape, and the mode (the client's header `off` or `tool`, else the configured one) says so.
    `auto` offers it as `tool` does: it is added with the first compaction, which rewrites the prefix anyway, and
    stays the same bytes after, so where cache writes bear a premium (Anthropic's 1.25) it costs one more write of
    the tools and system prompt in a conversation, and none later."""
    header = asked.strip().lower()
    mode = header if header in ("off", "tool") else settings.mode
    if mode == "off":
        return False
    if not offered(counted.payload.get("tools")) or shape_of(counted.wire) is None:
        return False
    return not names_ours(counted.request.view.get("tools"))


def names_ours(tools: object) -> bool:
    """Whether the client's tools (as Chat Completions' functions, every format's view) include one named as ours."""
    if not isinstance(tools, list):
        return False
    functions = (tool.get("function") for tool in tools if isinstance(tool, dict))
    return any(isinstance(function, dict) and function.get("name") == TOOL_NAME for function in functions)
