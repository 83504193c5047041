"""What one request costs against its model's window: the count, the window, the budget.

`Counted` is a parsed and counted request. `Accounting` adds the model's limits, the budget
(window minus the reply's reserve) and the calibration ratios that convert our count into the
upstream's units. There are two ratios: one for the message text and one for the fixed part,
which a chat template may render at any size (see `inflight.policy.calibration`).
"""

from __future__ import annotations

import math
from dataclasses import field, replace
from typing import Any

from inflight.compaction.report import Window
from inflight.formats import CoreRequest, WireFormat
from inflight.frozen import frozen
from inflight.policy.calibration import RATIO_BOUNDS
from inflight.policy.windows import ModelLimits
from inflight.tokens import EncodingChoice, RequestCount


@frozen(slots=True)
class Counted:
    """A request we can count: the client's bytes and parsed body, its wire format, its format-neutral form
    (`request`), its encoding and its count."""

    raw: bytes
    payload: dict[str, Any]
    wire: WireFormat
    request: CoreRequest
    encoding: EncodingChoice
    count: RequestCount
    model: str = field(init=False)  # the request's model, asked for many times a request

    def __post_init__(self) -> None:
        object.__setattr__(self, "model", self.request.model)

    @property
    def streams(self) -> bool:
        """Whether the client asked for an event stream (a response read before relaying stops at its first event):
        by its path, where the format puts it there, else by the body's `stream`."""
        if self.request.streams is not None:
            return self.request.streams
        return self.payload.get("stream") is True


@frozen(slots=True)
class Accounting:
    model: str
    encoding: str
    exact: bool  # the model's own tokenizer; otherwise an estimate corrected by calibration
    limits: ModelLimits
    budget: int
    raw_tokens: int  # our count before calibration
    ratio: float  # upstream tokens per token of ours, for message text
    estimated: bool = False  # the tokenizer failed on part of the request, which was estimated from its length
    approximated: int = 0  # messages older than a window's worth, estimated from samples (`TokenCounter`)
    fixed_tokens: int = 0  # the fixed part of `raw_tokens`: tool definitions and reply priming
    fixed_ratio: float = 1.0  # upstream tokens per token of ours, for the fixed part (0: its template drops tools)

    @property
    def prompt_tokens(self) -> int:
        return self.calibrated(self.raw_tokens)

    @property
    def uniform(self) -> bool:
        return self.ratio == 1.0 and self.fixed_ratio == 1.0

    def calibrated(self, tokens: int) -> int:
        """Convert our count of this request, or of its compacted form (same fixed part), to the upstream's units."""
        if self.uniform:
            return tokens
        fixed = min(self.fixed_tokens, tokens)
        return math.ceil((tokens - fixed) * self.ratio + fixed * self.fixed_ratio)

    def calibrated_text(self, tokens: int) -> int:
        """Convert our count of some message text to the upstream's units."""
        return tokens if self.ratio == 1.0 else math.ceil(tokens * self.ratio)

    def own_units(self, limit: int) -> int:
        """The largest count of ours (fixed part plus text) that the upstream would count as at most `limit`.

        Compaction counts in our units, so this is the size it aims for."""
        if self.uniform:
            return limit
        fixed = self.fixed_tokens
        units = max(0, int(fixed + (limit - fixed * self.fixed_ratio) / self.ratio))
        while units > 0 and self.calibrated(units) > limit:  # floating point rounded up: step down
            units -= 1
        while self.calibrated(units + 1) <= limit:  # or rounded down: a few more tokens still fit
            units += 1
        return units

    def counted_as(self, tokens: int) -> Accounting:
        """This request with ratios that match the upstream's count (`tokens`).

        Only the text's ratio changes, unless it would fall out of bounds; then one ratio is used for both parts."""
        text = self.raw_tokens - self.fixed_tokens
        ratio = (tokens - self.fixed_tokens * self.fixed_ratio) / text if text > 0 else 0.0
        if RATIO_BOUNDS[0] <= ratio <= RATIO_BOUNDS[1]:
            return replace(self, ratio=ratio)
        return replace(self, ratio=tokens / self.raw_tokens, fixed_ratio=tokens / self.raw_tokens)

    def window(self) -> Window:
        """The request's size against its window, for the turn's report."""
        return Window(self.prompt_tokens, self.limits.context_window, self.budget, estimated=self.estimated)

    def log_fields(self) -> dict[str, object]:
        fields: dict[str, object] = {
            "tokens": f"{self.prompt_tokens}/{self.budget}",
            "window": self.limits.context_window,
            "source": self.limits.source,
        }
        if not self.exact:
            fields["calibration"] = f"{self.ratio:.3f}"
            fields["calibration_fixed"] = f"{self.fixed_ratio:.3f}"
        if self.estimated:
            fields["count"] = "estimate"
        if self.approximated:
            fields["approximated"] = self.approximated
        return fields
