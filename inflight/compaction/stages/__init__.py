"""The compaction stages, each a small object with `run(work)`, and the ordered list built from the config.

Order matters: cheap local rewrites first (truncate, mask), then the summary of the middle, its
local fallback (the digest), and the last resort.
"""

from __future__ import annotations

from collections.abc import Callable

from inflight.compaction.stage import Stage
from inflight.compaction.stages.digest import DigestStage
from inflight.compaction.stages.last_resort import LastResortStage
from inflight.compaction.stages.mask import MaskStage
from inflight.compaction.stages.precomputed import PrecomputedStage
from inflight.compaction.stages.summarize import SummarizeStage
from inflight.compaction.stages.truncate import TruncateStage
from inflight.compaction.summary_job import Summarize
from inflight.config import Compaction


def build_stages(
    settings: Compaction,
    *,
    summarize: Summarize | None,
    count_text: Callable[[str], int],
    summarizer_input_tokens: int,
    background: bool = False,
) -> list[Stage]:
    """Build the stages for one model's `compaction:` settings; without a summarizer, the digest replaces it.

    With `background`, summaries are made by background jobs (`inflight.compaction.background.scheduler`) and
    the compaction first uses one made ahead; otherwise the summarizer is called here, after masking."""
    if background and settings.goal == "cost":  # masking first: it costs no call, and the summary only what it pays
        stages: list[Stage] = [TruncateStage(settings.truncate), MaskStage(settings.mask)]
        stages.append(PrecomputedStage(settings.summarize, after_masking=True))
    elif background:  # use a summary made ahead first: with it in place, the tail may need no masking at all
        stages = [PrecomputedStage(settings.summarize)]
        stages += [TruncateStage(settings.truncate), MaskStage(settings.mask)]
    else:
        stages = [TruncateStage(settings.truncate), MaskStage(settings.mask)]
    if summarize is not None and not background:
        stages.append(
            SummarizeStage(
                settings.summarize, summarize=summarize, count_text=count_text, input_tokens=summarizer_input_tokens
            )
        )
    stages += [DigestStage(settings.summarize), LastResortStage()]
    return stages


__all__ = [
    "DigestStage",
    "LastResortStage",
    "MaskStage",
    "PrecomputedStage",
    "SummarizeStage",
    "TruncateStage",
    "build_stages",
]
