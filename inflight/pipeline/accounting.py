"""What one request costs against its model's window: the count, the window, the budget.

`Counted` is a parsed and counted request; `Accounting` adds the model's limits, the budget
(window minus the reply's reserve) and the calibration ratios that turn our count into the
upstream's units: one for the message text, one for the fixed part (tool definitions and reply
priming), which no compaction removes and a chat template may render at any size (see
`inflight.policy.calibration`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

from inflight.compaction.report import Window
from inflight.formats import CoreRequest, WireFormat
from inflight.policy.calibration import RATIO_BOUNDS
from inflight.policy.windows import ModelLimits
from inflight.tokens import EncodingChoice, RequestCount


@dataclass(frozen=True)
class Counted:
    """A request we can count: the client's bytes and parsed body, its wire format, the core's view of
    it (`request`), its encoding and its count."""

    raw: bytes
    payload: dict[str, Any]
    wire: WireFormat
    request: CoreRequest
    encoding: EncodingChoice
    count: RequestCount

    @property
    def model(self) -> str:
        return self.request.model

    @property
    def streams(self) -> bool:
        """Whether the client asked for an event stream (what a held response is read up to)."""
        return self.payload.get("stream") is True


@dataclass(frozen=True)
class Accounting:
    model: str
    encoding: str
    exact: bool  # the model's own tokenizer; otherwise an estimate corrected by calibration
    limits: ModelLimits
    budget: int
    raw_tokens: int  # our count before calibration
    ratio: float  # the upstream's tokens per token of ours of message text
    estimated: bool = False  # the tokenizer failed on part of the request, which was estimated from its size
    approximated: int = 0  # messages older than a window's worth, estimated from samples (`TokenCounter`)
    fixed_tokens: int = 0  # what of `raw_tokens` compaction cannot remove: tool definitions, reply priming
    fixed_ratio: float = 1.0  # the upstream's tokens per token of ours of that part (0: its template drops tools)

    @property
    def prompt_tokens(self) -> int:
        return self.calibrated(self.raw_tokens)

    @property
    def uniform(self) -> bool:
        return self.ratio == 1.0 and self.fixed_ratio == 1.0

    def calibrated(self, tokens: int) -> int:
        """Our count of this request, or of it compacted (the same fixed part), in the upstream's units."""
        if self.uniform:
            return tokens
        fixed = min(self.fixed_tokens, tokens)
        return math.ceil((tokens - fixed) * self.ratio + fixed * self.fixed_ratio)

    def calibrated_text(self, tokens: int) -> int:
        """Our count of some message text in the upstream's units."""
        return tokens if self.ratio == 1.0 else math.ceil(tokens * self.ratio)

    def own_units(self, limit: int) -> int:
        """The largest count of ours of this request (its fixed part, and the text beside it) that the upstream
        counts as at most `limit`: what compaction, which counts in our units, aims at."""
        if self.uniform:
            return limit
        fixed = self.fixed_tokens
        units = max(0, int(fixed + (limit - fixed * self.fixed_ratio) / self.ratio))
        while units > 0 and self.calibrated(units) > limit:  # a float's last bit rounded up
            units -= 1
        while self.calibrated(units + 1) <= limit:  # or down: a few more tokens still fit
            units += 1
        return units

    def counted_as(self, tokens: int) -> Accounting:
        """This request as the upstream counted it (`tokens`): the text's ratio that makes it so, the fixed
        part's kept; one ratio for both when that one would be out of bounds."""
        text = self.raw_tokens - self.fixed_tokens
        ratio = (tokens - self.fixed_tokens * self.fixed_ratio) / text if text > 0 else 0.0
        if RATIO_BOUNDS[0] <= ratio <= RATIO_BOUNDS[1]:
            return replace(self, ratio=ratio)
        return replace(self, ratio=tokens / self.raw_tokens, fixed_ratio=tokens / self.raw_tokens)

    def window(self) -> Window:
        """The request against its window, as the turn's report says it."""
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
