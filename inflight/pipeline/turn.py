"""The decisions for one request, without any I/O: the turn says what to do next and the driver does it.

A `Turn` is made from a counted request and the client's options. Its `start()` and `send(event)`
return the next command (`Discover`, `CountExactly`, `Prepare`, `Send`, `Relay`). The driver at the
edge carries out each one (talking to the upstream, waiting for the summarizer, answering the client)
and sends back an event with the result (`Discovered`, `ExactCount`, `Prepared`, `Answered`). The
driver renders `report` into the headers, the metrics and the archive, and adds `take_fields()` to the
log line. Once the answer is relayed, `answered_usage` tells the turn what the upstream counted.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Generator
from dataclasses import replace

from inflight.compaction.actions import Action
from inflight.compaction.report import Plan, TurnReport
from inflight.formats.agent_compaction import AgentCompaction, answer, recognised
from inflight.formats.responses import Responses
from inflight.frozen import frozen
from inflight.pipeline.accounting import Accounting, Counted
from inflight.pipeline.engine import Options, Pipeline
from inflight.pipeline.handoff import Handoff
from inflight.pipeline.outgoing import MeasuredOnce
from inflight.pipeline.outgoing import Prepared as PreparedBody
from inflight.policy.refusals import Refusal
from inflight.policy.retry import RetryAim

log = logging.getLogger("inflight")


@frozen(slots=True)
class Discover:
    """Read the context windows from the upstream's model list, then send `Discovered()`."""


@frozen(slots=True)
class CountExactly:
    """Ask the upstream to count the prompt (its format's `count_path`), then send `ExactCount`."""

    counted: Counted


@frozen(slots=True)
class Prepare:
    """Build the body to send (`Pipeline.prepare`, which may wait for a summary), then send `Prepared`.

    After `keepalive_after` seconds a streaming client is sent comments so it keeps waiting (None: never)."""

    counted: Counted
    accounting: Accounting
    options: Options
    retry: RetryAim | None = None
    keepalive_after: float | None = None


@frozen(slots=True)
class Send:
    """POST `body` upstream, then send `Answered`.

    With `hold`, first read just enough of the answer to recognise a context-too-long refusal. `identity` asks
    the upstream for an uncompressed answer, because a report will be written into it."""

    body: bytes
    rewritten: bool
    hold: bool
    identity: bool = False
    event_stream: bool = False  # the client asked for a stream: with `hold`, read the answer up to its first event


@frozen(slots=True)
class ReadAnswer:
    """Read the whole of the latest answer (a short one, such as an upstream's "no such route"), close it, then
    send `AnswerRead`."""


@frozen(slots=True)
class Relay:
    """Relay the latest answer to the client; always the final command.

    `prepared` is what was sent, if inflight counted it; the answer's usage is then read as it passes, and
    the turn is archived if `archived` is given."""

    prepared: PreparedBody | None
    archived: tuple[Counted, Accounting, Options] | None = None  # the turn, for the archive


@frozen(slots=True)
class Answer:
    """Answer the client with inflight's own JSON body (or an upstream answer read in full); a final command."""

    body: bytes
    status: int = 200
    content_type: bytes = b"application/json"  # or an event stream of inflight's own (an agent's summary)
    archived: tuple[Counted, Accounting, Options, PreparedBody] | None = None  # the turn, for the archive


@frozen(slots=True)
class Summarize:
    """Write the handoff for the agent's own compaction request (`inflight.pipeline.handoff`, which may wait for
    a summary), then send `Summarized`."""

    counted: Counted
    options: Options
    asked: AgentCompaction
    keepalive_after: float | None = None  # as for `Prepare`: a streaming agent is kept waiting with comments


@frozen(slots=True)
class CheckSummary:
    """Ask whether a summary made ahead is ready for the conversation (`Pipeline.summary_ready`), then send
    `SummaryReady`."""

    counted: Counted
    options: Options


Command = Discover | CountExactly | Prepare | Send | ReadAnswer | Relay | Answer | Summarize | CheckSummary


@frozen(slots=True)
class Discovered:
    pass


@frozen(slots=True)
class ExactCount:
    tokens: int | None  # None: the upstream gave no count


@frozen(slots=True)
class Prepared:
    prepared: PreparedBody


@frozen(slots=True)
class AnswerRead:
    body: bytes


@frozen(slots=True)
class Answered:
    """The upstream's answer: its status, the start of the body read with `hold` (empty if none), and the
    context refusal it contains, if any."""

    status: int
    held: bytes = b""
    refusal: Refusal | None = None


@frozen(slots=True)
class Summarized:
    handoff: Handoff | str  # or why there is nothing to answer with: the request is then forwarded


@frozen(slots=True)
class SummaryReady:
    ready: bool


Event = Discovered | ExactCount | Prepared | Answered | AnswerRead | Summarized | SummaryReady


class Steps:
    """A turn's mechanics: `_run` yields its commands and receives the events; the driver asks `start()` for the
    first command and `send(event)` for each next one, and reads `report` and `take_fields()` as it goes."""

    def __init__(self, report: TurnReport) -> None:
        self.report = report
        self._fields: dict[str, object] = {}
        self._steps: Generator[Command, Event, None] | None = None

    def start(self) -> Command:
        self._steps = self._run()
        return next(self._steps)

    def send(self, event: Event) -> Command:
        assert self._steps is not None, "start() first"
        return self._steps.send(event)

    def close(self) -> None:
        """The driver is done with the steps. Until closed, the suspended steps hold the turn and the turn holds
        them: closed, the turn and all it holds are freed at once instead of by the garbage collector."""
        if self._steps is not None:
            self._steps.close()
            self._steps = None

    def take_fields(self) -> dict[str, object]:
        """The log line's fields noted since last asked."""
        fields, self._fields = self._fields, {}
        return fields

    def answered_usage(self, prompt_tokens: int | None, output_tokens: int | None) -> None:
        """The upstream's count of the prompt relayed and of its reply (None: it gave none)."""

    def _run(self) -> Generator[Command, Event, None]:
        raise NotImplementedError


class Turn(Steps):
    """One conversation request, from its count until the answer is relayed: compaction, a retry after a refusal,
    and usage."""

    def __init__(self, pipeline: Pipeline, counted: Counted, options: Options) -> None:
        self.pipeline = pipeline
        self.counted = counted
        self.options = options
        self.accounting: Accounting = pipeline.account(counted, tenant=options.tenant)
        super().__init__(TurnReport(window=self.accounting.window()))
        self.compacts = pipeline.compacts(counted, options)  # may be rewritten and retried at all
        self.sent: PreparedBody | None = None  # the body of the latest request sent upstream
        self.shadow_answered = False  # shadow mode: the agent's own compaction request would have been answered

    def answered_usage(self, prompt_tokens: int | None, output_tokens: int | None) -> None:
        """Learn from the upstream's count of the prompt and the reply: calibrate the estimates, and record that the
        window held that prompt. An estimate made from samples is not used for calibration."""
        sent = self.sent
        if prompt_tokens is None or sent is None or sent.approximate:
            return
        self.pipeline.record_usage(
            self.counted.model,
            estimate=sent.sent_tokens,
            actual=prompt_tokens,
            fixed=sent.sent_fixed,
            tenant=self.options.tenant,
            output=output_tokens,
        )

    def _run(self) -> Generator[Command, Event, None]:
        pipeline, counted, options = self.pipeline, self.counted, self.options
        if pipeline.discovers(counted, options):
            yield Discover()
            self._account()
        if (yield from self._answer_compaction()):
            return
        yield from self._count_exactly()
        self._fields.update(self.accounting.log_fields())
        keepalive = pipeline.keepalive_after(counted.model) if counted.streams and self.compacts else None
        prepared = yield from self._prepare(keepalive_after=keepalive)
        while True:
            hold = self.compacts and prepared.too_long is None  # too_long: a retry could not shrink it further
            answer = yield self._send(prepared, hold=hold)
            assert isinstance(answer, Answered)
            if not hold:
                break
            if answer.refusal is None and self._refuses_server_compaction(answer):
                # Happens once per client and model: from now on inflight does that context management itself.
                pipeline.learn_no_server_compaction(counted.model, tenant=options.tenant)
                self._fields["context_management"] = "refused"
                if pipeline.discovers(counted, options):
                    yield Discover()
                self._account()
                self._fields.update(self.accounting.log_fields())
                prepared = yield from self._prepare()
                continue
            if answer.refusal is not None and not pipeline.believes(
                counted, self.accounting, answer.refusal, prepared, tenant=options.tenant
            ):  # its numbers do not fit what was sent: not learned from, and relayed as the upstream wrote it
                self._fields["refusal"] = "disbelieved"
            elif answer.refusal is not None:
                prepared = yield from self._retry(answer.refusal, prepared)
                yield self._send(prepared, hold=False)
            break
        yield Relay(prepared, archived=(counted, self.accounting, options))

    def _count_exactly(self) -> Generator[Command, Event, None]:
        """Ask the upstream to count the prompt when our estimate is near a threshold (`messages.count_tokens`)."""
        pipeline, counted, options = self.pipeline, self.counted, self.options
        if pipeline.asks_exact_count(counted, self.accounting, options):
            answer = yield CountExactly(counted)
            tokens = answer.tokens if isinstance(answer, ExactCount) else None
            self._fields["exact_count"] = tokens if tokens is not None else "failed"
            if tokens is not None:
                self._accounted(pipeline.with_exact_count(self.accounting, tokens, tenant=options.tenant))

    def _answer_compaction(self) -> Generator[Command, Event, bool]:
        """Answer the agent's own compaction request from inflight's summary; False if this is no such request or it
        is to be forwarded (shadow mode, which only says that it would have been answered, or no summary to give)."""
        counted = self.counted
        if not self.pipeline.plans(counted, self.options):
            return False
        asked = recognised(counted.wire.spec.name, counted.payload)
        if asked is None:
            return False
        self._fields["agent_compaction"] = asked.agent
        if not self.compacts:
            self.shadow_answered = True
            return False
        item_key = counted.wire.item_key if asked.wants_item and isinstance(counted.wire, Responses) else None
        if asked.wants_item and item_key is None:  # no key to seal its item with: the upstream compacts
            self._fields["agent_compaction_answer"] = "forwarded:no-item-key"
            return False
        keepalive = self.pipeline.keepalive_after(counted.model) if counted.streams else None
        made = yield Summarize(counted, self.options, asked, keepalive)
        assert isinstance(made, Summarized)
        handoff = made.handoff
        if isinstance(handoff, str):
            self._fields["agent_compaction_answer"] = f"forwarded:{handoff}"
            return False
        item = None
        if item_key is not None:  # sealed for this client, as inflight's answers to `/responses/compact` are
            sealed = item_key.seal(handoff.text, tenant=self.options.tenant)
            item = {"type": "compaction", "id": f"cmp_{uuid.uuid4().hex}", "encrypted_content": sealed}
        body, content_type = answer(
            counted.wire.spec.name,
            handoff.text,
            model=counted.model,
            prompt_tokens=self.accounting.prompt_tokens,
            output_tokens=handoff.accounting.calibrated(handoff.tokens),
            stream=counted.streams,
            item=item,
        )
        compacted = handoff.prepared.plan  # the compaction of the history the summary came from
        done = (*handoff.actions, *compacted.actions)
        actions = (Action.ANSWERED_COMPACTION, *(action for action in done if action != Action.NONE))
        tokens = handoff.accounting.calibrated(handoff.tokens)
        plan = Plan(actions, self.accounting.prompt_tokens, tokens, compacted.compaction_id)
        self.report = TurnReport(window=self.accounting.window(), sent=plan)
        self._fields.update(handoff.prepared.fields)
        self._fields.update({"actions": plan.said(), "agent_compaction_answer": "answered"})
        # Nothing went upstream: the prompt cache's figures are not measured (the next turn is compared with what was).
        answered = replace(handoff.prepared, plan=plan, sent_tokens=handoff.tokens, measured=MeasuredOnce())
        yield Answer(body, content_type=content_type, archived=(counted, self.accounting, self.options, answered))
        return True

    def _retry(self, refusal: Refusal, refused: PreparedBody) -> Generator[Command, Event, PreparedBody]:
        """Compact the original request again, using what the refusal told us; done at most once."""
        aim = self.pipeline.learn(self.counted, self.accounting, refusal, refused, tenant=self.options.tenant)
        self._fields.update({"refused_by": refusal.upstream, "retry_limit": aim.limit})
        if aim.blind:
            self._fields["retry_aim"] = "blind"
        prepared = yield from self._prepare(retry=aim)
        prepared.follows(refused)
        self.report = self.report.retried_as(refusal.context_window, aim.limit)
        return prepared

    def _prepare(
        self, *, retry: RetryAim | None = None, keepalive_after: float | None = None
    ) -> Generator[Command, Event, PreparedBody]:
        answer = yield Prepare(self.counted, self.accounting, self.options, retry, keepalive_after)
        assert isinstance(answer, Prepared)
        prepared = answer.prepared
        self.report = prepared.turn_report(self.accounting)
        if self.shadow_answered:
            self.report = self.report.shadow_answered()
            self._fields["shadow_answer"] = Action.ANSWERED_COMPACTION
        self._fields.update(prepared.fields)
        if prepared.too_long is not None:
            # Send it anyway: our count may be wrong and only the upstream knows. The client gets its answer.
            log.warning("[compaction] %s", prepared.too_long)
            self._fields["fits"] = "no"
        return prepared

    def _send(self, prepared: PreparedBody, *, hold: bool) -> Send:
        self.sent = prepared
        # A report of the context management inflight did for the upstream is written into the answer, so the
        # answer must come uncompressed.
        # So is one that offers `inflight_retrieve`: the answer is read, to answer the model's calls to it.
        identity = prepared.report is not None or prepared.retrieves
        return Send(prepared.body, prepared.rewritten, hold=hold, identity=identity, event_stream=self.counted.streams)

    def _account(self) -> None:
        self._accounted(self.pipeline.account(self.counted, tenant=self.options.tenant))

    def _accounted(self, accounting: Accounting) -> None:
        """The request measured anew (its window discovered, or counted by the upstream): the report says so."""
        self.accounting = accounting
        self.report = TurnReport(window=accounting.window())

    def _refuses_server_compaction(self, answer: Answered) -> bool:
        """Whether the upstream refused the request's `context_management` compaction (which inflight left to it)."""
        counted = self.counted
        tenant = self.options.tenant
        if not counted.request.server_managed or self.pipeline.takes_over_server_compaction(counted, tenant=tenant):
            return False
        return counted.wire.rejects_server_compaction(answer.status, answer.held)
