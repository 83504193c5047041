"""Decide whether a summarizer's reply is good enough to replace the conversation's history.

A reply is used (and kept for every later turn) only if it is complete (`finish_reason` `stop`),
of a sensible length, has the prompt's sections, and is not a copy of its input. Otherwise a
canned reply, an "OK", a summary cut off at `max_tokens` or a paste of the tool output would
be all the agent remembers from then on.
"""

from __future__ import annotations

import re

MIN_CHARS = 120  # a reply shorter than this cannot have the sections (an "OK", a canned line)
COPY_SHARE = 0.6  # a reply is a copy if this share of its lines appear verbatim in its input
# The lines of a reply looked for in its input, evenly spaced: the check's work is then linear in what was sent.
COPY_SAMPLE_LINES = 400


def headings(prompt: str) -> list[str]:
    """The section headings a prompt asks for: its `## ` lines before the example."""
    body = prompt.split("An example of a good note")[0]
    return [line[3:].strip() for line in body.splitlines() if line.startswith("## ")]


def rejection(text: str, *, finish_reason: object, transcript: str, sections: list[str]) -> str | None:
    """Why this reply must not be used (a short word for the header and the log), or None if it is fine."""
    if finish_reason != "stop":
        return "truncated" if finish_reason == "length" else "unfinished"
    if len(text.strip()) < MIN_CHARS:  # a long reply is clipped when used; a short one says nothing
        return "length"
    missing = [s for s in sections if not re.search(rf"^#+\s*{re.escape(s)}", text, re.MULTILINE | re.IGNORECASE)]
    if missing:
        return "sections"
    lines = [line.strip() for line in text.splitlines() if len(line.strip()) >= 20 and not line.startswith("#")]
    lines = lines[:: max(1, len(lines) // COPY_SAMPLE_LINES)]  # each line is looked for in the whole transcript
    if lines and sum(line in transcript for line in lines) >= COPY_SHARE * len(lines):
        return "copy"
    return None
