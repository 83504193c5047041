"""The `pricing:` section of the YAML: what the upstream bills per token, including cache reads and writes.

Prices are relative, in units of one uncached input token, so one table serves every currency and model tier.
Each wire format has defaults that follow its provider's billing (Anthropic bills a cache write at 1.25 times an
input token, OpenAI bills none); a `models:` glob overrides some of them for the models it matches.
"""

from __future__ import annotations

import fnmatch
from typing import Literal

from pydantic import Field

from inflight.config.section import Section

FormatName = Literal["chat_completions", "responses", "messages", "gemini"]


class Prices(Section):
    """One price list: each figure is a multiple of one uncached input token's price."""

    input: float = Field(1.0, ge=0)
    cache_read: float = Field(0.1, ge=0)
    cache_write: float = Field(1.0, ge=0)  # a prompt token written to the cache (1.0: no premium)
    output: float = Field(5.0, ge=0)


class PriceOverride(Section):
    """Some of a price list's figures, for the models a glob matches (the rest come from the format's list)."""

    input: float | None = Field(None, ge=0)
    cache_read: float | None = Field(None, ge=0)
    cache_write: float | None = Field(None, ge=0)
    output: float | None = Field(None, ge=0)


# OpenAI caches prefixes on its own and bills no write; Anthropic bills a 5-minute cache write at 1.25x; Gemini's
# implicit cache bills a read at a quarter of an input token and no write.
DEFAULT_FORMAT_PRICES: dict[str, Prices] = {
    "chat_completions": Prices(),
    "responses": Prices(),
    "messages": Prices(cache_write=1.25),
    "gemini": Prices(cache_read=0.25),
}


class Pricing(Section):
    """What the upstream bills: each format's defaults, overridden per format, then per model glob."""

    formats: dict[FormatName, PriceOverride] = Field(default_factory=dict)
    models: dict[str, PriceOverride] = Field(default_factory=dict)

    def for_request(self, wire: str, model: str) -> Prices:
        """The prices for one request: its format's list, overridden by the first `models:` glob that matches."""
        prices = DEFAULT_FORMAT_PRICES.get(wire) or Prices()
        own: PriceOverride | None = self.formats.get(wire)  # type: ignore[call-overload]
        if own is not None:
            prices = prices.model_copy(update=own.model_dump(exclude_none=True))
        name = model.lower()
        for pattern, override in self.models.items():
            if fnmatch.fnmatchcase(name, pattern.lower()):
                return prices.model_copy(update=override.model_dump(exclude_none=True))
        return prices
