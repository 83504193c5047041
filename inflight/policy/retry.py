"""Compute the budget for retrying a request the upstream refused as too long. Pure arithmetic.

The refusal may name the window (the budget follows from it), the upstream's own prompt count
(we undercounted by that factor), both, or nothing (llama-cpp-python's empty stream).
"""

from __future__ import annotations

from inflight.frozen import frozen

# Without usable numbers we only know what was sent was too long: aim this fraction of it.
BLIND_SHRINK = 0.75


@frozen
class RetryAim:
    """The budget the retry is compacted against.

    When the refusal gives numbers showing the request was too long (a window, the upstream's own count),
    `limit` is an ordinary budget and the retry is compacted against it like any request, as the first
    attempt would have been had the proxy known. Without such numbers (`blind`), `limit` is already the
    goal, a quarter below what was refused, and the retry aims straight at it: applying `target` to it
    again would compound two shrinks (0.5 x 0.75) and drop context the upstream never asked us to drop.
    """

    limit: int
    blind: bool


def retry_limit(*, previous: int, learned_budget: int | None, sent: int, upstream_prompt: int | None) -> RetryAim:
    """Return the calibrated budget to compact the retry against.

    previous: the budget the refused request was prepared against; learned_budget: the budget the
    refusal's window gives; sent: our calibrated count of what was sent; upstream_prompt: the
    refusal's own count of it.
    """
    limit = previous
    if learned_budget is not None:
        limit = min(limit, learned_budget)
    if upstream_prompt and sent and sent < upstream_prompt <= sent * 4:  # we undercounted: shrink by the same factor
        limit = int(limit * sent / upstream_prompt)
    if sent > limit:
        return RetryAim(max(limit, 1), blind=False)
    # No numbers, or numbers by which what was sent fits: our count is off by an unknown amount. Aim below it.
    return RetryAim(max(int(min(previous, sent) * BLIND_SHRINK), 1), blind=True)
