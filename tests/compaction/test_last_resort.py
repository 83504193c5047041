"""The last resort with a text-action agent whose head holds a demonstration, as SWE-agent sends it.

SWE-agent's head is its system prompt, a demonstration of tens of kilobytes (a whole solved task,
in its template) and the issue. When the head alone is most of the budget, the demonstration is cut,
not the latest turn: the latest observation (what the agent acts on next) and the command each sent
observation answers stay whole. The conversation is the repo's real SWE-agent trace.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from inflight.compaction import Budget, Conversation
from inflight.compaction.draft import Draft
from inflight.compaction.stage import Outcome, Work
from inflight.compaction.stages.last_resort import LastResortStage
from inflight.compaction.summary_job import SUMMARY_PREFIX
from inflight.config import Compaction
from tests.compaction.test_compactor import COUNTER, ENCODING, compactor, conversation_of, run
from tests.support.growth import CountingList
from tests.support.swe_agent import demonstration

TRACE = Path(__file__).resolve().parents[1] / "fixtures" / "traces" / "swe_marshmallow_text_actions.json"


def swe_agent(turns: int) -> list[dict[str, Any]]:
    """System prompt, demonstration (the trace itself, as SWE-agent renders one), issue, then `turns` turns of
    the trace: a command in the assistant's text, its output back as a user message (an observation)."""
    trace: list[dict[str, Any]] = json.loads(TRACE.read_text())["messages"]
    shown = "\n".join(m["content"] for m in trace[1:])
    return [trace[0], demonstration(shown), trace[1], *trace[2 : 2 + 2 * turns]]


def assert_whole_turns(original: list[dict[str, Any]], sent: list[dict[str, Any]]) -> None:
    """Every user message sent after the head and the summary answers the command before it, sent as it came."""
    for index in range(3, len(sent)):
        message = sent[index]
        if message["role"] == "user" and not message["content"].startswith(SUMMARY_PREFIX):
            assert sent[index - 1]["role"] == "assistant" and sent[index - 1] in original, sent[index - 1]


async def test_an_observation_right_after_the_head_keeps_its_command_and_the_demonstration_is_cut() -> None:
    messages = swe_agent(1)  # the first turn follows the head: its command, then its observation
    outcome = await run(messages, int(conversation_of(messages).tokens * 0.8))
    assert outcome.fits and outcome.actions == ["truncate"]
    system, demonstration, issue, command, observation = outcome.messages
    assert (system, issue, command, observation) == (messages[0], messages[2], messages[3], messages[4])
    assert "[... omitted" in demonstration["content"]  # on the old main: the observation and its command were cut


async def test_the_latest_observation_and_the_commands_stay_whole_when_the_head_is_most_of_the_budget() -> None:
    messages = swe_agent(3)  # its latest observation is a 2,266-token listing of fields.py
    limit = int(conversation_of(messages).tokens * 0.7)
    assert conversation_of(messages[-1:]).tokens <= limit // 4  # not so big that it may be cut
    outcome = await run(messages, limit)
    assert outcome.fits and "summarize" in outcome.actions
    sent = outcome.messages
    assert sent[-1] == messages[-1]  # on the old main: halved, and the command before it too
    assert sent[0] == messages[0] and sent[2] == messages[2] and "[... omitted" in sent[1]["content"]
    assert_whole_turns(messages, sent)


async def test_a_latest_observation_over_a_quarter_of_the_budget_is_cut_first_and_its_command_stays() -> None:
    messages = swe_agent(3)
    log = "\n".join(f"{i}: a line of the log" for i in range(3000))
    messages[-1] = {**messages[-1], "content": f"{log}\n(Open file: n/a)\n(Current directory: /repo)\nbash-$"}
    limit = conversation_of(messages[:-1]).tokens  # the head and the turns fit; the huge observation does not
    assert conversation_of(messages[-1:]).tokens > limit // 4
    outcome = await run(messages, limit)
    assert outcome.fits and "[... omitted" in outcome.messages[-1]["content"]
    assert outcome.messages[-2] == messages[-2]  # its command
    assert_whole_turns(messages, outcome.messages)
    assert outcome.tokens_after <= Budget.of(limit, Compaction()).limit


async def test_a_latest_observation_over_the_truncation_limit_is_not_truncated_unless_it_is_huge() -> None:
    messages = swe_agent(3)
    listing = "\n".join(f"{i:5d}: line {i} of a long file that the agent asked to see" for i in range(1_100))
    messages[-1] = {**messages[-1], "content": f"{listing}\n(Open file: src/fields.py)\nbash-$"}  # 65 KB
    tokens = conversation_of(messages[-1:]).tokens
    engine = compactor()

    async def forced(limit: int) -> Outcome:
        budget = Budget.of(limit, engine.settings)
        outcome = await engine.run(conversation_of(messages), budget=budget, record=None, force=True)
        assert outcome is not None
        return outcome

    kept = await forced(tokens * 5)  # a quarter of the budget is more than the observation: it stays whole
    assert kept.messages[-1] == messages[-1]
    cut = await forced(tokens * 3)  # less: truncated, as any output that big
    assert "[... omitted" in cut.messages[-1]["content"]


def user_only(count: int) -> list[dict[str, Any]]:
    """A conversation of user messages only: all of it head, so only the last resort can shrink it."""
    return [{"role": "user", "content": f"message {i}: " + "word " * 120} for i in range(count)]


def counted_conversation(messages: list[dict[str, Any]]) -> tuple[Conversation, CountingList]:
    """The conversation with its token counts in a list that counts how often a message's count is read."""
    plain = conversation_of(messages)
    counts = CountingList(plain.counts)
    return Conversation(plain.messages, counts, plain.digests, plain.fixed_tokens), counts


async def test_the_last_resort_reads_each_message_a_bounded_number_of_times_however_many_it_cuts() -> None:
    """Each cut used to build the whole view again and sort it: 1k / 2k / 4k messages took 0.5 / 4 / 30 s."""
    reads_per_message = []
    for size in (250, 500, 1_000, 2_000):
        conversation, counts = counted_conversation(user_only(size))
        outcome = await compactor(summarizer=False).run(conversation, budget=Budget.exactly(2_000), record=None)
        assert outcome is not None and outcome.actions == ["truncate"]
        assert sum(1 for m in outcome.messages if "[... omitted" in m["content"]) > size // 2  # most were cut
        reads_per_message.append(counts.reads / size)
    # On the old main: 131, 256, 506, 1,006 reads a message (one per message each cut); now the same at every size.
    assert max(reads_per_message) <= 1.5 * min(reads_per_message), reads_per_message


async def test_a_cancelled_last_resort_stops_at_its_next_pause() -> None:
    """A request whose client left is cancelled; the stage pauses every few dozen cuts (`CUTS_BETWEEN_YIELDS`), so
    it stops there instead of cutting on (in a worker thread's loop, where nothing else would stop it)."""
    conversation = conversation_of(user_only(1_000))
    cuts = 0

    def count_message(message: dict[str, Any]) -> int:
        nonlocal cuts
        cuts += 1
        return COUNTER.count_message(message, ENCODING)

    head = len(conversation.messages)
    outcome = Outcome([], conversation.tokens, conversation.tokens, [], Draft(head, head).freeze(conversation), True)
    work = Work(conversation, Draft(head, head), Budget.exactly(2_000), outcome, count_message)
    stage = asyncio.ensure_future(LastResortStage().run(work))
    await asyncio.sleep(0)  # the stage runs until its first pause
    stage.cancel()
    with pytest.raises(asyncio.CancelledError):
        await stage
    assert 0 < cuts == len(work.draft.replaced) <= 100  # on the old main: all 1,000 cut before it could be stopped
