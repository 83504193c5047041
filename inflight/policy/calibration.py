"""Learn how far our token estimate is from the upstream's own count, from the `usage` it reports.

Models that do not use a tiktoken encoding (Llama, Qwen, Mistral, ...) are counted with
o200k_base as an estimate. Their upstream reports the true `usage.prompt_tokens`, and later
estimates for that model are corrected using the last few responses.

Our count has two parts the upstream sees differently. The message text differs from ours by the
ratio of the two tokenizers. The fixed part (tool definitions, reply priming) is whatever the
model's chat template makes of it: larger, smaller, or nothing (llama.cpp's template for SmolLM2
leaves the tools out). A response's ratio `actual / estimate` is therefore a mix,
`text * share + fixed * (1 - share)`, where `share` is the message text's part of our count. So a
first turn that is mostly tool definitions says little about the text; simply averaging the ratios
would let such a turn drag SmolLM2's ratio to 0.48 for the turns of code that follow. Instead the
calibration fits that line through the last few (share, ratio) samples: its value at share 1 is the
text's ratio, at share 0 the fixed part's. Samples that all have about the same share fix the line only
near that share; the rest comes from a prior (see `fit`).

Each tenant (`inflight.policy.tenants`) learns its own ratios: a client whose requests count far
from our estimate (large tool definitions, say) changes only its own, never another client's.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field

from cachetools import LRUCache

from inflight.frozen import frozen
from inflight.policy.tenants import bounded_key

log = logging.getLogger("inflight")

RATIO_BOUNDS = (0.25, 4.0)  # for the text: outside these, a usage figure measures something else (cache, images)
FIXED_BOUNDS = (0.0, 4.0)  # for the fixed part: a chat template may leave the tool definitions out altogether
# How much more confident we are, before any sample, that the text's ratio is near 1 than the fixed part's:
# tokenizers differ by tens of percent, chat templates' renderings of tools by whole multiples.
TEXT_PRIOR_WEIGHT = 10.0
# How much the samples' shares must spread (their sum of squared deviations) before the slope they show
# outweighs the prior's: as much as two samples 0.1 apart. Otherwise turns whose shares differ by a point
# or two would set the slope from noise.
SLOPE_PRIOR_WEIGHT = 0.005


@frozen(slots=True)
class Ratios:
    """The upstream's tokens per token of ours, for message text and for the fixed part."""

    text: float = 1.0
    fixed: float = 1.0


Sample = tuple[float, float]  # (the message text's share of our count, actual / estimate)


def fit(samples: Sequence[Sample]) -> Ratios:
    """Fit the line `ratio = text * share + fixed * (1 - share)` through `samples` by least squares.

    The line passes through the samples' mean (mean share, mean ratio), so at the samples' typical share
    the estimate is their average. Its slope is the samples' own when their shares spread enough (a first
    turn of tool definitions, then turns of code); otherwise it leans towards the prior's slope, which puts
    the difference from 1 in the fixed part, where it is more likely (`TEXT_PRIOR_WEIGHT`). Both ratios are
    kept within their bounds, still matching the mean where possible.
    """
    if not samples:
        return Ratios()
    count = len(samples)
    share_sum = ratio_sum = share_squares = products = 0.0
    for s, r in samples:  # one pass: this runs after every answer
        share_sum += s
        ratio_sum += r
        share_squares += s * s
        products += s * r
    share, ratio = share_sum / count, ratio_sum / count
    spread = max(0.0, share_squares - share_sum * share)
    covariance = products - share_sum * ratio
    slope = (covariance + SLOPE_PRIOR_WEIGHT * prior_slope(share, ratio)) / (spread + SLOPE_PRIOR_WEIGHT)
    text = clamp(ratio + slope * (1 - share), RATIO_BOUNDS)
    fixed = ratio - slope * share if share >= 1 else (ratio - text * share) / (1 - share)
    if not FIXED_BOUNDS[0] <= fixed <= FIXED_BOUNDS[1]:
        fixed = clamp(fixed, FIXED_BOUNDS)
        if share > 0:
            text = clamp((ratio - fixed * (1 - share)) / share, RATIO_BOUNDS)
    return Ratios(text, fixed)


def prior_slope(share: float, ratio: float) -> float:
    """The slope through (share, ratio) whose ends are closest to 1, the text's end weighted
    `TEXT_PRIOR_WEIGHT` times the fixed part's; used when the samples alone cannot tell the two apart."""
    text_weight, fixed_weight = TEXT_PRIOR_WEIGHT, 1.0
    numerator = (ratio - 1) * (fixed_weight * share - text_weight * (1 - share))
    return numerator / (text_weight * (1 - share) ** 2 + fixed_weight * share**2)


def clamp(value: float, bounds: tuple[float, float]) -> float:
    return min(max(value, bounds[0]), bounds[1])


@dataclass
class _Learned:
    """One tenant's samples for one model, and the ratios fitted to them (refitted per sample, read per request)."""

    samples: deque[Sample]
    ratios: Ratios = field(default_factory=Ratios)


@dataclass
class Calibration:
    """Ratios fitted per tenant and model to the last `window` samples.

    Only the `max_entries` most recently used (tenant, model) pairs are kept; forgotten ones start again from 1.0."""

    window: int = 16
    max_entries: int = 4096
    max_key_chars: int = 256  # longer model names are clipped and hashed (`bounded_key`)
    _learned: LRUCache[tuple[str, str], _Learned] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._learned = LRUCache(maxsize=self.max_entries)

    def record(self, model: str, *, estimate: int, actual: int, fixed: int = 0, tenant: str = "") -> None:
        """Add a sample: the upstream counted `actual` where we counted `estimate`.

        `fixed` is the part of `estimate` that is tool definitions and reply priming (0: all message text)."""
        if estimate <= 0 or actual <= 0 or not 0 <= fixed < estimate:
            return
        share, ratio = (estimate - fixed) / estimate, actual / estimate
        # No pair of ratios within bounds gives this: the usage figure measures something else.
        if not RATIO_BOUNDS[0] * share + FIXED_BOUNDS[0] * (1 - share) <= ratio <= RATIO_BOUNDS[1]:
            return
        key = (tenant, bounded_key(model, self.max_key_chars))
        learned = self._learned.get(key)
        if learned is None:
            learned = self._learned[key] = _Learned(deque(maxlen=self.window))
        samples, sample = learned.samples, (share, ratio)
        unchanged = len(samples) == samples.maxlen and samples[0] == sample  # it replaces its equal: same fit
        samples.append(sample)
        if not unchanged:
            learned.ratios = fit(samples)
        if log.isEnabledFor(logging.DEBUG):
            text, fixed_ratio, count = learned.ratios.text, learned.ratios.fixed, len(learned.samples)
            log.debug("[context] calibration %s: %.3f, fixed %.3f, over %d responses", key[1], text, fixed_ratio, count)

    def ratios(self, model: str, *, tenant: str = "") -> Ratios:
        learned = self._learned.get((tenant, bounded_key(model, self.max_key_chars)))
        return learned.ratios if learned is not None else Ratios()

    def ratio(self, model: str, *, tenant: str = "") -> float:
        """The message text's ratio alone."""
        return self.ratios(model, tenant=tenant).text

    def report(self) -> dict[str, dict[str, float]]:
        """Per model, the ratios fitted to all tenants' samples, the samples' mean share of message text and their
        number. A mean share near 1 means the fixed part's ratio comes mostly from the prior."""
        pooled: dict[str, list[Sample]] = {}
        for (_, model), learned in list(self._learned.items()):
            pooled.setdefault(model, []).extend(learned.samples)
        return {model: describe(samples) for model, samples in pooled.items()}


def describe(samples: Sequence[Sample]) -> dict[str, float]:
    ratios = fit(samples)
    return {
        "ratio": round(ratios.text, 4),
        "fixed_ratio": round(ratios.fixed, 4),
        "message_share": round(sum(share for share, _ in samples) / len(samples), 4),
        "samples": len(samples),
    }
