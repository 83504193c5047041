"""The summary an agent's own compaction request is answered with, made from inflight's compaction of the history.

The history (the request without the agent's prompt) is compacted as on any turn, forced down to its
target, under the conversation's key: a summary made ahead, or the record in place, serves it at once;
with none ready the background job is started or joined (single flight) and waited for as long as a
summary may take. The handoff is written from what that compaction kept (`inflight.compaction.handoff`).
With the user's own instructions, the summary is asked anew under a key of its own, so they reach the
summarizer rather than a summary made without them.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Sequence
from dataclasses import replace

import orjson
import xxhash

from inflight.compaction import head_length
from inflight.compaction.actions import Action
from inflight.compaction.conversation import Message
from inflight.compaction.handoff import LEDGER_CHARS, carried_handoff, handoff_text, without_context
from inflight.compaction.ledger import Ledger
from inflight.compaction.record import Precomputed
from inflight.compaction.summary_job import SUMMARY_PREFIX
from inflight.formats import Target
from inflight.formats.agent_compaction import AgentCompaction
from inflight.frozen import frozen
from inflight.offload import call_sized
from inflight.pipeline.accounting import Accounting, Counted
from inflight.pipeline.engine import Mode, Options, Pipeline, key_of
from inflight.pipeline.outgoing import Prepared

log = logging.getLogger("inflight")


@frozen(slots=True)
class Handoff:
    """The text to answer the agent with, and the compaction of its history it was written from."""

    text: str
    tokens: int  # the text's tokens, by our count
    prepared: Prepared
    accounting: Accounting
    actions: tuple[Action, ...] = ()  # what served it beyond the compaction in `prepared` (a summary made ahead)


async def handoff_for(pipeline: Pipeline, counted: Counted, options: Options, asked: AgentCompaction) -> Handoff | str:
    """The handoff for the agent's compaction request, or why inflight has none to give (the request is then
    forwarded): the history cannot be read or compacted, or only the ledger could stand in for a summary."""
    try:
        return await made_handoff(pipeline, counted, options, asked)
    except Exception:  # a bug of ours must not cost the agent its compaction: it is forwarded
        log.exception("[compaction] no handoff for the agent's compaction request; forwarding it")
        return "error"


async def made_handoff(pipeline: Pipeline, counted: Counted, options: Options, asked: AgentCompaction) -> Handoff | str:
    size = counted.count.total
    raw = await call_sized(lambda: orjson.dumps(asked.history), size)
    # The model as the request's path said it (Gemini's bodies do not name it).
    target = Target(params={"model": counted.model})
    history = await call_sized(
        lambda: pipeline.count(raw, asked.history, counted.wire, target=target, tenant=options.tenant), size
    )
    if history is None:
        return "unreadable"
    accounting = pipeline.account(history, tenant=options.tenant)
    messages = history.request.messages
    if not asked.instructions:  # little has happened since the last summary: no summarizer call
        ahead = await pipeline.summary_ahead(history, options)
        summaries: list[tuple[int, str] | None] = [None]
        if ahead is not None:
            summaries.insert(0, made_ahead(ahead, await own_ledger(ahead.ledger, messages, asked.context_tag, size)))
        for summary in summaries:
            carried = carried_handoff(
                messages,
                head_len=head_length(messages),
                keeps_user_messages=asked.keeps_user_messages,
                context_tag=asked.context_tag,
                made_ahead=summary,
            )
            if carried is not None:  # the history goes nowhere: it is reported as sent untouched
                untouched = await pipeline.prepare(history, accounting, replace(options, mode=Mode.OFF))
                served = (Action.SUMMARY_PRECOMPUTED,) if summary is not None else ()
                return Handoff(carried, pipeline.text_tokens(counted.model, carried), untouched, accounting, served)
    forced = replace(
        options,
        mode=Mode.FORCE,
        agent_compaction=True,
        summary_instructions=asked.instructions,
        context_tag=asked.context_tag,
    )
    if asked.instructions:  # a summary of its own, which the summarizer writes with the instructions
        key = key_of(history, options)
        name = (key.rpartition("#")[0] if "#" in key else key).removeprefix("session:")  # its scope is added again
        digest = xxhash.xxh3_64_hexdigest(asked.instructions.encode("utf-8", "surrogatepass"))
        forced = replace(forced, session=f"{name}/instructions:{digest}")
    prepared = await pipeline.prepare(history, accounting, forced)
    outcome = prepared.outcome
    if prepared.shadow or Action.ERROR in prepared.plan.actions:
        return "error"
    if outcome is None or not prepared.rewritten:  # nothing before the latest turns to summarize: they are the handoff
        origins: list[int | None] = list(range(len(messages)))
        text = handoff_text(
            messages,
            origins,
            head_len=head_length(messages),
            keeps_user_messages=asked.keeps_user_messages,
            context_tag=asked.context_tag,
        )
    elif Action.FALLBACK in outcome.actions:  # no summary could be had, only the ledger: the agent makes its own
        return "no-summary:" + ",".join(outcome.actions)
    else:
        own = await own_ledger(outcome.record.ledger, messages, asked.context_tag, size)
        text = handoff_text(
            outcome.messages,
            outcome.sent_origins,
            head_len=outcome.record.head_len,
            keeps_user_messages=asked.keeps_user_messages,
            keeps_recent_turns=asked.keeps_recent_turns,
            instructions=asked.instructions,
            context_tag=asked.context_tag,
            ledger=own,
        )
    return Handoff(text, pipeline.text_tokens(counted.model, text), prepared, accounting)


async def own_ledger(ledger: Ledger | None, messages: Sequence[Message], context_tag: str, size: int) -> Ledger | None:
    """A compaction's ledger without what only the agent's own context said (`without_context`), read from the whole
    history (of `size` tokens)."""
    if ledger is None:
        return None
    return await call_sized(functools.partial(without_context, ledger, messages, context_tag), size)


def made_ahead(ahead: Precomputed, own: Ledger | None) -> tuple[int, str]:
    """A summary made ahead as the handoff needs it: the messages it covers, and its text with its ledger (`own`:
    without what only the agent's own context said)."""
    ledger = own.render(LEDGER_CHARS) if own is not None else ""
    return ahead.cut, "\n\n".join(part for part in (f"{SUMMARY_PREFIX}\n{ahead.text.strip()}", ledger) if part)
