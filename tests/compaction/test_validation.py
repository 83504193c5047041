"""The check of a summarizer's reply: its work grows linearly with the reply and the transcript it summarizes."""

from __future__ import annotations

import orjson

from inflight.compaction.validation import rejection
from tests.support.growth import MAX_GROWTH, SERIES, growth_in_parses, in_parses

SECTIONS = ["Task", "State of the work"]


def reply_and_transcript(lines: int) -> tuple[str, str]:
    """A reply of `lines` lines with the sections, none copied from a transcript of as many other lines."""
    facts = "\n".join(f"- found fact {i} in the parser" for i in range(lines))
    reply = "## Task\nFix it.\n## State of the work\n" + facts
    transcript = "\n".join(f"$ run step {i}: the output of the step" for i in range(lines))
    return reply, transcript


def test_a_good_reply_passes() -> None:
    reply, transcript = reply_and_transcript(20)
    assert rejection(reply, finish_reason="stop", transcript=transcript, sections=SECTIONS) is None
    copied = "## Task\nx\n## State of the work\n" + transcript
    assert rejection(copied, finish_reason="stop", transcript=transcript, sections=SECTIONS) == "copy"


def test_the_copy_check_grows_linearly_with_the_reply_and_its_transcript() -> None:
    """Each line of the reply was looked for in the whole transcript: a 10 MB reply took seconds."""

    def cost(lines: int) -> float:
        reply, transcript = reply_and_transcript(lines // 4)
        check = lambda: rejection(reply, finish_reason="stop", transcript=transcript, sections=SECTIONS)  # noqa: E731
        return in_parses(check, orjson.dumps([reply, transcript]))

    growth, costs = growth_in_parses(cost)
    assert growth < MAX_GROWTH, f"{SERIES} lines cost {[round(c, 1) for c in costs]} parses of the reply"
