"""Recognise a "prompt is too long" refusal from every upstream our users run, and nothing else.

Each server words it differently (and wraps it differently: OpenAI's `{"error": {...}}`, vLLM's
flat `{"object": "error", ...}`, LM Studio's plain-string `error`, Gemini's array). The table
below is matched against every message found in the body; a row says which server it is for,
and named groups pick out the window and the upstream's own prompt count when the text has them.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import orjson

from inflight.codecs.inflate import InflateError, Inflater, is_identity, is_inflatable
from inflight.codecs.sse import event_data

MAX_BODY = 1024 * 1024


@dataclass(frozen=True)
class Refusal:
    upstream: str  # which row of the table matched
    context_window: int | None = None
    prompt_tokens: int | None = None
    # The wording says the reply's `max_tokens` counts against the window on this upstream (so the
    # prompt's budget must leave all of it).
    counts_output: bool = False


@dataclass(frozen=True)
class Wording:
    upstream: str
    pattern: re.Pattern[str]


def _w(upstream: str, pattern: str) -> Wording:
    return Wording(upstream, re.compile(pattern, re.IGNORECASE | re.DOTALL))


N = r"(\d[\d,]*)"
WORDINGS: tuple[Wording, ...] = (
    # vLLM >= 0.10: "You passed 3000 input tokens and requested 1000 output tokens. However, the model's
    # context length is only 2048 tokens, ..."
    _w(
        "vllm",
        rf"You passed (?P<prompt>{N}) input tokens and requested {N} output tokens\. However, the model's "
        rf"context length is only (?P<window>{N}) tokens",
    ),
    # vLLM 0.6-0.9: "... you requested 1000 output tokens and your prompt contains at least 1049 input tokens ..."
    _w(
        "vllm",
        rf"maximum context length is (?P<window>{N}) tokens\. However, you requested {N} output tokens and "
        rf"your prompt contains at least (?P<prompt>{N}) input tokens",
    ),
    # vLLM: "... However, your request has 3000 input tokens."
    _w(
        "vllm",
        rf"maximum context length is (?P<window>{N}) tokens\. However, your request has (?P<prompt>{N}) "
        r"input tokens",
    ),
    # OpenAI, Azure, DeepSeek, llama-cpp-python, old vLLM: "... you requested 8500 tokens (7500 in the messages,
    # 1000 in the completion)"
    _w(
        "openai",
        rf"maximum context length is (?P<window>{N}) tokens\. However, you requested {N} tokens "
        rf"\((?P<prompt>{N}) in the messages",
    ),
    # OpenAI: "... However, your messages resulted in 130532 tokens."
    _w(
        "openai",
        rf"maximum context length is (?P<window>{N}) tokens\. However, your messages resulted in "
        rf"(?P<prompt>{N}) tokens",
    ),
    # OpenRouter: "This endpoint's maximum context length is 131072 tokens. However, you requested about 140000"
    _w(
        "openrouter",
        rf"endpoint's maximum context length is (?P<window>{N}) tokens(?:\. However, you requested "
        rf"about (?P<prompt>{N}) tokens)?",
    ),
    _w("openai", rf"maximum context length is (?P<window>{N}) tokens"),
    # OpenAI Responses API
    _w("openai-responses", r"input exceeds the context window of this model"),
    # llama.cpp server: "request (5000 tokens) exceeds the available context size (4096 tokens), try increasing it"
    _w(
        "llama.cpp",
        rf"request \((?P<prompt>{N}) tokens\) exceeds the available context size \((?P<window>{N}) "
        r"tokens\)",
    ),
    _w("llama.cpp", r"the request exceeds the available context size"),
    # SGLang: "The input (5000 tokens) is longer than the model's context length (4096 tokens)."
    _w("sglang", rf"\((?P<prompt>{N}) tokens\) is longer than the model's context length \((?P<window>{N}) tokens\)"),
    _w("sglang", r"is longer than the model's context length"),
    # TGI and Together: "`inputs` tokens + `max_new_tokens` must be <= 4097. Given: 80125 `inputs` tokens ..."
    _w("tgi", rf"`inputs` tokens \+ `max_new_tokens` must be <= (?P<window>{N})\. Given: (?P<prompt>{N}) `inputs`"),
    # LM Studio: "Trying to keep the first 15857 tokens when context the overflows. However, the model is
    # loaded with context length of only 4096 tokens, which is not enough."
    _w(
        "lmstudio",
        rf"keep the first (?P<prompt>{N}) tokens when context the overflows\. However, the model is "
        rf"loaded with context length of only (?P<window>{N}) tokens",
    ),
    _w("lmstudio", rf"context length of only (?P<window>{N}) tokens"),
    _w("lmstudio", r"greater than the context length"),
    _w("lmstudio", rf"Input length (?P<prompt>{N}) exceeds context length (?P<window>{N})"),
    # Ollama with context shift disabled
    _w("ollama", r"the prompt is longer than the context length"),
    # Mistral: "Prompt contains 40000 tokens and 0 draft tokens, too large for model with 32768 maximum context length"
    _w(
        "mistral",
        rf"Prompt contains (?P<prompt>{N}) tokens.*?too large for model with (?P<window>{N}) maximum "
        r"context length",
    ),
    _w("mistral", rf"too large for model with (?P<window>{N}) maximum context length"),
    # xAI: "This model's maximum prompt length is 131072 but the request contains 136973 tokens."
    _w("xai", rf"maximum prompt length is (?P<window>{N}) but the request contains (?P<prompt>{N}) tokens"),
    # Anthropic through compatible gateways: "prompt is too long: 202609 tokens > 200000 maximum"
    _w("anthropic", rf"prompt is too long: (?P<prompt>{N}) tokens > (?P<window>{N}) maximum"),
    # Anthropic, when the reply's reserve is what tips it over: "input length and `max_tokens` exceed context
    # limit: 190000 + 21333 > 200000, decrease input length or `max_tokens` and try again"
    _w(
        "anthropic",
        rf"input length and `?max_tokens`? exceed context limit: (?P<prompt>{N}) \+ (?P<max_tokens>{N}) > "
        rf"(?P<window>{N})",
    ),
    # Gemini: "The input token count (134123) exceeds the maximum number of tokens allowed (131072)."
    _w(
        "gemini",
        rf"input token count \((?P<prompt>{N})\) exceeds the maximum number of tokens allowed "
        rf"\((?P<window>{N})\)",
    ),
)

# Wordings that look like a length problem but that compacting cannot fix.
NOT_CONTEXT = re.compile(r"tokens per min|requests per min|rate limit|TPM|RPM|quota|too many requests", re.IGNORECASE)
# vLLM: "'max_tokens' or 'max_completion_tokens' is too large: 5000. This model's maximum context length is 4096
# tokens and your request has 100 input tokens (5000 > 4096 - 100)." Only the prompt's share can be compacted.
MAX_TOKENS_TOO_LARGE = re.compile(
    rf"is too large: (?P<max_tokens>{N})\. This model's maximum context length is (?P<window>{N}) tokens and your "
    rf"request has (?P<prompt>{N}) input tokens",
    re.IGNORECASE,
)
CONTEXT_CODES = frozenset({"context_length_exceeded", "exceed_context_size_error"})


def detect(status: int, body: bytes, *, content_encoding: bytes | None = None) -> Refusal | None:
    """A context-length refusal in this response (status and whole body), or None."""
    if status < 400 or status == 429 or status >= 502:
        return None
    document = parse(body, content_encoding)
    if document is None:
        return None
    return detect_document(document)


def detect_document(document: Any) -> Refusal | None:
    messages = list(_messages(document))
    codes = {str(code) for code in _fields(document, ("code", "type"))}
    if any(NOT_CONTEXT.search(m) for m in messages):
        return None
    numbers = dict(_numbers(document))
    for message in messages:
        too_large = MAX_TOKENS_TOO_LARGE.search(message)
        if too_large:
            limit, max_tokens = _int(too_large["window"]) or 0, _int(too_large["max_tokens"]) or 0
            if max_tokens >= limit:
                return None  # max_tokens alone exceeds the window: no compaction can help
            return Refusal("vllm", limit, _int(too_large["prompt"]), counts_output=True)
        for wording in WORDINGS:
            found = wording.pattern.search(message)
            if found:
                groups = found.groupdict()
                if (_int(groups.get("max_tokens")) or 0) >= (_int(groups.get("window")) or 1 << 62):
                    return None  # the reply's reserve alone fills the window: no compaction can help
                window = _int(groups.get("window")) or numbers.get("n_ctx")
                prompt = _int(groups.get("prompt")) or numbers.get("n_prompt_tokens")
                return Refusal(wording.upstream, window, prompt, counts_output="max_tokens" in groups)
    if codes & CONTEXT_CODES:
        return Refusal("code", numbers.get("n_ctx"), numbers.get("n_prompt_tokens"))
    return None


def parse(body: bytes, content_encoding: bytes | None) -> Any:
    """An error body as JSON (its first `MAX_BODY` bytes, inflated), else its text as `{"error": text}`."""
    if is_inflatable(content_encoding):
        try:
            body = b"".join(Inflater(limit=MAX_BODY).feed(body))
        except InflateError:
            return None
    elif not is_identity(content_encoding):
        return None
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError:
        text = body.decode("utf-8", errors="replace").strip()
        return {"error": text} if text else None


def _messages(document: Any) -> Iterator[str]:
    """Every human-readable message in an error body, however it is nested."""
    if isinstance(document, list):
        for item in document:
            yield from _messages(item)
    elif isinstance(document, dict):
        for key in ("message", "error", "detail", "msg"):
            value = document.get(key)
            if isinstance(value, str):
                yield value
            elif isinstance(value, dict | list):
                yield from _messages(value)
        errors = document.get("errors")
        if isinstance(errors, list):
            yield from _messages(errors)


def _fields(document: Any, names: tuple[str, ...]) -> Iterator[object]:
    if isinstance(document, list):
        for item in document:
            yield from _fields(item, names)
    elif isinstance(document, dict):
        for name in names:
            if isinstance(document.get(name), str):
                yield document[name]
        if isinstance(document.get("error"), dict | list):
            yield from _fields(document["error"], names)


def _numbers(document: Any) -> Iterator[tuple[str, int]]:
    """llama.cpp's `n_ctx` and `n_prompt_tokens` fields, wherever they are."""
    if isinstance(document, list):
        for item in document:
            yield from _numbers(item)
    elif isinstance(document, dict):
        for name in ("n_ctx", "n_prompt_tokens"):
            value = document.get(name)
            if isinstance(value, int) and not isinstance(value, bool) and value > 0:
                yield name, value
        if isinstance(document.get("error"), dict):
            yield from _numbers(document["error"])


def _int(text: str | None) -> int | None:
    return int(text.replace(",", "")) if text else None


def detect_event(event: bytes) -> Refusal | None:
    """An SSE event that is an error object about the context length (vLLM and others stream them)."""
    data = event_data(event)
    if b"error" not in data:
        return None
    try:
        document = orjson.loads(data)
    except orjson.JSONDecodeError:
        return None
    is_error = isinstance(document, dict) and ("error" in document or document.get("object") == "error")
    return detect_document(document) if is_error else None
