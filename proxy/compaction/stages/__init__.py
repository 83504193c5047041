"""The compaction stages, each a small object with `run(work)`, and the ordered list the config builds.

Order matters: cheap, local rewrites first (truncate, mask), then the summary of the middle, its
local fallback, and the last resort.
"""

from __future__ import annotations

from collections.abc import Callable

from proxy.compaction.stages.digest import DigestStage
from proxy.compaction.stages.last_resort import LastResortStage
from proxy.compaction.stages.mask import MaskStage
from proxy.compaction.stages.precomputed import PrecomputedStage
from proxy.compaction.stages.summarize import SummarizeStage
from proxy.compaction.stages.truncate import TruncateStage
from proxy.compaction.summary import Summarize
from proxy.compaction.work import Stage
from proxy.config import Compaction


def build_stages(
    settings: Compaction,
    *,
    summarize: Summarize | None,
    count_text: Callable[[str], int],
    summarizer_input_tokens: int,
    background: bool = False,
) -> list[Stage]:
    """The stages for one model's `compaction:` settings; without a summarizer, the digest does its job.

    `background`: summaries are made by background jobs (`proxy.compaction.background`), and the
    compaction only puts in place one made ahead; else the summarizer is called here."""
    stages: list[Stage] = [TruncateStage(settings.truncate), MaskStage(settings.mask)]
    if background:
        stages.append(PrecomputedStage(settings.summarize))
    elif summarize is not None:
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
