"""Recognise a "prompt is too long" refusal from every upstream our users run, and nothing else.

Each server words it differently (and wraps it differently: OpenAI's `{"error": {...}}`, vLLM's
flat `{"object": "error", ...}`, LM Studio's plain-string `error`, Gemini's array). A row of the
table below is one server's refusal: the statuses it answers with, the error types and codes it
sends with it, and its wording, which must be the whole message (a known opening, the server's own
advice after it), so that text a client makes the upstream echo inside another error ("Invalid
value: '…'") is never taken for one. Named groups pick out the window and the upstream's own
prompt count when the text has them.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import orjson

from inflight.codecs.inflate import InflateError, Inflater, is_identity, is_inflatable
from inflight.codecs.sse import event_data
from inflight.frozen import frozen

MAX_BODY = 1024 * 1024
MAX_MESSAGE_CHARS = 2000  # a longer message is no server's refusal (the real ones are a few sentences)


@frozen
class Refusal:
    upstream: str  # which row of the table matched
    context_window: int | None = None
    prompt_tokens: int | None = None
    # The wording says the reply's `max_tokens` counts against the window on this upstream (so the
    # prompt's budget must leave all of it).
    counts_output: bool = False


@frozen
class Wording:
    upstream: str
    pattern: re.Pattern[str]
    statuses: frozenset[int]
    kinds: frozenset[str]  # the error types and codes this server sends with it (besides the generic ones)


N = r"(\d[\d,]*)"
# What a server says after the refusal itself: its advice ("Please reduce the length of the messages.",
# ", try increasing it", "(parameter=input_tokens, value=3000)"), starting with one of these words.
ADVICE = r"(?:[.,;:]?\s*(?:please|try|reduce|decrease|resulting|which|for|or|however|\(parameter)\b.{0,400})?"
DEFAULT_STATUSES = frozenset({400, 413})
# Types and codes that say only "a bad request" or "a context-length problem": any server may send them.
GENERIC_KINDS = frozenset(
    {"invalid_request_error", "BadRequestError", "bad_request", "error", "context_length_exceeded"}
)


def _w(
    upstream: str, pattern: str, *, statuses: frozenset[int] = DEFAULT_STATUSES, kinds: frozenset[str] = frozenset()
) -> Wording:
    whole = re.compile(rf"\s*(?:{pattern}){ADVICE}\.?\s*", re.IGNORECASE | re.DOTALL)
    return Wording(upstream, whole, statuses | {400}, kinds | GENERIC_KINDS)


LOCAL = frozenset({400, 500})  # local servers answer some of these with 500
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
        rf"This model's maximum context length is (?P<window>{N}) tokens\. However, you requested {N} output "
        rf"tokens and your prompt contains at least (?P<prompt>{N}) input tokens",
    ),
    # vLLM: "... However, your request has 3000 input tokens."
    _w(
        "vllm",
        rf"This model's maximum context length is (?P<window>{N}) tokens\. However, your request has "
        rf"(?P<prompt>{N}) input tokens",
    ),
    # OpenAI, Azure, DeepSeek, llama-cpp-python, old vLLM: "... you requested 8500 tokens (7500 in the messages,
    # 1000 in the completion)"
    _w(
        "openai",
        rf"This model's maximum context length is (?P<window>{N}) tokens\. However, you requested {N} tokens "
        rf"\((?P<prompt>{N}) in the messages[^()]{{0,200}}\)",
    ),
    # OpenAI: "... However, your messages resulted in 130532 tokens." (with functions: "(including 99 in ...)")
    _w(
        "openai",
        rf"This model's maximum context length is (?P<window>{N}) tokens\. However, your messages resulted in "
        rf"(?P<prompt>{N}) tokens(?: \([^()]{{0,200}}\))?",
    ),
    # OpenRouter: "This endpoint's maximum context length is 131072 tokens. However, you requested about 140000
    # tokens (132185 of text input, 8192 in the output)."
    _w(
        "openrouter",
        rf"This endpoint's maximum context length is (?P<window>{N}) tokens(?:\. However, you requested "
        rf"about (?P<prompt>{N}) tokens(?: \([^()]{{0,200}}\))?)?",
    ),
    _w("openai", rf"This model's maximum context length is (?P<window>{N}) tokens"),
    # OpenAI Responses API
    _w("openai-responses", r"Your input exceeds the context window of this model"),
    # llama.cpp server: "request (5000 tokens) exceeds the available context size (4096 tokens), try increasing it"
    _w(
        "llama.cpp",
        rf"request \((?P<prompt>{N}) tokens\) exceeds the available context size \((?P<window>{N}) tokens\)",
        statuses=LOCAL,
        kinds=frozenset({"exceed_context_size_error"}),
    ),
    _w("llama.cpp", r"the request exceeds the available context size", statuses=LOCAL),
    # SGLang: "The input (5000 tokens) is longer than the model's context length (4096 tokens)."
    _w(
        "sglang",
        rf"The input(?: \((?P<prompt>{N}) tokens\))? is longer than the model's context length"
        rf"(?: \((?P<window>{N}) tokens\))?",
    ),
    # TGI and Together: "`inputs` tokens + `max_new_tokens` must be <= 4097. Given: 80125 `inputs` tokens ..."
    _w(
        "tgi",
        rf"(?:Input validation error: )?`inputs` tokens \+ `max_new_tokens` must be <= (?P<window>{N})\. Given: "
        rf"(?P<prompt>{N}) `inputs` tokens and {N} `max_new_tokens`",
        statuses=frozenset({422}),
        kinds=frozenset({"validation"}),
    ),
    # LM Studio: "Trying to keep the first 15857 tokens when context the overflows. However, the model is
    # loaded with context length of only 4096 tokens, which is not enough."
    _w(
        "lmstudio",
        rf"Trying to keep the first (?P<prompt>{N}) tokens when context the overflows\. However, the model is "
        rf"loaded with context length of only (?P<window>{N}) tokens",
        statuses=LOCAL,
    ),
    _w(
        "lmstudio",
        r"The number of tokens to keep from the initial prompt is greater than the context length",
        statuses=LOCAL,
    ),
    _w("lmstudio", rf"Input length (?P<prompt>{N}) exceeds context length (?P<window>{N})", statuses=LOCAL),
    # Ollama with context shift disabled
    _w("ollama", r"the prompt is longer than the context length", statuses=LOCAL),
    # Mistral: "Prompt contains 40000 tokens and 0 draft tokens, too large for model with 32768 maximum context length"
    _w(
        "mistral",
        rf"Prompt contains (?P<prompt>{N}) tokens(?: and {N} draft tokens)?, too large for model with "
        rf"(?P<window>{N}) maximum context length",
        kinds=frozenset({"invalid_request_message_error", "3051"}),
    ),
    # xAI: "This model's maximum prompt length is 131072 but the request contains 136973 tokens."
    _w(
        "xai",
        rf"This model's maximum prompt length is (?P<window>{N}) but the request contains (?P<prompt>{N}) tokens",
        kinds=frozenset({"Client specified an invalid argument"}),
    ),
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
        rf"The input token count \((?P<prompt>{N})\) exceeds the maximum number of tokens allowed "
        rf"\((?P<window>{N})\)",
    ),
)

# Wordings that look like a length problem but that compacting cannot fix.
NOT_CONTEXT = re.compile(r"tokens per min|requests per min|rate limit|TPM|RPM|quota|too many requests", re.IGNORECASE)
# vLLM: "'max_tokens' or 'max_completion_tokens' is too large: 5000. This model's maximum context length is 4096
# tokens and your request has 100 input tokens (5000 > 4096 - 100)." Only the prompt's share can be compacted.
MAX_TOKENS_TOO_LARGE = re.compile(
    rf"\s*'max_tokens' or 'max_completion_tokens' is too large: (?P<max_tokens>{N})\. This model's maximum context "
    rf"length is (?P<window>{N}) tokens and your request has (?P<prompt>{N}) input tokens(?: \({N} > {N} - {N}\))?"
    r"\.?\s*",
    re.IGNORECASE,
)
CONTEXT_CODES = frozenset({"context_length_exceeded", "exceed_context_size_error"})
SLACK = 4  # how far from ours an upstream's count of the same prompt may be (its tokenizer, images, templates)


def detect(status: int, body: bytes, *, content_encoding: bytes | None = None) -> Refusal | None:
    """A context-length refusal in this response (status and whole body), or None."""
    if status < 400 or status == 429 or status >= 502:
        return None
    document = parse(body, content_encoding)
    if document is None:
        return None
    return detect_document(document, status=status)


def detect_document(document: Any, *, status: int | None = None) -> Refusal | None:
    """A context-length refusal in a parsed error body (`status`: its HTTP status; None: an event of a stream
    that began with 200)."""
    messages = [m for m in _messages(document) if len(m) <= MAX_MESSAGE_CHARS]
    kinds = {str(kind) for kind in _fields(document, ("code", "type"))}
    if any(NOT_CONTEXT.search(m) for m in messages):
        return None
    numbers = dict(_numbers(document))
    for message in messages:
        too_large = MAX_TOKENS_TOO_LARGE.fullmatch(message)
        if too_large and kinds <= GENERIC_KINDS and status in (None, 400):
            limit, max_tokens = _int(too_large["window"]) or 0, _int(too_large["max_tokens"]) or 0
            if max_tokens >= limit:
                return None  # max_tokens alone exceeds the window: no compaction can help
            return Refusal("vllm", limit, _int(too_large["prompt"]), counts_output=True)
        for wording in WORDINGS:
            if (status is not None and status not in wording.statuses) or not kinds <= wording.kinds:
                continue
            found = wording.pattern.fullmatch(message)
            if found:
                groups = found.groupdict()
                if (_int(groups.get("max_tokens")) or 0) >= (_int(groups.get("window")) or 1 << 62):
                    return None  # the reply's reserve alone fills the window: no compaction can help
                window = _int(groups.get("window")) or numbers.get("n_ctx")
                prompt = _int(groups.get("prompt")) or numbers.get("n_prompt_tokens")
                return Refusal(wording.upstream, window, prompt, counts_output="max_tokens" in groups)
    if kinds & CONTEXT_CODES and kinds <= GENERIC_KINDS | CONTEXT_CODES and status in (None, 400, 413):
        return Refusal("code", numbers.get("n_ctx"), numbers.get("n_prompt_tokens"))
    return None


def agrees(refusal: Refusal, *, sent: int, output_limit: int | None, answered: int) -> bool:
    """Whether a refusal's numbers fit the request it refused, so they can be learned from.

    `sent` is our count of what was sent, in the upstream's units (0: unknown); `answered` the largest prompt this
    client had answered by this model. The upstream's prompt count must be within a factor of SLACK of ours (its
    tokenizer is not ours), and the window below what was sent with the reply's room (times SLACK) and not below
    a prompt already answered."""
    prompt, window = refusal.prompt_tokens, refusal.context_window
    if prompt is not None and sent > 0 and not sent / SLACK <= prompt <= sent * SLACK:
        return False
    if window is None:
        return True
    return window >= answered and (sent <= 0 or window <= (sent + (output_limit or 0)) * SLACK)


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


def messages_of(document: Any) -> Iterator[str]:
    """Every human-readable message in an error body, however it is nested."""
    return _messages(document)


def _messages(document: Any) -> Iterator[str]:
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
    if b"error" not in event:  # told at once for an ordinary first event, without reading its data lines
        return None
    data = event_data(event)
    if b"error" not in data:
        return None
    try:
        document = orjson.loads(data)
    except orjson.JSONDecodeError:
        return None
    is_error = isinstance(document, dict) and ("error" in document or document.get("object") == "error")
    return detect_document(document) if is_error else None
