"""Stage 4: when no LLM summary could be made, drop the middle with a marker and a local digest.

The digest says what the dropped messages did (tool calls, file paths, error lines) so the agent
is not left without a trace of them; an earlier summary's text is kept above it.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from proxy.compaction.conversation import Message, describe_call, text_of
from proxy.compaction.middle import due_cut, replace_middle, span
from proxy.compaction.summary import clip, summary_text
from proxy.compaction.work import Work
from proxy.config import Summarize as SummarizeSettings

DIGEST_LIMIT = 800

PATH_PATTERN = re.compile(
    r"(?:[\w.-]+/)+[\w.-]+\.\w+|\b[\w-]+\.(?:py|js|ts|go|rs|java|c|h|cpp|rb|md|json|ya?ml|toml)\b"
)
ERROR_PATTERN = re.compile(r"^.*\b(?:Error|Exception|Traceback|FAILED|error:|failed)\b.*$", re.MULTILINE)


def local_digest(messages: Sequence[Message], *, limit: int = DIGEST_LIMIT) -> str:
    """What the dropped messages did, without an LLM: tool calls, file paths, error lines."""
    calls = [
        describe_call(call["function"])
        for message in messages
        for call in message.get("tool_calls") or []
        if isinstance(call, dict) and isinstance(call.get("function"), dict)
    ]
    texts = [text_of(m.get("content")) for m in messages]
    paths = list(dict.fromkeys(path for text in texts for path in PATH_PATTERN.findall(text)))
    errors = list(dict.fromkeys(line.strip()[:160] for text in texts for line in ERROR_PATTERN.findall(text)))
    lines = [
        f"[inflight: {len(messages)} earlier messages were dropped to fit the context window; "
        "no summary could be made. Local digest:]"
    ]
    if calls:
        lines.append("Tool calls: " + "; ".join(calls[-12:]))
    if paths:
        lines.append("Files: " + ", ".join(paths[:20]))
    if errors:
        lines.append("Errors: " + " | ".join(errors[-5:]))
    return clip("\n".join(lines), limit)


class DigestStage:
    def __init__(self, settings: SummarizeSettings) -> None:
        self.settings = settings

    async def run(self, work: Work) -> None:
        cut = due_cut(work, self.settings)
        if cut is None:
            return
        text = local_digest(span(work, cut))
        if work.draft.summary is not None:
            text = f"{summary_text(work.draft.summary)}\n\n{text}"  # keep what the earlier summary knew
        replace_middle(work, cut, text, settings=self.settings, fallback=True)
