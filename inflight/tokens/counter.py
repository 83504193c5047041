"""Count a chat-completion request the way OpenAI bills it, offline and cheaply.

    request  = 3 (reply priming, `<|start|>assistant<|message|>`) + sum(message) + tools

The per-message formula is in `inflight.tokens.messages`; tool definitions, `tool_choice` and
`response_format` are rendered as OpenAI renders them, in `inflight.tokens.tools`.

An agent resends its whole history every turn, so each message's count is cached under a hash of
its canonical bytes (sorted-key JSON, hashed with xxh3-128: a 128k-token history hashes in a quarter
of a millisecond, where sha1 takes a millisecond) and encoding: recounting a long history with one
new message costs about the new message plus a hash of the rest. Tool sets are cached the same way.

What cannot be sent anyway need not be counted exactly: given `exact_tokens` (more than the model's
window), messages are counted from the newest back until that many tokens are counted, and older
ones not in the cache are estimated from samples (`sampled_tokens`) and marked as such (`approximated`).
So a 25 MB conversation of which only a window's worth can be kept costs only a window's worth of counting.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import orjson
import tiktoken
import xxhash
from cachetools import LRUCache

from inflight.frozen import frozen
from inflight.tokens.encodings import load_encoding
from inflight.tokens.messages import message_tokens
from inflight.tokens.text import safely, sampled_tokens
from inflight.tokens.tools import has_system_message, tool_tokens

REPLY_PRIMING = 3
# Above this many bytes of request, counting may take more than a few milliseconds: use a thread.
THREAD_THRESHOLD_BYTES = 32 * 1024
# The request fields that inflight.tokens.tools renders into the prompt.
TOOL_FIELDS = ("tools", "functions", "tool_choice", "function_call", "response_format")
LOCK_BATCH = 128  # cache lookups per lock hold, so the event loop counting a small request never waits long
# With `exact_tokens` given, a message this big is estimated wherever it is: it will be cut before it is
# sent (and what is sent of it counted then), or it alone exceeds any window.
ESTIMATED_FROM_BYTES = 1 << 20


@frozen(slots=True)
class RequestCount:
    total: int
    messages: tuple[int, ...]
    tools: int
    digests: tuple[bytes, ...]  # each message's hash: the cache key, and how compaction records identify a message
    estimated: bool = False  # the tokenizer failed on part of it, which was estimated instead
    approximated: frozenset[int] = frozenset()  # messages estimated from samples, being older than what can be kept
    tools_key: bytes = b""  # the hash its tool fields are cached under (b"": it has none)
    tools_digest: str = ""  # a digest of its `tools` alone ("": none), which conversation keys use

    @property
    def fixed(self) -> int:
        """The tokens no compaction can remove: the reply priming and the tool definitions."""
        return REPLY_PRIMING + self.tools


def message_digest(message: Any) -> bytes:
    """A hash of the message's canonical bytes (sorted keys): equal messages, equal digests."""
    return digest_and_size(message)[0]


def digest_and_size(message: Any) -> tuple[bytes, int]:
    """`message_digest`, and the size of the canonical bytes it hashed."""
    canonical = orjson.dumps(message, option=orjson.OPT_SORT_KEYS)
    return xxhash.xxh3_128_digest(canonical), len(canonical)


def tool_digests(payload: dict[str, Any]) -> tuple[bytes, str]:
    """The hash a request's tool fields (`TOOL_FIELDS`, and whether a system message is there) are cached under,
    and a digest of its `tools` alone ("" when it offers none). A coding agent's tools can be tens of kilobytes, so
    they are written out once for both."""
    fields: dict[str, Any] = {name: payload[name] for name in TOOL_FIELDS if name in payload}
    if not fields:
        return b"", ""
    tools = fields.pop("tools", None)
    written = orjson.dumps(tools, option=orjson.OPT_SORT_KEYS) if "tools" in payload else b""
    fields["system"] = has_system_message(payload.get("messages"))
    key = xxhash.xxh3_128()
    key.update(b"%d:" % len(written))  # where the tools end, so no other fields can pass for them
    key.update(written)
    key.update(orjson.dumps(fields, option=orjson.OPT_SORT_KEYS))
    return b"tools:" + key.digest(), xxhash.xxh3_64_hexdigest(written) if tools else ""


def too_far(running: int, size: int, exact_tokens: int) -> bool:
    """Whether a message is estimated: past the tokens to count exactly, or too big to be sent as it is."""
    return running > exact_tokens or size >= ESTIMATED_FROM_BYTES


class TokenCounter:
    """Counts requests with per-message caching; safe to use from the loop and worker threads."""

    def __init__(self, max_entries: int = 100_000) -> None:
        self._cache: LRUCache[tuple[str, bytes], int] = LRUCache(maxsize=max_entries)
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def encoding(self, name: str) -> tiktoken.Encoding:
        """The named encoding; the first call builds it (about a second), so make that call off the event loop."""
        return load_encoding(name)

    def count_request(self, payload: dict[str, Any], encoding: str, *, exact_tokens: int | None = None) -> RequestCount:
        """Count the request; with `exact_tokens`, messages beyond that many of the newest tokens are estimated
        (unless cached) rather than counted."""
        enc = self.encoding(encoding)
        messages = payload.get("messages")
        messages = messages if isinstance(messages, list) else []
        digests_and_sizes = [digest_and_size(m) for m in messages]
        digests = tuple(digest for digest, _ in digests_and_sizes)
        cached: list[int | None] = []
        for start in range(0, len(digests), LOCK_BATCH):  # a lock per batch, not per message
            with self._lock:
                cached += [self._cache.get((enc.name, digest)) for digest in digests[start : start + LOCK_BATCH]]
        counts: list[int] = [0] * len(messages)
        counted: dict[int, tuple[int, bool]] = {}
        approximated: set[int] = set()
        running = 0
        for i in range(len(messages) - 1, -1, -1):  # newest first: what a compaction keeps is counted exactly
            tokens = cached[i]
            if tokens is None and exact_tokens is not None and too_far(running, digests_and_sizes[i][1], exact_tokens):
                tokens = self.estimate_message(messages[i], enc)
                approximated.add(i)
            elif tokens is None:
                counted[i] = safely(message_tokens, messages[i], enc)
                tokens = counted[i][0]
            counts[i] = tokens
            if digests_and_sizes[i][1] < ESTIMATED_FROM_BYTES:  # one too big to send whole takes no room of the rest
                running += tokens
        with self._lock:
            self.hits += len(messages) - len(counted) - len(approximated)
            self.misses += len(counted)
            for i, (tokens, estimated) in counted.items():
                if not estimated:  # an estimate is not kept: the next count says so again
                    self._cache[(enc.name, digests[i])] = tokens
        tools_key, tools_digest = tool_digests(payload)
        tools, tools_estimated = self._tool_tokens(payload, enc, tools_key)
        estimated = tools_estimated or any(estimated for _, estimated in counted.values())
        total = REPLY_PRIMING + sum(counts) + tools
        return RequestCount(
            total, tuple(counts), tools, digests, estimated, frozenset(approximated), tools_key, tools_digest
        )

    def estimate_message(self, message: Any, enc: tiktoken.Encoding) -> int:
        """Estimate `message`'s tokens from samples of its long strings (see `count_request`); not cached."""
        return safely(lambda item, encoding: message_tokens(item, encoding, sampled_tokens), message, enc)[0]

    def count_message(self, message: Any, enc: tiktoken.Encoding) -> int:
        key = (enc.name, message_digest(message))
        with self._lock:
            cached = self._cache.get(key)
            if cached is not None:
                self.hits += 1
                return cached
        tokens, estimated = safely(message_tokens, message, enc)
        with self._lock:
            self.misses += 1
            if not estimated:
                self._cache[key] = tokens
        return tokens

    def count_tools(self, payload: dict[str, Any], enc: tiktoken.Encoding) -> tuple[int, bool]:
        """The tokens the tool definitions, `tool_choice` and `response_format` add; cached per tool set.

        The figure also depends on whether a system message is there to share its framing (see
        inflight.tokens.tools), so that is part of the key.
        """
        return self._tool_tokens(payload, enc, tool_digests(payload)[0])

    def count_tools_with(
        self, payload: dict[str, Any], tool: dict[str, Any], enc: tiktoken.Encoding, *, tools_key: bytes
    ) -> tuple[int, bool]:
        """`count_tools` of `payload` with `tool` added to its tools, cached under `tools_key` (its own tool fields'
        hash, from its count) and the tool's: the request's tools are not written out again to look it up."""

        def counted() -> tuple[int, bool]:
            tools = payload.get("tools")
            return self.count_tools({**payload, "tools": [*(tools if isinstance(tools, list) else []), tool]}, enc)

        if not tools_key:  # no tool fields of its own: the tool alone, under a key that says whether a system is there
            return counted()
        return self._cached((enc.name, b"with:" + tools_key + message_digest(tool)), counted)

    def _tool_tokens(self, payload: dict[str, Any], enc: tiktoken.Encoding, tools_key: bytes) -> tuple[int, bool]:
        if not tools_key:
            return 0, False
        return self._cached((enc.name, tools_key), lambda: safely(tool_tokens, payload, enc))

    def _cached(self, key: tuple[str, bytes], count: Callable[[], tuple[int, bool]]) -> tuple[int, bool]:
        """The figure cached under `key`, else `count()`'s, kept unless it is an estimate (the next count says so)."""
        with self._lock:
            cached = self._cache.get(key)
        if cached is not None:
            return cached, False
        tokens, estimated = count()
        if not estimated:
            with self._lock:
                self._cache[key] = tokens
        return tokens, estimated
