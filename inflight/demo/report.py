"""The demo's table: per turn, what the client sent, what went upstream and what inflight did; then the totals.

Figures are the proxy's own (`x-inflight-tokens-before`/`-after`, `x-inflight-actions`) and the
upstream's (its count of what arrived, and of the summary requests it answered). It fits in 80
columns, with long action lists wrapped under their column.
"""

from __future__ import annotations

import re
import textwrap
from collections.abc import Sequence

from inflight.demo.upstream import Seen
from inflight.frozen import frozen

# What each action in the table means, said under it for the actions it shows.
MEANINGS = {
    "truncate": "an oversized tool output cut to its head and tail",
    "mask": "old tool outputs replaced by a placeholder",
    "summarize": "older history summarized while this turn waited",
    "summary-precomputed": "older history replaced by a summary made ahead, in the background",
    "summary-cached": "an earlier turn's summary sent again, byte for byte",
    "summary-pending": "the summary made ahead is not ready: a ledger stands in",
    "fallback": "no summary: a ledger of what was dropped stands in",
    "churn": "a tight window: the next compaction is a few turns away",
    "retry": "refused as too long by the upstream: compacted again and resent",
}
ACTIONS_WIDTH = 40
ACTIONS_AT = 47  # the column the actions start at


@frozen
class Row:
    turn: int
    messages: int
    client_tokens: int  # the request as the client sent it, as the proxy counted it
    sent_tokens: int  # the request as it went upstream
    actions: str
    budget: int  # the window less the room kept for the reply
    problem: str | None = None  # the answer was not a 200: its status and message
    compaction_id: str | None = None  # the compaction that made what was sent (or, in shadow mode, planned)

    @property
    def compacted(self) -> bool:
        return self.sent_tokens < self.client_tokens


@frozen
class Totals:
    turns: int
    client_tokens: int
    sent_tokens: int
    compacted: int
    compactions: int  # distinct compactions made (the viewer's count); a later turn may replay one
    over_window: int
    failed: int
    upstream: Seen

    @classmethod
    def of(cls, rows: Sequence[Row], seen: Seen, *, window: int) -> Totals:
        return cls(
            turns=len(rows),
            client_tokens=sum(row.client_tokens for row in rows),
            sent_tokens=sum(row.sent_tokens for row in rows),
            compacted=sum(row.compacted and row.problem is None for row in rows),
            compactions=len({row.compaction_id for row in rows if row.compaction_id}),
            over_window=sum(row.client_tokens > window for row in rows),
            failed=sum(row.problem is not None for row in rows),
            upstream=seen,
        )


def render(rows: Sequence[Row], totals: Totals, *, proxy: str, upstream: str, window: int, model: str) -> str:
    budget = max((row.budget for row in rows), default=0)
    lines = [
        f"inflight demo: a recorded SWE-agent session, {counted(len(rows), 'turn')}, replayed through inflight",
        f"  proxy     {proxy}/v1   {model}, window {window:,} tokens (budget {budget:,})",
        "            budget: the most it sends upstream; the rest is kept for the reply",
        f"  upstream  {upstream}/v1   scripted: answers from the recording",
        "",
        f"{'turn':>4}  {'msgs':>4}  {'client sent':>11}  {'sent upstream':>13}  {'saved':>5}  actions",
        f"{'─' * 4}  {'─' * 4}  {'─' * 11}  {'─' * 13}  {'─' * 5}  {'─' * ACTIONS_WIDTH}",
    ]
    for row in rows:
        over = "*" if row.client_tokens > window else " "
        saved = f"{100 * (1 - row.sent_tokens / row.client_tokens):.0f}%" if row.compacted else ""
        what = row.actions if row.problem is None else f"FAILED {row.problem}"
        if row.problem is not None and row.actions.startswith("shadow"):  # what would have gone instead
            what = f"{row.actions}; FAILED {row.problem}"
        spaced = re.sub(r",(?=[^\d ])", ", ", what)  # between actions, not inside a number
        wrapped = textwrap.wrap(spaced, ACTIONS_WIDTH, break_on_hyphens=False) or [""]
        lines.append(
            f"{row.turn:>4}  {row.messages:>4}  {row.client_tokens:>10,}{over}  {row.sent_tokens:>13,}  {saved:>5}  "
            f"{wrapped[0]}"
        )
        lines += [" " * ACTIONS_AT + more for more in wrapped[1:]]
    lines += [f"{'─' * 4}  {'─' * 4}  {'─' * 11}  {'─' * 13}  {'─' * 5}", *summary(totals, window)]
    return "\n".join(lines + legend(rows))


def legend(rows: Sequence[Row]) -> list[str]:
    """What the actions the table shows mean, one line each."""
    shown = {action for row in rows for action in re.split(r"[,:; ]+", row.actions)}
    meant = [f"  {action:<20} {meaning}" for action, meaning in MEANINGS.items() if action in shown]
    return ["", "actions:", *meant] if meant else []


def summary(totals: Totals, window: int) -> list[str]:
    """The totals as a row under the columns, then what the upstream saw."""
    seen = totals.upstream
    saved = f"{100 * (1 - totals.sent_tokens / totals.client_tokens):.0f}%" if totals.client_tokens else ""
    lines = [
        f"{'all':>4}  {'':>4}  {totals.client_tokens:>10,}   {totals.sent_tokens:>13,}  {saved:>5}  "
        f"{totals.compacted} of {counted(totals.turns, 'turn')} compacted",
        "",
    ]
    if totals.compactions:
        lines.append(
            f"{counted(totals.compactions, 'compaction')} made (the viewer's count); the other compacted turns sent "
            "one again"
        )
    if totals.over_window:
        lines.append(
            f"* over the {window:,}-token window: without inflight the upstream refuses {them(totals.over_window)}"
        )
    lines.append(
        f"summarizer calls: {seen.summaries} (answered by the scripted upstream: {seen.summary_prompt_tokens:,} "
        f"tokens in, {seen.summary_completion_tokens:,} out)"
    )
    lines.append(
        f"the upstream counted {seen.prompt_tokens:,} prompt tokens in {counted(seen.requests, 'request')} and "
        f"refused {seen.refused}" + (f"; {counted(totals.failed, 'turn')} FAILED" if totals.failed else "")
    )
    return lines


def them(n: int) -> str:
    return "it" if n == 1 else "them"


def counted(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"
