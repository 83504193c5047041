"""Learning how far our estimate is from the upstream's own count, from the `usage` it reports.

Models that do not use a tiktoken encoding (Llama, Qwen, Mistral, ...) are counted with
o200k_base as an estimate. Their upstream reports the true `usage.prompt_tokens`; the ratio of
the two, averaged over the last few responses, corrects later estimates for that model.
"""

from __future__ import annotations

import logging
from collections import deque
from dataclasses import dataclass, field

log = logging.getLogger("inflight")

RATIO_BOUNDS = (0.25, 4.0)  # outside these, a usage figure is about something else (cached, images, ...)


@dataclass
class Calibration:
    """A bounded moving average of `usage.prompt_tokens / estimate` per model."""

    window: int = 16
    _samples: dict[str, deque[float]] = field(default_factory=dict)

    def record(self, model: str, *, estimate: int, actual: int) -> None:
        if estimate <= 0 or actual <= 0:
            return
        ratio = actual / estimate
        if not RATIO_BOUNDS[0] <= ratio <= RATIO_BOUNDS[1]:
            return
        samples = self._samples.setdefault(model, deque(maxlen=self.window))
        samples.append(ratio)
        if log.isEnabledFor(logging.DEBUG):
            log.debug("[context] calibration %s: %.3f over %d responses", model, self.ratio(model), len(samples))

    def ratio(self, model: str) -> float:
        samples = self._samples.get(model)
        return sum(samples) / len(samples) if samples else 1.0

    def report(self) -> dict[str, dict[str, float]]:
        return {model: {"ratio": round(self.ratio(model), 4), "samples": len(s)} for model, s in self._samples.items()}
