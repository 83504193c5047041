"""Narrow down a window between the largest prompt accepted and the smallest refused, when refusals give no numbers.

OpenAI's Responses API and some servers refuse an over-long prompt without giving the window or the
prompt's count. Each such refusal still shows the window is smaller than what was sent, and each answered
request shows it is at least that big. So, per model and client, the largest prompt answered and the
smallest refused bracket the window. Once a refusal has been seen, requests aim at the largest size
answered below it, less a margin for our counting error (or a quarter below the refusal when nothing
that large was answered), so a conversation meets at most one refusal. A refusal is forgotten after
an hour, and at once when a larger prompt is answered: the upstream's window may have grown, or the
refusal may have been a passing fault.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from cachetools import LRUCache

from inflight.policy.retry import BLIND_SHRINK
from inflight.policy.tenants import tenant_model_key

MAX_ENTRIES = 4096  # how many (model, client) pairs are tracked (least recently used dropped)
REFUSAL_TTL_S = 3600.0  # how long a refusal limits requests before the window is probed again
MARGIN = 0.98  # aim this fraction of the largest size answered: our count of a compacted request may be a bit low


@dataclass
class Bracket:
    """Sizes in the upstream's units (our calibrated count): the largest answered and the smallest refused (0: none)."""

    accepted: int = 0
    refused: int = 0
    refused_at: float = 0.0  # time.monotonic() of the refusal

    def ceiling(self, now: float) -> int | None:
        """The size to aim for while a refusal is in force; None when none is."""
        if not self.refused or now - self.refused_at > REFUSAL_TTL_S:
            return None
        below = int(self.refused * BLIND_SHRINK)
        return max(int(self.accepted * MARGIN), below) if self.accepted < self.refused else below


class WindowBrackets:
    """A bracket per model and client, so one client's refusals limit only its own requests."""

    def __init__(self, max_key_chars: int = 256) -> None:
        self._max_key_chars = max_key_chars
        self._brackets: LRUCache[str, Bracket] = LRUCache(maxsize=MAX_ENTRIES)

    def accepted(self, model: str, tokens: int, *, tenant: str = "") -> None:
        """Note that the upstream answered a prompt of `tokens`, so the window is at least that."""
        key = tenant_model_key(model, tenant, self._max_key_chars)
        bracket = self._brackets.get(key)
        if bracket is None:
            self._brackets[key] = Bracket(accepted=tokens)
        elif bracket.refused and tokens >= bracket.refused:  # answered at the refused size: the refusal is stale
            bracket.accepted, bracket.refused = tokens, 0
        elif tokens > bracket.accepted:
            bracket.accepted = tokens

    def refused(self, model: str, tokens: int, *, tenant: str = "") -> None:
        """Note that the upstream refused a prompt of `tokens` without numbers, so the window is smaller."""
        key = tenant_model_key(model, tenant, self._max_key_chars)
        bracket = self._brackets.get(key) or Bracket()
        now = time.monotonic()
        if tokens > 0 and (bracket.ceiling(now) is None or tokens < bracket.refused):
            bracket.refused, bracket.refused_at = tokens, now
        if bracket.accepted >= bracket.refused:  # the counts drifted; trust the refusal, which is newer
            bracket.accepted = 0
        self._brackets[key] = bracket

    def largest_answered(self, model: str, *, tenant: str = "") -> int:
        """The largest prompt `model` answered for this client (0: none known)."""
        bracket = self._brackets.get(tenant_model_key(model, tenant, self._max_key_chars))
        return bracket.accepted if bracket is not None else 0

    def ceiling(self, model: str, *, tenant: str = "") -> int | None:
        """The largest prompt to send `model` for this client; None when no refusal without numbers is in force."""
        bracket = self._brackets.get(tenant_model_key(model, tenant, self._max_key_chars))
        return bracket.ceiling(time.monotonic()) if bracket is not None else None

    def report(self) -> dict[str, dict[str, int]]:
        """The brackets that have a refusal (the others only record what was answered), for `/inflight/stats`."""
        return {key: {"accepted": b.accepted, "refused": b.refused} for key, b in self._brackets.items() if b.refused}
