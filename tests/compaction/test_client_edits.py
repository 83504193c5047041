"""An agent that clears its own old tool results (Gemini CLI's tool output masking, Claude Code's cleared tool
results) keeps its compaction: the record still applies, so the request goes upstream as the turn before it did
plus the new turn, and no summary is made again for turns already folded."""

from __future__ import annotations

from typing import Any

from inflight.compaction import Budget
from inflight.compaction.conversation import identities_of
from inflight.config import Compaction
from inflight.tokens.counter import message_digest
from tests.compaction.test_compactor import compactor, conversation_of
from tests.compaction.test_recent_work import LIMIT, varied


def cleared(messages: list[dict[str, Any]], indices: set[int]) -> list[dict[str, Any]]:
    """The agent's own masking: each tool result at `indices` replaced by a marker and its first line."""
    out = []
    for index, message in enumerate(messages):
        if index in indices and message["role"] == "tool":
            first = message["content"].splitlines()[0]
            message = {**message, "content": f"<tool_output_masked>\n{first}\n(saved to a file)"}
        out.append(message)
    return out


def test_a_tool_result_is_known_by_its_call_and_every_other_message_by_its_bytes() -> None:
    messages = varied(3)
    edited = cleared(messages, set(range(len(messages))))
    edited[2] = {**edited[2], "content": "Step 0, reworded."}  # an assistant message
    before = identities_of(messages, [message_digest(m) for m in messages])
    after = identities_of(edited, [message_digest(m) for m in edited])
    same = [a == b for a, b in zip(before, after, strict=True)]
    assert same == [True, True, False, True, True, True, True, True]


async def test_clearing_results_the_compaction_already_folded_changes_nothing_sent() -> None:
    engine = compactor(Compaction(goal="cost"))
    messages = varied(120)
    end = 4
    record = None
    sent: list[dict[str, Any]] = []
    while end <= len(messages) and not (record is not None and record.replaced):
        conversation = conversation_of(messages[:end])
        budget = Budget.of(LIMIT, engine.settings, fixed=conversation.fixed_tokens)
        outcome = await engine.run(conversation, budget=budget, record=record)
        if outcome is not None:
            record, sent = outcome.record, outcome.messages
        end += 2
    assert record is not None and record.replaced, "no fold to test against"
    calls = len(engine.calls)

    # The agent clears every output the fold replaced, and more of its old ones, then takes one more turn.
    folded = set(record.replaced) | set(range(record.head_len, record.prefix_len))
    following = cleared(messages[: end - 2], folded) + messages[end - 2 : end]
    conversation = conversation_of(following)
    budget = Budget.of(LIMIT, engine.settings, fixed=conversation.fixed_tokens)
    outcome = await engine.run(conversation, budget=budget, record=record)

    assert outcome is not None
    assert outcome.messages[: len(sent)] == sent  # the prefix the upstream cached, byte for byte
    assert outcome.messages[len(sent) :] == messages[end - 2 : end]
    assert outcome.record.replaced.keys() >= record.replaced.keys()
    assert len(engine.calls) == calls
