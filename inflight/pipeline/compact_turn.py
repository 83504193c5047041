"""`POST /v1/responses/compact` as a turn: the upstream's answer, or inflight's if the upstream lacks the route.

OpenAI's Responses API compacts a conversation on request. The answer (`object: "response.compaction"`)
holds the items to keep plus one `compaction` item whose `encrypted_content` only OpenAI can read; from
then on the client sends those instead of its history (Codex does this when its own auto-compaction is
due). vLLM, llama.cpp, Ollama and most gateways answer the route with 404 (or 405, 501). In that case
inflight answers instead: it compacts the conversation as on any turn, forced down to its target, and
returns the same shape, with the summary encrypted for this client in a `compaction` item of inflight's
own (`inflight.formats.compaction_items`). Any other upstream answer is relayed unchanged.
When a summary made ahead is ready for the conversation, inflight answers at once, without the upstream:
the agent's own compaction, answered (`answered-compaction`). Like `Turn`, it does no I/O: the driver
carries out its commands.
"""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import replace
from typing import Any

import orjson

from inflight.compaction.actions import Action
from inflight.compaction.report import TurnReport
from inflight.formats.compaction_items import ItemKey, compaction_answer, sealed_output
from inflight.pipeline.accounting import Accounting, Counted
from inflight.pipeline.engine import Mode, Options, Pipeline
from inflight.pipeline.outgoing import Prepared as PreparedBody
from inflight.pipeline.turn import (
    Answer,
    Answered,
    AnswerRead,
    CheckSummary,
    Command,
    Discover,
    Event,
    Prepare,
    Prepared,
    ReadAnswer,
    Relay,
    Send,
    Steps,
    SummaryReady,
)

NOT_SERVED = frozenset({404, 405, 501})  # the upstream has no such route


class CompactTurn(Steps):
    """One `POST /v1/responses/compact`: sent upstream first, and compacted here only if the upstream cannot."""

    def __init__(self, pipeline: Pipeline, counted: Counted, options: Options, item_key: ItemKey) -> None:
        super().__init__(TurnReport())
        self.pipeline = pipeline
        self.counted = counted
        self.options = replace(options, mode=Mode.FORCE)  # compact whether or not it fits
        self.item_key = item_key

    def _run(self) -> Generator[Command, Event, None]:
        counted = self.counted
        if (yield from self._answer_at_once()):
            return
        body, rewritten = counted.raw, False
        if counted.request.expanded:  # the input holds inflight's own compaction items, which the upstream cannot read
            body, rewritten = counted.wire.write(counted.payload, counted.request, counted.request.messages), True
        answer = yield Send(body, rewritten, hold=False)
        assert isinstance(answer, Answered)
        original = counted.payload.get("input")
        if answer.status not in NOT_SERVED or not isinstance(original, list):
            yield Relay(None)
            return
        read = yield ReadAnswer()  # the upstream's "no such route", kept to relay if inflight cannot answer either
        assert isinstance(read, AnswerRead)
        accounting, prepared, output = yield from self._compacted(original)
        # Nothing was summarized (not compactable, compaction off, or it failed): relay the upstream's answer.
        if output is None:
            self._fields["compacted_by"] = "none"
            yield Answer(read.body, answer.status)
            return
        self.report = prepared.turn_report(accounting)
        self._fields.update(accounting.log_fields() | prepared.fields | {"compacted_by": "inflight"})
        yield Answer(compaction_answer(output, prompt_tokens=accounting.prompt_tokens), 200)

    def _compacted(
        self, original: list[Any]
    ) -> Generator[Command, Event, tuple[Accounting, PreparedBody, list[Any] | None]]:
        """The request compacted as the proxy would send it, and its `original` input's sealed output (None: nothing
        was compacted)."""
        counted, pipeline = self.counted, self.pipeline
        if pipeline.discovers(counted, self.options):
            yield Discover()
        accounting = pipeline.account(counted, tenant=self.options.tenant)
        made = yield Prepare(counted, accounting, self.options)
        assert isinstance(made, Prepared)
        prepared = made.prepared
        if not prepared.rewritten:
            return accounting, prepared, None
        compacted = orjson.loads(prepared.body)["input"]
        return accounting, prepared, sealed_output(original, compacted, self.item_key, tenant=self.options.tenant)

    def _answer_at_once(self) -> Generator[Command, Event, bool]:
        """Answer from a summary made ahead, without asking the upstream (the agent's own compaction, answered);
        False when none is ready, and the upstream is asked first as usual."""
        counted = self.counted
        original = counted.payload.get("input")
        if not isinstance(original, list):
            return False
        ready = yield CheckSummary(counted, self.options)
        if not isinstance(ready, SummaryReady) or not ready.ready:
            return False
        accounting, prepared, output = yield from self._compacted(original)
        if output is None or Action.FALLBACK in prepared.plan.actions:
            return False
        sent = prepared.plan
        self.report = replace(
            prepared.turn_report(accounting), sent=replace(sent, actions=(Action.ANSWERED_COMPACTION, *sent.actions))
        )
        self._fields.update(
            accounting.log_fields()
            | prepared.fields
            | {"compacted_by": "inflight", "agent_compaction_answer": "answered"}
        )
        yield Answer(compaction_answer(output, prompt_tokens=accounting.prompt_tokens), 200)
        return True
