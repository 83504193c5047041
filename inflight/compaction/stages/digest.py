"""Stage 4: when no LLM summary could be made, drop the middle and keep its ledger instead.

The ledger (`inflight.compaction.ledger`) lists what the dropped messages did: commands and their
outcomes, files, errors and names, verbatim. An earlier LLM summary's text is kept above it, with a
note that the summary covers only the messages before; the note never claims "no summary could be
made" right under a summary.
"""

from __future__ import annotations

from inflight.compaction.middle import due_cut, grown_ledger, replace_middle
from inflight.compaction.stage import Work
from inflight.compaction.summary_job import written_part
from inflight.config import Summarize as SummarizeSettings

NO_SUMMARY_NOTE = (
    "[inflight: earlier messages were dropped to fit the context window and no summary could be made; "
    "the ledger below is what they did.]"
)
LATER_NOTE = (
    "[inflight: the summary above covers the earlier messages; later ones were dropped too, to fit the "
    "context window, and the ledger below is what they did.]"
)


def without_notes(text: str) -> str:
    """A summary's written part without any notes a digest added, leaving only what an LLM wrote, if anything."""
    return text.replace(NO_SUMMARY_NOTE, "").replace(LATER_NOTE, "").strip()


def digest_text(earlier: str) -> str:
    """The text a digest puts above its ledger: the earlier LLM summary, if any, with the matching note."""
    summary = without_notes(earlier)
    return f"{summary}\n\n{LATER_NOTE}" if summary else NO_SUMMARY_NOTE


class DigestStage:
    def __init__(self, settings: SummarizeSettings) -> None:
        self.settings = settings

    async def run(self, work: Work) -> None:
        cut = due_cut(work, self.settings)
        if cut is None:
            return
        draft = work.draft
        text = digest_text(written_part(draft.summary) if draft.summary is not None else "")
        replace_middle(work, cut, text, settings=self.settings, fallback=True, ledger=grown_ledger(work, cut))
