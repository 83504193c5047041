"""Price prompts as providers bill them, and find the compaction schedule that costs least per turn.

A provider bills the prefix its cache serves at a fraction of the input price (`cache_read`) and the rest at
the input price, or, where it bills writes (Anthropic), at `cache_write`. Between compactions a conversation
only grows, so each turn reads what it sent before and writes what it added; a compaction writes everything
after the fixed part again. A conversation that stays between `kept` tokens (just after a compaction) and
`trigger` (where the next one happens), growing by `growth` a turn, costs per turn, besides what every schedule
pays alike (reading the fixed part, writing each turn's new tokens):

    reads   cache_read * (the mean size between kept and trigger, less the fixed part)
    rewrite (cache_write * (kept - fixed) + summary) / (the turns from kept to trigger)

where `summary` is the summarizer call that got it down to `kept`, if one did. A lower `kept` is always
cheaper; a later `trigger` spreads the rewrite over more turns but reads more each turn, so the cheapest
trigger is `kept + sqrt(2 * growth * rewrite / cache_read)`, as far as the budget allows.
"""

from __future__ import annotations

import math

from inflight.config.pricing import Prices
from inflight.frozen import frozen


def prompt_cost(prices: Prices, *, tokens: int, cached: int) -> float:
    """The cost of a prompt of `tokens` whose first `cached` are served by the cache; the rest is billed as written."""
    cached = min(max(cached, 0), tokens)
    return cached * prices.cache_read + (tokens - cached) * prices.cache_write


@frozen
class Schedule:
    """A conversation's growth and fixed part with prices, to compute what a compaction schedule costs per turn."""

    prices: Prices
    growth: int  # tokens a turn adds
    fixed: int  # tokens no compaction removes (tools, system, the head): read from the cache every turn

    def turns(self, *, kept: int, trigger: int) -> float:
        """The turns from a compaction that leaves `kept` tokens to the next one at `trigger`."""
        return max((trigger - kept) / self.growth, 1.0) if self.growth > 0 else math.inf

    def per_turn(self, *, kept: int, trigger: int, summary: float = 0.0) -> float:
        """The cost per turn that depends on the schedule (see the module's docstring)."""
        kept = max(kept, self.fixed)
        reads = self.prices.cache_read * (max((kept + max(trigger, kept)) / 2 - self.fixed, 0))
        turns = self.turns(kept=kept, trigger=trigger)
        if math.isinf(turns):
            return reads
        rewrite = self.prices.cache_write * (kept - self.fixed) + summary
        return reads + rewrite / turns

    def best_trigger(self, *, kept: int, limit: int, summary: float = 0.0) -> int:
        """The size at which the next compaction costs least per turn, at most `limit` (where it must happen)."""
        if self.growth <= 0 or self.prices.cache_read <= 0:
            return limit
        rewrite = self.prices.cache_write * max(kept - self.fixed, 0) + summary
        best = kept + math.sqrt(2 * self.growth * rewrite / self.prices.cache_read)
        return int(min(max(best, kept + self.growth), limit))


def summary_cost(prices: Prices, *, input_tokens: int, output_tokens: int) -> float:
    """The cost of a summarizer call: its prompt is a transcript the cache has never seen, its reply the summary."""
    return input_tokens * prices.input + output_tokens * prices.output
