"""Stage 3 when summaries are made in the background: put in place the summary a job made ahead.

The summary (`Record.ahead`) was made while earlier turns were answered, so the turn that needs
it pays nothing for it. It is used on any turn that compacts again (the prefix changes on that
turn anyway, so it might as well shrink as far as it can and stay put longer), and on the first
turn after it lands when the record holds only a local digest (the crossing turn could not wait
for it): from then on the conversation carries the LLM summary instead of the digest.
"""

from __future__ import annotations

from inflight.compaction.actions import Action
from inflight.compaction.middle import choose_cut, grown_ledger, replace_middle
from inflight.compaction.stage import Work
from inflight.config import Summarize as SummarizeSettings

PRECOMPUTED = Action.SUMMARY_PRECOMPUTED


class PrecomputedStage:
    def __init__(self, settings: SummarizeSettings) -> None:
        self.settings = settings

    async def run(self, work: Work) -> None:
        draft = work.draft
        ahead = draft.ahead
        usable = ahead is not None and ahead.usable(
            head_len=draft.head_len,
            prefix_len=draft.prefix_len,
            fallback=draft.fallback,
            digests=work.conversation.digests,
        )
        if ahead is None or not usable:  # none, or stale: the conversation moved on, or the record summarizes further
            draft.ahead = None
            return
        if not (work.prune or work.summary_due() or draft.fallback):
            return
        cut = max(ahead.cut, draft.prefix_len)
        same_span = ahead.ledger is not None and ahead.base == draft.prefix_len and cut == ahead.cut
        ledger = ahead.ledger if same_span and ahead.ledger is not None else grown_ledger(work, cut)
        replace_middle(work, cut, ahead.text, settings=self.settings, fallback=False, ledger=ledger, action=PRECOMPUTED)
        draft.ahead = None
        later = choose_cut(work, self.settings) if work.tokens > work.aim else None
        if later is not None and later > draft.prefix_len:
            # The turns since the job's cut leave the request above its aim: a turn or two below the next
            # compaction, which would rewrite the prefix again soon. They join the summary's span, kept
            # by the ledger (their commands and facts), and the request lands near its aim.
            ledger = grown_ledger(work, later)
            replace_middle(
                work, later, ahead.text, settings=self.settings, fallback=False, ledger=ledger, action=PRECOMPUTED
            )
        if work.tokens > work.budget.summarize_at:  # the conversation grew past what it covers: the digest cuts on
            work.middle_replaced = False
