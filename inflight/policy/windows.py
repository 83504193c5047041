"""Find how big a model's context window is: configured, learned, discovered, built in, or assumed.

The first source that answers wins: (1) the YAML `models:` entry, (2) a window learned from the
upstream's own context-length refusal to this client (its tenant), (3) the upstream's `GET /v1/models`
(vLLM/SGLang `max_model_len`, llama.cpp `meta.n_ctx`, OpenRouter `context_length`), (4) the built-in
table below, (5) `default_context_window`.
"""

from __future__ import annotations

import asyncio
import fnmatch
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any, Literal

import orjson
from cachetools import LRUCache

from inflight.config import Settings
from inflight.frozen import frozen
from inflight.policy.tenants import bounded_key, tenant_model_key

log = logging.getLogger("inflight")

Source = Literal["config", "learned", "discovered", "builtin", "default"]


@frozen(slots=True)
class ModelLimits:
    context_window: int
    max_output_tokens: int | None
    source: Source


# (glob on the lower-cased model name without any "provider/" prefix, window, max output tokens)
BUILTIN: tuple[tuple[str, int, int | None], ...] = (
    # OpenAI, platform.openai.com/docs/models (each model's page: "context window", "max output tokens")
    ("gpt-5*", 400_000, 128_000),
    ("gpt-4.1*", 1_047_576, 32_768),
    ("gpt-4o-mini*", 128_000, 16_384),
    ("gpt-4o*", 128_000, 16_384),
    ("chatgpt-4o*", 128_000, 16_384),
    ("gpt-4.5*", 128_000, 16_384),
    ("gpt-oss*", 131_072, 131_072),
    ("o1-mini*", 128_000, 65_536),
    ("o1*", 200_000, 100_000),
    ("o3*", 200_000, 100_000),
    ("o4-mini*", 200_000, 100_000),
    ("gpt-4-turbo*", 128_000, 4_096),
    ("gpt-4-1106*", 128_000, 4_096),
    ("gpt-4-0125*", 128_000, 4_096),
    ("gpt-4-32k*", 32_768, 4_096),
    ("gpt-4*", 8_192, 8_192),
    ("gpt-3.5-turbo-instruct*", 4_096, 4_096),
    ("gpt-3.5*", 16_385, 4_096),
    # Anthropic via OpenAI-compatible gateways, docs.anthropic.com/en/docs/about-claude/models
    ("claude-opus-4*", 200_000, 32_000),
    ("claude-sonnet-4*", 200_000, 64_000),
    ("claude-3-7-sonnet*", 200_000, 64_000),
    ("claude-3.7-sonnet*", 200_000, 64_000),
    ("claude-3*", 200_000, 8_192),
    ("claude*", 200_000, 8_192),
    # Meta Llama model cards (huggingface.co/meta-llama): 3.1-3.3 are 128k, 3.0 is 8k
    ("*llama-3.1*", 131_072, None),
    ("*llama-3.2*", 131_072, None),
    ("*llama-3.3*", 131_072, None),
    ("*llama-3*", 8_192, None),
    ("*llama3.1*", 131_072, None),
    ("*llama3.2*", 131_072, None),
    ("*llama3.3*", 131_072, None),
    ("*llama3*", 8_192, None),
    # Qwen model cards (huggingface.co/Qwen): native windows, without YaRN extension
    ("qwen3-coder*", 262_144, 65_536),
    ("qwen3*", 32_768, None),
    ("qwen2.5-1m*", 1_010_000, None),
    ("qwen2.5*", 32_768, 8_192),
    # DeepSeek API docs (api-docs.deepseek.com/quick_start/pricing)
    ("deepseek-chat*", 128_000, 8_192),
    ("deepseek-reasoner*", 128_000, 64_000),
    ("deepseek*", 128_000, None),
    # Mistral docs (docs.mistral.ai/getting-started/models)
    ("codestral*", 256_000, None),
    ("mistral-large*", 131_072, None),
    ("mistral-medium*", 131_072, None),
    ("mistral-small*", 131_072, None),
    ("mistral-7b*", 32_768, None),
    ("mixtral-8x22b*", 65_536, None),
    ("mixtral*", 32_768, None),
    # Google Gemini docs (ai.google.dev/gemini-api/docs/models)
    ("gemini-2.5*", 1_048_576, 65_536),
    ("gemini-2.0*", 1_048_576, 8_192),
    ("gemini-1.5-pro*", 2_097_152, 8_192),
    ("gemini-1.5*", 1_048_576, 8_192),
)

DISCOVERY_RETRY_S = 60.0
MAX_MODELS = 4096  # how many (client, model) learned windows and models' limits are kept (least recently used dropped)
DISCOVERY_TIMEOUT_S = 5.0

# Fetches the upstream's /v1/models body (with the client's credentials); raises on failure.
FetchModels = Callable[[], Awaitable[bytes]]


def builtin_limits(model: str) -> tuple[int, int | None] | None:
    base = model.rsplit("/", 1)[-1].lower()
    for pattern, window, max_output in BUILTIN:
        if fnmatch.fnmatchcase(base, pattern):
            return window, max_output
    return None


def parse_model_list(body: bytes) -> dict[str, int]:
    """Map model ids to the context windows a /v1/models body lists (models without one are left out)."""
    try:
        document = orjson.loads(body)
    except orjson.JSONDecodeError:
        return {}
    entries = document.get("data") if isinstance(document, dict) else document
    windows: dict[str, int] = {}
    for entry in entries if isinstance(entries, list) else ():
        if not isinstance(entry, dict) or not isinstance(entry.get("id"), str):
            continue
        window = _window_of(entry)
        if window:
            windows[entry["id"]] = window
    return windows


def _window_of(entry: dict[str, Any]) -> int | None:
    meta = entry.get("meta")
    candidates = [
        entry.get("max_model_len"),  # vLLM, SGLang
        meta.get("n_ctx") if isinstance(meta, dict) else None,  # llama.cpp server
        entry.get("context_length"),  # OpenRouter, LM Studio
        entry.get("context_window"),  # Groq
    ]
    for value in candidates:
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


class ContextRegistry:
    """Resolves a model to its limits, and keeps the windows this process learned and discovered."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.max_key_chars = settings.limits.max_key_chars  # longer model names are clipped and hashed (`bounded_key`)
        self._learned: LRUCache[str, int] = LRUCache(maxsize=MAX_MODELS)
        self._discovered: dict[str, int] | None = None
        self._discovery_failed_at = -DISCOVERY_RETRY_S
        self._discovery_lock = asyncio.Lock()
        # Resolving walks the config's globs and the table, so results are cached per model and cleared on any change.
        self._resolved: LRUCache[str, ModelLimits] = LRUCache(maxsize=MAX_MODELS)
        self._last: tuple[str, ModelLimits] | None = None  # the model resolved last: a request asks for it again

    def learn(self, model: str, context_window: int, *, tenant: str = "") -> None:
        """Record the window an upstream told the client `tenant` in a refusal; it overrides discovery and the table
        for that client's requests only, so no client can shrink another's window."""
        key = tenant_model_key(model, tenant, self.max_key_chars)
        if self._learned.get(key) != context_window:
            client = f" (client {tenant})" if tenant else ""
            log.info(
                "[context] learned window for %s: %d tokens%s",
                bounded_key(model, self.max_key_chars),
                context_window,
                client,
            )
        self._learned[key] = context_window

    def learned(self) -> dict[str, int]:
        """The windows learned, by `tenant:model`."""
        return dict(self._learned)

    def resolve(self, model: str, *, tenant: str = "") -> ModelLimits:
        """The model's limits for the client `tenant` from what is known now, without any I/O (see `resolve_async`
        for discovery)."""
        last = self._last
        if last is not None and last[0] == model:
            limits = last[1]
        else:
            key = bounded_key(model, self.max_key_chars)
            found = self._resolved.get(key)
            if found is None:
                found = self._resolved[key] = self._resolve(model)
            limits = found
            self._last = (model, limits)
        if limits.source == "config" or not self._learned:  # most processes never learn a window
            return limits
        learned = self._learned.get(tenant_model_key(model, tenant, self.max_key_chars))
        return limits if learned is None else ModelLimits(learned, limits.max_output_tokens, "learned")

    def _resolve(self, model: str) -> ModelLimits:
        """The model's limits from the config, discovery, the table or the default (a learned window aside)."""
        entry = self.settings.model_entry(model)
        table = builtin_limits(model)
        max_output = entry.max_output_tokens if entry and entry.max_output_tokens else (table[1] if table else None)
        if entry is not None and entry.context_window:
            return ModelLimits(entry.context_window, max_output, "config")
        if self._discovered and model in self._discovered:
            return ModelLimits(self._discovered[model], max_output, "discovered")
        if table is not None:
            return ModelLimits(table[0], max_output, "builtin")
        return ModelLimits(self.settings.default_context_window, max_output, "default")

    def discovers(self, model: str) -> bool:
        """Whether `model`'s window should be asked of the upstream's model list before it is resolved: not
        configured, discovery on, and the list not fetched yet (nor failed within the last minute)."""
        if not self.settings.discover_context_window or self.resolve(model).source == "config":
            return False
        return self._discovered is None and time.monotonic() - self._discovery_failed_at >= DISCOVERY_RETRY_S

    async def resolve_async(self, model: str, fetch: FetchModels) -> ModelLimits:
        if self.discovers(model):
            await self.discover(fetch)
        return self.resolve(model)

    async def discover(self, fetch: FetchModels) -> None:
        """Ask the upstream once; on failure, try again no sooner than a minute later."""
        if self._discovered is not None or time.monotonic() - self._discovery_failed_at < DISCOVERY_RETRY_S:
            return
        async with self._discovery_lock:
            if self._discovered is not None or time.monotonic() - self._discovery_failed_at < DISCOVERY_RETRY_S:
                return
            try:
                body = await asyncio.wait_for(fetch(), DISCOVERY_TIMEOUT_S)
            except Exception as exc:  # any failure just means we fall back to the table
                self._discovery_failed_at = time.monotonic()
                log.info("[context] window discovery failed (%s); using the built-in table", str(exc) or repr(exc))
                return
            self._discovered = parse_model_list(body)
            self._resolved.clear()
            self._last = None
            log.info("[context] discovered windows: %s", self._discovered or "none")


def budget_for(output_limit: int | None, *, reserve_tokens: int, context_window: int) -> int:
    """The prompt's budget: the window minus the reply's reserve, never below zero."""
    reserve = reserve_for(output_limit, reserve_tokens=reserve_tokens, context_window=context_window)
    return max(context_window - reserve, 0)


def reserve_for(output_limit: int | None, *, reserve_tokens: int, context_window: int) -> int:
    """The room kept for the reply: what the request asks for (`output_limit`, read by its wire format),
    else the configured reserve, capped at a quarter of the window."""
    if output_limit is not None and output_limit > 0:
        return output_limit
    return min(reserve_tokens, context_window // 4)
