"""Stage 3 with background summaries: use the summary a job made ahead.

The summary (`Record.ahead`) was made while earlier turns were being answered, so the turn that needs
it does not wait for it. It is used on any turn that compacts again, since the prefix changes on that
turn anyway and may as well shrink as far as it can to stay stable longer. It is also used on the first
turn after it is saved when the record has only a local digest (the turn that needed it could not wait):
from then on the conversation carries the LLM summary instead of the digest.
"""

from __future__ import annotations

from inflight.compaction.actions import Action
from inflight.compaction.middle import choose_cut, grown_ledger, replace_middle
from inflight.compaction.stage import Work
from inflight.config import Summarize as SummarizeSettings

PRECOMPUTED = Action.SUMMARY_PRECOMPUTED


class PrecomputedStage:
    def __init__(self, settings: SummarizeSettings, *, after_masking: bool = False) -> None:
        self.settings = settings
        self.after_masking = after_masking  # `goal: cost`: it runs after masking, and only when a summary is due

    async def run(self, work: Work) -> None:
        draft = work.draft
        ahead = draft.ahead
        usable = ahead is not None and ahead.usable(
            head_len=draft.head_len,
            prefix_len=draft.prefix_len,
            fallback=draft.fallback,
            digests=work.conversation.matched,
        )
        if ahead is None or not usable:  # none, or stale: the conversation changed, or the record summarizes more
            draft.ahead = None
            return
        # With `goal: cost` masking comes first, and the summary only when it pays for itself (`summary_due`).
        due = work.summary_due() or draft.fallback or (work.prune and not self.after_masking)
        if not due:
            return
        cut = max(ahead.cut, draft.prefix_len)
        same_span = ahead.ledger is not None and ahead.base == draft.prefix_len and cut == ahead.cut
        ledger = ahead.ledger if same_span and ahead.ledger is not None else grown_ledger(work, cut)
        replace_middle(work, cut, ahead.text, settings=self.settings, fallback=False, ledger=ledger, action=PRECOMPUTED)
        draft.ahead = None
        later = choose_cut(work, self.settings) if work.tokens > work.aim else None
        if later is not None and later > draft.prefix_len:
            # The turns since the job's cut leave the request above its aim, only a turn or two before the next
            # compaction would rewrite the prefix again. So they join the summarized span, recorded only in the
            # ledger (their commands and facts), and the request ends near its aim.
            ledger = grown_ledger(work, later)
            replace_middle(
                work, later, ahead.text, settings=self.settings, fallback=False, ledger=ledger, action=PRECOMPUTED
            )
        if work.tokens > work.budget.summarize_at:  # still too big after the summary: let the digest stage cut more
            work.middle_replaced = False
