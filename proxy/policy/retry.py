"""What to aim at when retrying a request the upstream refused for its length. Pure arithmetic.

The refusal may name the window (the budget follows from it), the upstream's own prompt count
(we undercounted by that factor), both, or nothing (llama-cpp-python's empty stream).
"""

from __future__ import annotations

# Without usable numbers, what was sent was too long: aim this far below the smaller of the two.
BLIND_SHRINK = 0.75
# A new limit within 2% of the old one would change nothing worth a retry.
NO_CHANGE = 0.98


def retry_limit(*, previous: int, learned_budget: int | None, sent: int, upstream_prompt: int | None) -> int:
    """The (calibrated) budget to compact the retry against.

    previous: the budget the refused request was prepared against; learned_budget: the budget the
    refusal's window gives; sent: our calibrated count of what was sent; upstream_prompt: the
    refusal's own count of it.
    """
    limit = previous
    if learned_budget is not None:
        limit = min(limit, learned_budget)
    if upstream_prompt and sent and sent < upstream_prompt <= sent * 4:  # we undercounted: shrink by the same factor
        limit = int(limit * sent / upstream_prompt)
    if limit >= previous * NO_CHANGE:
        # 75% of a budget far above what was sent would change nothing: take the smaller of the two.
        limit = int(min(previous, sent) * BLIND_SHRINK)
    return max(limit, 1)
