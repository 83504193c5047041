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

import asyncio
import heapq
from collections.abc import Sequence

from inflight.compaction.actions import Action
from inflight.compaction.conversation import Message, last_user_index, pinned, text_of
from inflight.compaction.record import Replacement
from inflight.compaction.stage import Work
from inflight.compaction.stages.truncate import Limits, truncate_message

LAST_RESORT_MIN_BYTES = 256
MIN_TOKENS = 32
CUTS_BETWEEN_YIELDS = 64  # cuts made between two chances for a cancellation (the client left) to stop the stage

# (minus its tokens, its origin, the message as it would be sent): the biggest first on a heap
Candidate = tuple[int, int, Message]


class LastResortStage:
    async def run(self, work: Work) -> None:
        total = work.tokens
        if total <= work.budget.limit:
            return
        cuts = 0
        for phase in self.phases(work):
            # The phase's messages are ranked once, and a message cut goes back in with its new size: each cut costs
            # a heap operation, not a new view of the whole conversation.
            heap = self.candidates(work, phase)
            while total > work.budget.limit:
                shrunk = self.halve_biggest(work, heap)
                if shrunk is None:
                    break
                total -= shrunk
                cuts += 1
                if cuts % CUTS_BETWEEN_YIELDS == 0:
                    await asyncio.sleep(0)  # a cancelled request stops here, even in a worker thread's loop
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

    @staticmethod
    def candidates(work: Work, allowed: set[int]) -> list[Candidate]:
        """The messages in `allowed` as they would now be sent, on a heap, biggest first."""
        heap = [
            (-tokens, origin, message)
            for message, tokens, origin in work.draft.view(work.conversation)
            if origin is not None and origin in allowed and tokens > MIN_TOKENS
        ]
        heapq.heapify(heap)
        return heap

    def halve_biggest(self, work: Work, heap: list[Candidate]) -> int | None:
        """Halve the biggest message on `heap` that can be cut; return the tokens saved, or None if none can.

        A message that cannot be cut leaves the heap (it would not be cut later either); one cut goes back."""
        while heap:
            negative, origin, message = heapq.heappop(heap)
            tokens = -negative
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
            if new_tokens > MIN_TOKENS:
                heapq.heappush(heap, (-new_tokens, origin, cut))
            return tokens - new_tokens
        return None


def answered(messages: Sequence[Message], index: int) -> bool:
    """Whether an assistant message is followed by a user message answering it.

    That is a text-action agent's command and its observation, or a reply and the user's next request. Cutting
    the command would leave the observation answering nothing."""
    following = messages[index + 1] if index + 1 < len(messages) else None
    return messages[index].get("role") == "assistant" and following is not None and following.get("role") == "user"
