"""Stage 5: still over the limit, halve the biggest messages we may touch (never an opaque one), one at a time.

In this order: the messages after the head (a huge observation goes first), then the head's own
messages other than the system prompt (a long demonstration), then the system prompt. The task
(the head's last user message) and the latest user request are never touched: if they alone do
not fit, the request cannot be made to fit and the outcome says so.
"""

from __future__ import annotations

from proxy.compaction.conversation import last_user_index, pinned, text_of
from proxy.compaction.record import Replacement
from proxy.compaction.stage import Work
from proxy.compaction.stages.truncate import Limits, truncate_message

LAST_RESORT_MIN_BYTES = 256
MIN_TOKENS = 32


class LastResortStage:
    async def run(self, work: Work) -> None:
        total = work.tokens
        if total <= work.budget.limit:
            return
        for phase in self.phases(work):
            while total > work.budget.limit:
                shrunk = self.halve_biggest(work, phase)
                if shrunk is None:
                    break
                total -= shrunk
        work.outcome.actions.append("truncate")

    @staticmethod
    def phases(work: Work) -> list[set[int]]:
        """The indices each phase may cut: the body, then the head, each less system/developer messages
        (wherever they stand), then those."""
        messages, head_len = work.conversation.messages, work.draft.head_len
        latest_request = work.latest_request
        task = last_user_index(messages[:head_len])  # the head's last user message: what the agent is solving
        touchable = set(range(len(messages))) - {latest_request, task} - work.conversation.opaque
        system = {i for i in touchable if pinned(messages[i])}  # in the head or later: cut last
        head = {i for i in touchable if i < head_len} - system
        return [touchable - head - system, head, system]

    def halve_biggest(self, work: Work, allowed: set[int]) -> int | None:
        """Cut the biggest message of `allowed` that can be cut; the tokens saved, or None when none can be."""
        candidates = [
            (tokens, origin, message)
            for message, tokens, origin in work.draft.view(work.conversation)
            if origin is not None and origin in allowed and tokens > MIN_TOKENS
        ]
        candidates.sort(key=lambda c: c[0], reverse=True)
        for tokens, origin, message in candidates:
            text = text_of(message.get("content"))
            size = len(text.encode())
            if size <= LAST_RESORT_MIN_BYTES:
                continue
            cut = truncate_message(
                message, Limits(max(4, text.count("\n") // 2), max(LAST_RESORT_MIN_BYTES, size // 2))
            )
            if cut is None:
                continue
            new_tokens = work.count_message(cut)
            if new_tokens >= tokens:  # the cut (and what its marker says) saves nothing: try the next one
                continue
            work.draft.replaced[origin] = Replacement(work.conversation.digests[origin], cut, new_tokens, "truncate")
            return tokens - new_tokens
        return None
