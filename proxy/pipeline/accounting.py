"""What one request costs against its model's window: the count, the window, the budget.

`Counted` is a parsed and counted request; `Accounting` adds the model's limits, the budget
(window minus the reply's reserve) and the calibration ratio that turns our count into the
upstream's units.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from proxy.formats import CoreRequest, WireFormat
from proxy.policy.windows import ModelLimits
from proxy.tokens import EncodingChoice, RequestCount


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
    ratio: float
    estimated: bool = False  # the tokenizer failed on part of the request, which was estimated from its size
    approximated: int = 0  # messages older than a window's worth, estimated from samples (`TokenCounter`)

    @property
    def prompt_tokens(self) -> int:
        return self.calibrated(self.raw_tokens)

    def calibrated(self, tokens: int) -> int:
        return tokens if self.ratio == 1.0 else math.ceil(tokens * self.ratio)

    def headers(self) -> dict[str, str]:
        headers = {
            "x-inflight-prompt-tokens": str(self.prompt_tokens),
            "x-inflight-context-window": str(self.limits.context_window),
            "x-inflight-budget": str(self.budget),
        }
        if self.estimated:
            headers["x-inflight-count"] = "estimate"
        return headers

    def log_fields(self) -> dict[str, object]:
        fields: dict[str, object] = {
            "tokens": f"{self.prompt_tokens}/{self.budget}",
            "window": self.limits.context_window,
            "source": self.limits.source,
        }
        if not self.exact:
            fields["calibration"] = f"{self.ratio:.3f}"
        if self.estimated:
            fields["count"] = "estimate"
        if self.approximated:
            fields["approximated"] = self.approximated
        return fields
