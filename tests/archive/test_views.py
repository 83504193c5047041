"""The archive's figures over a conversation's turns, in process: what they cost and used counts only what the
upstream answered, and "without inflight" leaves out the turns the upstream would have refused for their size."""

from __future__ import annotations

from typing import Any

from inflight.archive.views import cache_figures, usage_of


def turn(status: int, tokens: int, sent: int, cost: int, cost_client: int) -> dict[str, Any]:
    return {"status": status, "tokens": tokens, "sent": sent, "window": 8000, "cost": cost, "cost_client": cost_client}


def test_a_refused_turn_costs_nothing_and_one_over_the_window_costs_nothing_without_inflight() -> None:
    turns = [
        turn(200, 5000, 5000, 500, 500),
        turn(200, 9000, 6000, 600, 900),  # compacted: without inflight the upstream would have refused it
        turn(400, 7000, 7000, 700, 700),  # refused: nobody billed it
        turn(502, 3000, 3000, 300, 300),  # the upstream failed
    ]
    figures = cache_figures(turns)
    assert (figures.cost, figures.client_cost) == (500 + 600, 500)
    used = usage_of(turns)
    assert (used["client_tokens"], used["upstream_tokens"]) == (5000 + 9000, 5000 + 6000)
