"""Stage 5: if still over the limit, halve the biggest editable messages one at a time (never opaque ones).

The order is: messages after the head (so a huge observation goes first), then the head's messages
other than the system prompt (such as a long demonstration), then the system prompt, and last the
assistant messages that a user message answers (a text-action agent's commands, cut last so their
observations keep making sense). The task (the head's last user message) and the latest request are
never touched. Nor is the latest user message (a text-action agent's latest observation, which it acts
on next), unless it alone takes more than a quarter of the budget. If these alone do not fit, the
request cannot be made to fit and the outcome says so. SWE-agent's head holds a demonstration of tens
of kilobytes, which is cut before the latest turn.
"""

from __future__ import annotations

from collections.abc import Sequence

from inflight.compaction.actions import Action
from inflight.compaction.conversation import Message, last_user_index, pinned, text_of
from inflight.compaction.record import Replacement
from inflight.compaction.stage import Work
from inflight.compaction.stages.truncate import Limits, truncate_message

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
        work.outcome.actions.append(Action.TRUNCATE)

    @staticmethod
    def phases(work: Work) -> list[set[int]]:
        """The indices each phase may cut: the body, then the head (both without system/developer messages),
        then the system/developer messages wherever they are, then the commands that user messages answer."""
        messages, head_len = work.conversation.messages, work.draft.head_len
        task = last_user_index(messages[:head_len])  # the head's last user message: the agent's task
        kept = {work.latest_request, task, work.latest_user_message()}
        touchable = set(range(len(messages))) - kept - work.conversation.opaque
        system = {i for i in touchable if pinned(messages[i])}  # in the head or later; cut late
        head = {i for i in touchable if i < head_len} - system
        commands = {i for i in touchable - head - system if answered(messages, i)}
        return [touchable - head - system - commands, head, system, commands]

    def halve_biggest(self, work: Work, allowed: set[int]) -> int | None:
        """Halve the biggest message in `allowed` that can be cut; return the tokens saved, or None if none can."""
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
            if new_tokens >= tokens:  # with its marker, the cut saves nothing: try the next one
                continue
            work.draft.replaced[origin] = Replacement(work.conversation.digests[origin], cut, new_tokens, "truncate")
            return tokens - new_tokens
        return None


def answered(messages: Sequence[Message], index: int) -> bool:
    """Whether an assistant message is followed by a user message answering it.

    That is a text-action agent's command and its observation, or a reply and the user's next request. Cutting
    the command would leave the observation answering nothing."""
    following = messages[index + 1] if index + 1 < len(messages) else None
    return messages[index].get("role") == "assistant" and following is not None and following.get("role") == "user"
