"""Stage 4: when no LLM summary could be made, drop the middle and keep its ledger instead.

The ledger (`proxy.compaction.ledger`) says what the dropped messages did: commands and their
outcomes, files, errors and names, verbatim. An earlier LLM summary's text is kept above it.
"""

from __future__ import annotations

from proxy.compaction.middle import due_cut, grown_ledger, replace_middle
from proxy.compaction.stage import Work
from proxy.compaction.summary_job import written_part
from proxy.config import Summarize as SummarizeSettings

NO_SUMMARY_NOTE = (
    "[inflight: earlier messages were dropped to fit the context window and no summary could be made; "
    "the ledger below is what they did.]"
)


class DigestStage:
    def __init__(self, settings: SummarizeSettings) -> None:
        self.settings = settings

    async def run(self, work: Work) -> None:
        cut = due_cut(work, self.settings)
        if cut is None:
            return
        draft = work.draft
        earlier = written_part(draft.summary) if draft.summary is not None else ""
        text = f"{earlier}\n\n{NO_SUMMARY_NOTE}" if earlier else NO_SUMMARY_NOTE
        replace_middle(work, cut, text, settings=self.settings, fallback=True, ledger=grown_ledger(work, cut))
