"""Build what the JSON endpoints return about a conversation: its turns, growth, turns left and cache figures.

Growth is the increase in the client's own tokens from one turn to the next, averaged over the newest
turns (a turn that shrank, such as an agent starting over under the same key, is left out). The next
compaction happens when what is sent passes `prune_at`, or `summarize_at` once a compaction's record
is in use (each turn records which, as `next_at`). What is sent grows as the client's history does, so
the turns left are the room below that threshold divided by the growth. The prompt cache's figures
(rewrites per 100 turns, the cached share) are computed over the stored turns that measured them.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from typing import Any

from inflight.compaction.prefix import CacheFigures, CacheTurn

GROWTH_TURNS = 20  # the newest turns the average growth is taken over


def average_growth(turns: Sequence[dict[str, Any]]) -> float | None:
    recent = [int(turn["tokens"]) for turn in turns[-GROWTH_TURNS - 1 :]]
    steps = [after - before for before, after in itertools.pairwise(recent) if after > before]
    return sum(steps) / len(steps) if steps else None


def turns_left(turns: Sequence[dict[str, Any]], growth: float | None) -> int | None:
    """Turns before the sent tokens pass the next compaction's threshold at this growth.

    0 means the next turn compacts; None means unknown."""
    if not turns or not growth:
        return None
    last = turns[-1]
    room = int(last.get("next_at", last["prune_at"])) - int(last["sent"])
    return max(0, math.floor(room / growth))


def conversation_summary(meta: dict[str, Any]) -> dict[str, Any]:
    """A conversation as `GET /inflight/conversations` lists it."""
    counts = {"turn_count": meta["turns"], "compaction_count": meta["compactions"]}
    return {key: value for key, value in meta.items() if key not in ("turns", "compactions")} | counts


def cache_figures(turns: Sequence[dict[str, Any]]) -> CacheFigures:
    """The prompt cache's figures over the stored turns that were measured (`compaction.prefix`). The costs count
    the turns the upstream answered; and without inflight, a turn over the window would have been refused, unbilled."""
    figures = CacheFigures()
    for turn in turns:
        cached = turn.get("cached")
        if cached is not None:
            figures.add(CacheTurn(int(turn.get("sent") or 0), int(cached), bool(turn.get("rewrite"))))
        if turn.get("cost") is not None and turn.get("cost_client") is not None and answered(turn):
            figures.cost += float(turn["cost"])
            if not over_window(turn):
                figures.client_cost += float(turn["cost_client"])
    return figures


def answered(turn: dict[str, Any]) -> bool:
    """Whether the upstream answered the turn (the status archived is the upstream's), and so billed it."""
    return int(turn.get("status") or 0) < 400


def over_window(turn: dict[str, Any]) -> bool:
    """Whether the client's own request was over the model's window (the upstream would have refused it)."""
    return int(turn.get("tokens") or 0) > int(turn.get("window") or 0) > 0


def usage_of(turns: Sequence[dict[str, Any]]) -> dict[str, int]:
    """What the stored turns used and saved, as `/inflight/usage` counts a client's requests: a shadow turn's
    upstream tokens are the client's own (its `sent` is only what would have been sent)."""
    client = upstream = avoided = 0
    for turn in turns:
        if not answered(turn):  # as `/inflight/usage`: a refused or failed turn adds no tokens
            continue
        tokens, shadow = int(turn["tokens"]), bool(turn.get("shadow"))
        sent = tokens if shadow else int(turn["sent"])
        client += tokens
        upstream += sent
        over = tokens > int(turn["window"]) and sent < tokens
        avoided += over and not shadow and int(turn.get("status") or 0) < 400
    return {
        "requests": len(turns),
        "client_tokens": client,
        "upstream_tokens": upstream,
        "saved_tokens": client - upstream,
        "refusals_avoided": avoided,
    }


def conversation_view(meta: dict[str, Any], turns: list[dict[str, Any]]) -> dict[str, Any]:
    """A conversation with its stored turns (oldest first), its compactions (the viewer's markers) and outlook."""
    growth = average_growth(turns)
    compactions = [
        {
            "id": turn["compaction_id"],
            "n": turn["n"],
            "time": turn["time"],
            "actions": turn["actions"],
            "shadow": bool(turn.get("shadow")),
        }
        for turn in turns
        if turn.get("compacted_here") and turn.get("compaction_id")
    ]
    cache = cache_figures(turns)
    per_100, share = cache.rewrites_per_100_turns, cache.cached_share
    return conversation_summary(meta) | {
        "average_growth": round(growth, 1) if growth is not None else None,
        "rewrites": cache.rewrites,  # of the stored turns: each one a prefix the upstream had to write again
        "rewrites_per_100_turns": round(per_100, 1) if per_100 is not None else None,
        "cached_share": round(share, 3) if share is not None else None,
        "cost": round(cache.cost) if cache.client_cost else None,
        "cost_client": round(cache.client_cost) if cache.client_cost else None,
        "turns_left": turns_left(turns, growth),
        "usage": usage_of(turns),
        "compactions": compactions,
        "turns": turns,
    }
