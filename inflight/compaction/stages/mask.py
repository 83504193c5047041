"""Stage 2: replace old tool results with a short placeholder that still names the call.

Every result older than the agent's recent work (`Work.recent_from`: the newest `keep_tool_results` results
and `keep_recent_tokens`) is masked at once. When that recent work does not fit the budget, all but the newest
`keep_tool_results` results are masked, then all but `keep_tool_results_min` if the request is still above the
compaction's aim (`Work.aim`: the target, or lower when the conversation
grows fast; see `inflight.compaction.depth`). Masking in one big step down to the aim, rather than one
result per turn, means the next turns need no change and the prefix the upstream caches stays stable as
long as the budget allows. Masking many costs the cache no more than masking one, since the prefix changes
from the first masked result either way.

The placeholder depends only on the call and the result, so the same result is masked to the same
bytes on every turn, which the upstream's prompt cache relies on.
"""

from __future__ import annotations

from typing import Any

from inflight.compaction.actions import Action
from inflight.compaction.conversation import (
    Message,
    calls_of_results,
    describe_call,
    is_observation,
    observation_regex,
    text_of,
)
from inflight.compaction.facts import facts_note, text_commands
from inflight.compaction.record import Replacement
from inflight.compaction.retrieval import handle_of, read_back_note
from inflight.compaction.stage import Work
from inflight.config import Mask as MaskSettings

TOOL_PRUNED = "[tool output pruned:"
OBSERVATION_PRUNED = "[observation pruned:"


def pruned(prefix: str, what: str, message: Message, tokens: int, handle: str | None = None) -> str:
    """The one line that replaces a result: what ran, how big its output was, that output's errors and paths, and
    the handle it can be read back by.

    It depends only on the message, so the same result is masked to the same bytes every turn."""
    note = facts_note(text_of(message.get("content")))
    back = f"; {read_back_note(handle)}" if handle else ""
    return f"{prefix} {what} returned {tokens:,} tokens{'; ' + note if note else ''}{back}]"


def placeholder(message: Message, function: dict[str, Any] | None, tokens: int, handle: str | None = None) -> Message:
    """The masked form of a tool result: the same role and id, with one line of content."""
    text = pruned(TOOL_PRUNED, describe_call(function), message, tokens, handle)
    masked = {key: (text if key == "content" else value) for key, value in message.items()}
    masked.setdefault("content", text)
    return masked


def observation_placeholder(message: Message, command: str | None, tokens: int, handle: str | None = None) -> Message:
    """The masked form of a text-action agent's observation (a user message): what ran and how big its output was."""
    ran = f"`{command.splitlines()[0][:160]}`" if command else "a command"
    return {**message, "content": pruned(OBSERVATION_PRUNED, ran, message, tokens, handle)}


class MaskStage:
    def __init__(self, settings: MaskSettings) -> None:
        self.keep = (settings.keep_tool_results, settings.keep_tool_results_min)
        self.observation = observation_regex(settings.observation_pattern)

    def observations(self, work: Work) -> dict[int, str | None]:
        """Map user messages after the head that match the observation pattern to the command each answers."""
        messages, head_len = work.conversation.messages, work.draft.head_len
        if self.observation is None:
            return {}
        latest = work.latest_request
        found: dict[int, str | None] = {}
        command: str | None = None
        for index in range(head_len, len(messages)):
            message = messages[index]
            if message.get("role") == "assistant":
                commands = text_commands(text_of(message.get("content")))
                command = commands[-1] if commands else None
            elif index != latest and is_observation(messages, index, self.observation):
                found[index] = command
        return found

    async def run(self, work: Work) -> None:
        if not work.prune or (work.middle_replaced and work.tokens <= work.aim and not work.force):
            return  # a summary made ahead already brought it down: the tail stays unchanged
        conversation, draft = work.conversation, work.draft
        messages = conversation.messages
        total = work.tokens
        observed = self.observations(work)
        results = [
            i
            for i in range(draft.prefix_len, len(messages))
            if (messages[i].get("role") == "tool" or i in observed) and i not in conversation.opaque
        ]
        calls = calls_of_results(messages)
        keeps: tuple[int, ...] = self.keep
        if work.recent_from is not None:  # the agent's recent work stays whole; every older result is masked at once
            results, keeps = [i for i in results if not work.recent(i)], (0,)
        for keep in keeps:
            for index in results[: max(len(results) - keep, 0)]:
                current = draft.replaced.get(index)
                if current is not None and current.kind == "mask":
                    continue
                original = messages[index]
                handle = handle_of(conversation.digests[index]) if work.handles else None
                if index in observed:
                    masked = observation_placeholder(original, observed[index], conversation.counts[index], handle)
                else:
                    masked = placeholder(original, calls.get(index), conversation.counts[index], handle)
                tokens = work.count_message(masked)
                if tokens >= conversation.counts[index]:  # a short result is its own best summary
                    continue
                previous_tokens = current.tokens if current else conversation.counts[index]
                draft.replaced[index] = Replacement(conversation.digests[index], masked, tokens, "mask")
                total += tokens - previous_tokens
                work.outcome.actions.append(Action.MASK)
            if not work.force and total <= work.aim:
                break
