"""Learning how far our estimate is from the upstream's own count, from the `usage` it reports.

Models that do not use a tiktoken encoding (Llama, Qwen, Mistral, ...) are counted with
o200k_base as an estimate. Their upstream reports the true `usage.prompt_tokens`; the ratio of
the two, averaged over the last few responses, corrects later estimates for that model.

Each tenant (`proxy.policy.tenants`) learns its own ratios: a client whose requests count far
from our estimate (large tool definitions, say) moves only its own, never another client's.
"""

from __future__ import annotations

import logging
from collections import deque
from dataclasses import dataclass, field

from cachetools import LRUCache

from proxy.policy.tenants import bounded_key

log = logging.getLogger("inflight")

RATIO_BOUNDS = (0.25, 4.0)  # outside these, a usage figure is about something else (cached, images, ...)


@dataclass
class Calibration:
    """A bounded moving average of `usage.prompt_tokens / estimate` per tenant and model, for the most
    recent `max_entries` of them (the others are forgotten: they start again from 1.0)."""

    window: int = 16
    max_entries: int = 4096
    max_key_chars: int = 256  # a longer model name keys its entry clipped, with a digest of the whole
    _samples: LRUCache[tuple[str, str], deque[float]] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._samples = LRUCache(maxsize=self.max_entries)

    def record(self, model: str, *, estimate: int, actual: int, tenant: str = "") -> None:
        if estimate <= 0 or actual <= 0:
            return
        ratio = actual / estimate
        if not RATIO_BOUNDS[0] <= ratio <= RATIO_BOUNDS[1]:
            return
        key = (tenant, bounded_key(model, self.max_key_chars))
        samples = self._samples.get(key)
        if samples is None:
            samples = self._samples[key] = deque(maxlen=self.window)
        samples.append(ratio)
        if log.isEnabledFor(logging.DEBUG):
            ratio = sum(samples) / len(samples)
            log.debug("[context] calibration %s: %.3f over %d responses", key[1], ratio, len(samples))

    def ratio(self, model: str, *, tenant: str = "") -> float:
        samples = self._samples.get((tenant, bounded_key(model, self.max_key_chars)))
        return sum(samples) / len(samples) if samples else 1.0

    def report(self) -> dict[str, dict[str, float]]:
        """Each model's ratio over every tenant's samples, and how many there are."""
        totals: dict[str, tuple[float, int]] = {}
        for (_, model), samples in list(self._samples.items()):
            total, count = totals.get(model, (0.0, 0))
            totals[model] = (total + sum(samples), count + len(samples))
        return {model: {"ratio": round(total / count, 4), "samples": count} for model, (total, count) in totals.items()}
