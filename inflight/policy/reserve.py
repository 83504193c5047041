"""Learn how much room a reply needs from the model's answers so far, for upstreams that do not count `max_tokens`.

Claude Code asks for a `max_tokens` of 32k to 128k on every request. Where the upstream does not require the
prompt to fit in the window minus that (Anthropic's Messages API today), reserving all of it would leave a
third of a small window unused, and a fixed quarter of the window is a guess. Reserving what the client's
answers actually needed, with a margin and a floor, uses the window and still leaves room for an unusually long reply.
"""

from __future__ import annotations

import math
from collections import deque

from cachetools import LRUCache

from inflight.policy.tenants import tenant_model_key

SAMPLES = 32  # how many of the latest answers a reserve is learned from
MIN_SAMPLES = 3  # with fewer answers than this, the configured reserve is used
PERCENTILE = 0.95
MARGIN = 1.5  # room above the percentile, for an answer longer than any so far
MIN_RESERVE = 4096  # never less than this: one long answer (a file written whole) must still fit
MAX_ENTRIES = 4096  # how many (model, client) pairs are tracked (least recently used dropped)


class OutputSizes:
    """The latest answer sizes per model and client, and the reply reserve they imply."""

    def __init__(self, max_key_chars: int = 256) -> None:
        self._max_key_chars = max_key_chars
        self._sizes: LRUCache[str, deque[int]] = LRUCache(maxsize=MAX_ENTRIES)

    def record(self, model: str, output_tokens: int, *, tenant: str = "") -> None:
        key = tenant_model_key(model, tenant, self._max_key_chars)
        sizes = self._sizes.get(key)
        if sizes is None:
            sizes = self._sizes[key] = deque(maxlen=SAMPLES)
        sizes.append(max(output_tokens, 0))

    def reserve(self, model: str, *, tenant: str = "") -> int | None:
        """The reply reserve for this client's next request to `model`; None when too few answers were seen."""
        sizes = self._sizes.get(tenant_model_key(model, tenant, self._max_key_chars))
        if sizes is None or len(sizes) < MIN_SAMPLES:
            return None
        ordered = sorted(sizes)
        high = ordered[min(len(ordered) - 1, math.ceil(PERCENTILE * len(ordered)) - 1)]
        return max(math.ceil(high * MARGIN), MIN_RESERVE)
