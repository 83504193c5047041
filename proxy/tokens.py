"""Counting a chat-completion request the way OpenAI bills it, offline and nearly for free.

The formula (OpenAI cookbook, "How to count tokens with tiktoken", extended to tools):

    request  = 3                                  reply priming (`<|start|>assistant<|message|>`)
             + sum(message) + tools
    message  = 3                                  per-message framing
             + enc(role) + content
             + enc(name) + 1                      when `name` is set
             + enc(tool_call_id)                  tool results
             + sum(enc(fn.name) + enc(fn.arguments) + 3)   each assistant tool call
             + enc(function_call.name) + enc(function_call.arguments) + 3   legacy call
             + enc(refusal) and enc(any other string field, e.g. reasoning_content)
    content  = enc(str) | sum(part): text/refusal -> enc(text); image_url, input_audio, file ->
               proxy.media's formulas; an unknown part -> enc(its JSON)
    tools    = 12 + sum(7 + enc(compact JSON of the function definition))   when tools/functions

`enc` is `encode_ordinary`: user text may legitimately contain `<|endoftext|>`.

An agent resends its whole history every turn, so each message's count is cached under a hash of
its canonical bytes (sorted-key JSON, hashed with xxh3-128: a 128k-token history hashes in a quarter
of a millisecond, where sha1 takes a millisecond) and encoding: recounting a long history with one
new message costs about the new message plus a hash of the rest.
"""

from __future__ import annotations

import asyncio
import fnmatch
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import orjson
import tiktoken
import xxhash
from cachetools import LRUCache

from proxy import media
from proxy.encodings import load_encoding

REPLY_PRIMING = 3
TOKENS_PER_MESSAGE = 3
TOKENS_PER_NAME = 1
TOKENS_PER_CALL = 3
TOOLS_PREAMBLE = 12
TOKENS_PER_TOOL = 7
# Above this many bytes of request, counting may take more than a few milliseconds: use a thread.
THREAD_THRESHOLD_BYTES = 32 * 1024
LOCK_BATCH = 128  # cache lookups per lock hold: the loop, counting a small request, never waits long

# Which tiktoken encoding OpenAI's own model families use (tiktoken/model.py); the rest estimate.
FAMILY_ENCODINGS: tuple[tuple[str, str], ...] = (
    ("gpt-4o*", "o200k_base"),
    ("chatgpt-4o*", "o200k_base"),
    ("gpt-4.1*", "o200k_base"),
    ("gpt-4.5*", "o200k_base"),
    ("gpt-5*", "o200k_base"),
    ("gpt-oss*", "o200k_base"),
    ("o1*", "o200k_base"),
    ("o3*", "o200k_base"),
    ("o4*", "o200k_base"),
    ("gpt-4*", "cl100k_base"),
    ("gpt-3.5*", "cl100k_base"),
)
FALLBACK_ENCODING = "o200k_base"


@dataclass(frozen=True)
class EncodingChoice:
    name: str
    exact: bool  # False: another tokenizer's model, counted with o200k_base as an estimate


def choose_encoding(model: str, override: str | None = None) -> EncodingChoice:
    if override:
        return EncodingChoice(override, exact=True)
    base = model.rsplit("/", 1)[-1].lower()  # "openai/gpt-4o" on a gateway is still gpt-4o
    for pattern, name in FAMILY_ENCODINGS:
        if fnmatch.fnmatchcase(base, pattern):
            return EncodingChoice(name, exact=True)
    return EncodingChoice(FALLBACK_ENCODING, exact=False)


@dataclass(frozen=True)
class RequestCount:
    total: int
    messages: tuple[int, ...]
    tools: int
    digests: tuple[bytes, ...]  # each message's hash: the cache key, and how compaction records know a message

    @property
    def fixed(self) -> int:
        """What no compaction can remove: the reply priming and the tool definitions."""
        return REPLY_PRIMING + self.tools


class TokenCounter:
    """Counts requests with per-message caching; safe to use from the loop and worker threads."""

    def __init__(self, max_entries: int = 100_000) -> None:
        self._cache: LRUCache[tuple[str, bytes], int] = LRUCache(maxsize=max_entries)
        self._lock = threading.Lock()
        self._encodings: dict[str, tiktoken.Encoding] = {}
        self.hits = 0
        self.misses = 0

    def encoding(self, name: str) -> tiktoken.Encoding:
        """The named encoding; the first call builds it (about a second), so make it off the loop."""
        enc = self._encodings.get(name)
        if enc is None:
            enc = self._encodings[name] = load_encoding(name)
        return enc

    def count_request(self, payload: dict[str, Any], encoding: str) -> RequestCount:
        enc = self.encoding(encoding)
        messages = payload.get("messages")
        messages = messages if isinstance(messages, list) else []
        digests = tuple(message_digest(m) for m in messages)
        cached: list[int | None] = []
        for start in range(0, len(digests), LOCK_BATCH):  # a lock per batch, not per message
            with self._lock:
                cached += [self._cache.get((enc.name, digest)) for digest in digests[start : start + LOCK_BATCH]]
        missing = {i: message_tokens(messages[i], enc) for i, tokens in enumerate(cached) if tokens is None}
        with self._lock:
            self.hits += len(messages) - len(missing)
            self.misses += len(missing)
            for i, tokens in missing.items():
                self._cache[(enc.name, digests[i])] = tokens
        counts = tuple(missing[i] if tokens is None else tokens for i, tokens in enumerate(cached))
        tools = self.count_tools(payload, enc)
        total = REPLY_PRIMING + sum(counts) + tools
        return RequestCount(total=total, messages=counts, tools=tools, digests=digests)

    async def count_request_async(self, payload: dict[str, Any], encoding: str, *, size_hint: int) -> RequestCount:
        """Count on the loop when it is cheap; in a worker thread when it may take milliseconds."""
        if size_hint > THREAD_THRESHOLD_BYTES or encoding not in self._encodings:
            return await asyncio.to_thread(self.count_request, payload, encoding)
        return self.count_request(payload, encoding)

    def count_messages(self, messages: Sequence[Any], encoding: str) -> tuple[int, ...]:
        enc = self.encoding(encoding)
        return tuple(self.count_message(m, enc) for m in messages)

    def count_message(self, message: Any, enc: tiktoken.Encoding) -> int:
        return self.count_with_digest(message, enc)[0]

    def count_with_digest(self, message: Any, enc: tiktoken.Encoding) -> tuple[int, bytes]:
        digest = message_digest(message)
        key = (enc.name, digest)
        with self._lock:
            cached = self._cache.get(key)
            if cached is not None:
                self.hits += 1
                return cached, digest
        tokens = message_tokens(message, enc)
        with self._lock:
            self.misses += 1
            self._cache[key] = tokens
        return tokens, digest

    def count_tools(self, payload: dict[str, Any], enc: tiktoken.Encoding) -> int:
        definitions = [*_functions(payload.get("tools")), *_functions(payload.get("functions"))]
        if not definitions:
            return 0
        return TOOLS_PREAMBLE + sum(self.count_message({"__tool__": d}, enc) for d in definitions)

    def text_tokens(self, text: str, encoding: str) -> int:
        return len(self.encoding(encoding).encode_ordinary(text))


def message_digest(message: Any) -> bytes:
    """A hash of the message's canonical bytes (sorted keys): equal messages, equal digests."""
    return xxhash.xxh3_128_digest(orjson.dumps(message, option=orjson.OPT_SORT_KEYS))


def message_tokens(message: Any, enc: tiktoken.Encoding) -> int:
    if not isinstance(message, dict):
        return len(enc.encode_ordinary(orjson.dumps(message).decode()))
    if "__tool__" in message:  # a tool definition, cached through the same path as messages
        return TOKENS_PER_TOOL + len(enc.encode_ordinary(orjson.dumps(message["__tool__"]).decode()))
    tokens = TOKENS_PER_MESSAGE
    for key, value in message.items():
        if key == "content":
            tokens += content_tokens(value, enc)
        elif key == "name" and isinstance(value, str):
            tokens += len(enc.encode_ordinary(value)) + TOKENS_PER_NAME
        elif key == "tool_calls" and isinstance(value, list):
            tokens += sum(_call_tokens(call.get("function"), enc) for call in value if isinstance(call, dict))
        elif key == "function_call":
            tokens += _call_tokens(value, enc)
        elif isinstance(value, str):  # role, tool_call_id, refusal, reasoning_content, ...
            tokens += len(enc.encode_ordinary(value))
    return tokens


def content_tokens(content: Any, enc: tiktoken.Encoding) -> int:
    if content is None:
        return 0
    if isinstance(content, str):
        return len(enc.encode_ordinary(content))
    if isinstance(content, list):
        return sum(part_tokens(part, enc) for part in content)
    return len(enc.encode_ordinary(orjson.dumps(content).decode()))


def part_tokens(part: Any, enc: tiktoken.Encoding) -> int:
    if not isinstance(part, dict):
        return len(enc.encode_ordinary(part if isinstance(part, str) else orjson.dumps(part).decode()))
    kind = part.get("type")
    if kind in ("text", "input_text", "output_text") and isinstance(part.get("text"), str):
        return len(enc.encode_ordinary(part["text"]))
    if kind == "refusal" and isinstance(part.get("refusal"), str):
        return len(enc.encode_ordinary(part["refusal"]))
    if kind == "image_url" and isinstance(part.get("image_url"), dict):
        image = part["image_url"]
        url = image.get("url")
        return media.image_tokens(url if isinstance(url, str) else "", image.get("detail"))
    if kind == "input_audio" and isinstance(part.get("input_audio"), dict):
        audio = part["input_audio"]
        data = audio.get("data")
        return media.audio_tokens(data if isinstance(data, str) else "", audio.get("format"))
    if kind == "file" and isinstance(part.get("file"), dict):
        return media.file_tokens(part["file"])
    return len(enc.encode_ordinary(orjson.dumps(part).decode()))


def _call_tokens(function: Any, enc: tiktoken.Encoding) -> int:
    if not isinstance(function, dict):
        return 0
    tokens = TOKENS_PER_CALL
    for field in ("name", "arguments"):
        value = function.get(field)
        if isinstance(value, str):
            tokens += len(enc.encode_ordinary(value))
    return tokens


def _functions(definitions: Any) -> Iterable[Any]:
    if not isinstance(definitions, list):
        return ()
    return (d.get("function", d) if isinstance(d, dict) else d for d in definitions)
