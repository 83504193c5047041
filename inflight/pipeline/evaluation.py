"""`inflight eval`: replay conversations through the pipeline offline and report what each compaction kept.

Each trace (a chat-completion request body) is replayed turn by turn, as an agent would send it: the
request for a turn holds every message up to a user or tool message after the head. Turns share one
pipeline, so compaction records carry over as they do in the server. For every compacted request it
reports the tokens before and after, the actions, and what was kept:

- the task (the head's last user message) and the latest user request, verbatim;
- the facts of the messages the compaction dropped or replaced (`compaction.facts`: file paths,
  error lines, commands, names), each looked for in the compacted request's text;
- placeholders that name a call other than the one their result answers;
- summarizer requests larger than the summarizer's window;
- of the facts the compacted request lost, how many the model could read back with `inflight_retrieve` (in an
  original that a handle in the request names), and how many calls that would take (zero is best: nothing lost).

For every turn, compacted or not, it also reports how much the upstream's prompt cache could serve:
prefix rewrites per 100 turns and the cached share (`inflight.compaction.prefix`), and the prompt's
estimated cost at the `pricing:` prices next to what the client's own requests would have cost.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from inflight.compaction import Summarize, SummaryJob, head_length
from inflight.compaction.conversation import (
    Message,
    calls_of_results,
    describe_call,
    latest_request_index,
    observation_regex,
    text_of,
)
from inflight.compaction.facts import command_of, facts_of
from inflight.compaction.prefix import CacheFigures
from inflight.compaction.record import Record
from inflight.compaction.retrieval import HANDLE, handle_of, span_handle
from inflight.compaction.stage import Outcome
from inflight.compaction.stages.mask import TOOL_PRUNED
from inflight.config import Compaction
from inflight.formats import CHAT_COMPLETIONS, WireFormat
from inflight.frozen import frozen
from inflight.pipeline.accounting import Accounting, Counted
from inflight.pipeline.engine import Mode, Options, Pipeline
from inflight.pipeline.outgoing import Prepared
from inflight.pipeline.parts import SummarizerFactory
from inflight.upstream.headers import RawHeaders

KINDS = ("paths", "errors", "commands", "names")


@dataclass
class Retention:
    found: dict[str, int] = field(default_factory=lambda: dict.fromkeys(KINDS, 0))
    kept: dict[str, int] = field(default_factory=lambda: dict.fromkeys(KINDS, 0))
    missing: dict[str, list[str]] = field(default_factory=lambda: {kind: [] for kind in KINDS})

    def add(self, other: Retention) -> None:
        for kind in KINDS:
            self.found[kind] += other.found[kind]
            self.kept[kind] += other.kept[kind]
            self.missing[kind] += other.missing[kind]

    def share(self, kind: str) -> float | None:
        return self.kept[kind] / self.found[kind] if self.found[kind] else None


@dataclass
class Recovery:
    """What `inflight_retrieve` could give back of the facts a compacted request lost."""

    lost: int = 0  # facts of the dropped messages not in the text sent
    recoverable: int = 0  # of those, in an original that a handle in the text sent names
    retrievals: int = 0  # the distinct handles a model would read back to recover them

    def add(self, other: Recovery) -> None:
        self.lost += other.lost
        self.recoverable += other.recoverable
        self.retrievals += other.retrievals


def originals_named(
    sent_text: str, record: Record, messages: Sequence[Message], digests: Sequence[bytes]
) -> dict[str, str]:
    """The text (as `plain_text` reads it) of each original a handle in the text sent names."""
    named = set(HANDLE.findall(sent_text))
    texts: dict[str, str] = {}
    if record.summary is not None and record.prefix_len > record.head_len:
        handle = span_handle(digests[record.head_len : record.prefix_len])
        if handle in named:
            texts[handle] = plain_text(messages[record.head_len : record.prefix_len])
    for index, replacement in record.replaced.items():
        handle = handle_of(replacement.digest)
        if handle in named and index < len(messages):
            texts[handle] = plain_text(with_their_calls(messages, [index]))
    return texts


def recovery(retained: Retention, originals: Mapping[str, str]) -> Recovery:
    """How many of the lost facts the originals hold, and how many of them a model would read to get them all."""
    result = Recovery()
    read: set[str] = set()
    for kind in KINDS:
        for fact in retained.missing[kind]:
            result.lost += 1
            holders = [handle for handle, text in originals.items() if fact in text]
            if holders:
                result.recoverable += 1
                if not read.intersection(holders):
                    read.add(holders[0])
    result.retrievals = len(read)
    return result


@dataclass
class Compacted:
    trace: str
    turn: int
    tokens_before: int
    tokens_after: int
    actions: str
    task_kept: bool
    request_kept: bool
    wrong_placeholders: int
    retention: Retention
    recovery: Recovery = field(default_factory=Recovery)


class SizedSummarizers:
    """A summarizer factory that counts its requests against the summarizer's window."""

    def __init__(self, inner: SummarizerFactory, pipeline_of: list[Pipeline]) -> None:
        self.inner, self.pipeline_of = inner, pipeline_of
        self.calls = 0
        self.oversize = 0

    def __call__(
        self, options: Compaction, *, model: str, client_credentials: RawHeaders, wire: WireFormat | None = None
    ) -> Summarize:
        summarize = self.inner(options, model=model, client_credentials=client_credentials, wire=wire)
        pipeline = self.pipeline_of[0]
        summary_model = options.summarize.model or model

        async def sized(job: SummaryJob) -> str:
            window = await pipeline.summarizer_window(options, summary_model)
            self.calls += 1
            messages = job.messages()
            sent = sum(pipeline.text_tokens(summary_model, m["content"]) + 4 for m in messages) + job.max_tokens
            self.oversize += sent > window
            return await summarize(job)

        return sized

    async def window(self, options: Compaction, model: str) -> int | None:
        return await self.inner.window(options, model)


def turns(messages: Sequence[Message]) -> list[int]:
    """The lengths of the message prefixes an agent sends, each ending with a user or tool message after the head."""
    head = head_length(messages)
    ends = [i + 1 for i in range(head, len(messages)) if messages[i].get("role") in ("user", "tool")]
    # Keep a batch of tool results together: a turn does not end between two of them.
    ends = [end for end in ends if end == len(messages) or messages[end].get("role") != "tool"]
    return [head, *ends] if head and head not in ends else ends


def plain_text(messages: Sequence[Message]) -> str:
    """The text a model reads in these messages: their content, and each tool call as the command it runs."""
    parts = [text_of(m.get("content")) for m in messages]
    for message in messages:
        for call in message.get("tool_calls") or []:
            if isinstance(call, dict) and isinstance(call.get("function"), dict):
                parts.append(command_of(call["function"]))
    return "\n".join(parts)


def retention(dropped: Sequence[Message], sent_text: str) -> Retention:
    facts = facts_of(dropped)
    found = {
        "paths": list(facts.files),
        "errors": list(facts.errors),
        "commands": list(facts.commands),
        "names": list(facts.identifiers),
    }
    result = Retention()
    for kind, items in found.items():
        for item in items:
            result.found[kind] += 1
            if item in sent_text:
                result.kept[kind] += 1
            else:
                result.missing[kind].append(item)
    return result


def wrong_placeholders(original: Sequence[Message], sent: Sequence[Message]) -> int:
    """The number of masked results whose placeholder names a different call from the one they answer.

    The tool results sent are the last ones of the original, in order (a summary only removes
    older ones), so they are matched from the end.
    """
    expected = calls_of_results(original)
    original_results = [i for i, m in enumerate(original) if m.get("role") == "tool"]
    sent_results = [m for m in sent if m.get("role") == "tool"]
    wrong = 0
    for index, message in zip(reversed(original_results), reversed(sent_results), strict=False):
        content = message.get("content")
        if isinstance(content, str) and content.startswith(TOOL_PRUNED):
            wrong += describe_call(expected.get(index)) not in content
    return wrong


@frozen
class ReplayedTurn:
    """One turn's request from a replayed conversation, which the pipeline compacted."""

    turn: int  # numbered from 1, as `inflight demo` numbers its rows
    request: dict[str, Any]  # the body with the messages up to this turn
    counted: Counted
    accounting: Accounting
    prepared: Prepared
    outcome: Outcome


async def compacted_turns(
    pipeline: Pipeline, session: str, body: dict[str, Any], *, cache: CacheFigures | None = None
) -> AsyncIterator[ReplayedTurn]:
    """Send each turn's request from `body` (its messages up to the turn's end) through `pipeline` as one
    session, as the agent would have sent them, and yield those that were compacted.

    Every turn's prompt cache figures are added to `cache` (`inflight.compaction.prefix`)."""
    messages: list[Message] = body["messages"]
    for turn, end in enumerate(turns(messages), start=1):
        request = {**body, "messages": messages[:end]}
        counted = pipeline.count(orjson.dumps(request), request, CHAT_COMPLETIONS)
        if counted is None:
            continue
        accounting = pipeline.account(counted)
        prepared = await pipeline.prepare(counted, accounting, Options(mode=Mode.ACTIVE, session=session))
        if cache is not None and prepared.cache is not None:
            cache.add(prepared.cache, prepared.prices)
        if prepared.outcome is not None and prepared.rewritten:
            yield ReplayedTurn(turn, request, counted, accounting, prepared, prepared.outcome)


def with_their_calls(messages: Sequence[Message], dropped: Sequence[int]) -> list[Message]:
    """The dropped messages in order, each tool result or observation preceded by the assistant message that
    made the call (even if that message is still sent because only the result was masked), so each result's
    command is known."""
    wanted = set(dropped)
    for index in dropped:
        role = messages[index].get("role")
        if role == "tool":
            caller = next((i for i in range(index - 1, -1, -1) if messages[i].get("role") == "assistant"), None)
            if caller is not None:
                wanted.add(caller)
        elif role == "user" and index > 0 and messages[index - 1].get("role") == "assistant":
            wanted.add(index - 1)  # the message with the command a text-action agent's observation answers
    return [messages[i] for i in sorted(wanted)]


@dataclass
class Replayed:
    """One replayed trace: its compacted requests, and the prompt cache's figures over all its turns."""

    compacted: list[Compacted]
    cache: CacheFigures


async def replay(pipeline: Pipeline, name: str, body: dict[str, Any]) -> Replayed:
    messages: list[Message] = body["messages"]
    head = messages[: head_length(messages)]
    task = next((m for m in reversed(head) if m.get("role") == "user"), None)
    out: list[Compacted] = []
    cache = CacheFigures()
    async for replayed in compacted_turns(pipeline, f"eval:{name}", body, cache=cache):
        turn, request, counted, outcome = replayed.turn, replayed.request, replayed.counted, replayed.outcome
        sent = outcome.messages
        text = plain_text(sent)
        dropped = with_their_calls(request["messages"], [i for i, m in enumerate(request["messages"]) if m not in sent])
        pattern = observation_regex(pipeline.model_settings(counted.model).compaction.mask.observation_pattern)
        index = latest_request_index(request["messages"], pattern)
        latest = None if index is None else request["messages"][index]  # the latest request, not an observation
        kept = retention(dropped, text)
        named = originals_named(text, outcome.record, counted.request.messages, counted.count.digests)
        out.append(
            Compacted(
                trace=name,
                turn=turn,
                tokens_before=outcome.tokens_before,
                tokens_after=outcome.tokens_after,
                actions=",".join(outcome.actions),
                task_kept=task is None or task in sent,
                request_kept=latest is None or latest in sent,
                wrong_placeholders=wrong_placeholders(request["messages"], sent),
                retention=kept,
                recovery=recovery(kept, named),
            )
        )
    return Replayed(out, cache)


def cache_totals(caches: Mapping[str, CacheFigures]) -> dict[str, Any]:
    """The prompt cache's figures per trace and over all traces, showing what the compactions cost the cache."""
    every = CacheFigures.total(caches.values())

    def shown(figures: CacheFigures) -> dict[str, Any]:
        per_100, share = figures.rewrites_per_100_turns, figures.cached_share
        return {
            "turns": figures.turns,
            "rewrites": figures.rewrites,
            "rewrites_per_100_turns": round(per_100, 1) if per_100 is not None else None,
            "cached_share": round(share, 3) if share is not None else None,
            "cost": round(figures.cost),
            "cost_client": round(figures.client_cost),
        }

    return {"cache": shown(every), "cache_per_trace": {name: shown(figures) for name, figures in caches.items()}}


def totals(results: Sequence[Compacted], caches: Mapping[str, CacheFigures] | None = None) -> dict[str, Any]:
    """The figures the project's goals are stated in, over every compacted request (and every turn, for the
    cache)."""
    retained, recovered = Retention(), Recovery()
    for result in results:
        retained.add(result.retention)
        recovered.add(result.recovery)
    n = len(results)
    return {
        "compacted_requests": n,
        "task_kept": sum(r.task_kept for r in results) / n if n else None,
        "latest_request_kept": sum(r.request_kept for r in results) / n if n else None,
        **{f"{kind}_kept": retained.share(kind) for kind in KINDS},
        **{f"{kind}_found": retained.found[kind] for kind in KINDS},
        "wrong_placeholders": sum(r.wrong_placeholders for r in results),
        "facts_lost": recovered.lost,
        "facts_recoverable": recovered.recoverable,
        "retrievals": recovered.retrievals,
        "missing": {kind: retained.missing[kind][:10] for kind in KINDS},
        **cache_totals(caches or {}),
    }


def percent(share: float | None) -> str:
    return "-" if share is None else f"{100 * share:.0f}%"


def report(
    results: Sequence[Compacted],
    caches: Mapping[str, CacheFigures],
    *,
    window: int,
    summarizer_calls: int,
    oversize: int,
) -> str:
    """A table per compacted request, then the prompt cache's figures per trace, then the totals."""
    lines = [
        f"window {window:,} tokens",
        "| trace | turn | tokens | actions | task | request | paths | errors | commands | names | wrong masks "
        "| lost: read back (calls) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        shares = [percent(r.retention.share(kind)) for kind in KINDS]
        lines.append(
            f"| {r.trace} | {r.turn} | {r.tokens_before:,} -> {r.tokens_after:,} | {r.actions} | "
            f"{'yes' if r.task_kept else 'NO'} | {'yes' if r.request_kept else 'NO'} | {' | '.join(shares)} | "
            f"{r.wrong_placeholders} | {r.recovery.lost}: {r.recovery.recoverable} ({r.recovery.retrievals}) |"
        )
    t = totals(results, caches)
    lines += [
        "",
        "| trace | turns | prefix rewrites | per 100 turns | cached share (estimated) | prompt cost (estimated) "
        "| without inflight |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, figures in [*t["cache_per_trace"].items(), ("all", t["cache"])]:
        per_100 = "-" if figures["rewrites_per_100_turns"] is None else f"{figures['rewrites_per_100_turns']:.1f}"
        cost, client = figures["cost"], figures["cost_client"]
        ratio = f" ({percent(cost / client)})" if client else ""
        lines.append(
            f"| {name} | {figures['turns']} | {figures['rewrites']} | {per_100} | {percent(figures['cached_share'])} "
            f"| {cost:,}{ratio} | {client:,} |"
        )
    lines.append("")
    lines.append(
        f"{plural(t['compacted_requests'], 'compacted request')}: task kept {percent(t['task_kept'])}, "
        "latest request kept "
        f"{percent(t['latest_request_kept'])}; of the dropped messages' facts kept: "
        + ", ".join(f"{kind} {percent(t[f'{kind}_kept'])} (of {t[f'{kind}_found']})" for kind in KINDS)
        + f"; wrong placeholders {t['wrong_placeholders']}; summarizer requests {summarizer_calls}, "
        f"larger than its window {oversize}"
    )
    lines.append(
        f"facts lost {t['facts_lost']:,}: {t['facts_recoverable']:,} can be read back (inflight_retrieve), in "
        f"{plural(t['retrievals'], 'retrieval')} (zero is best: nothing lost)"
    )
    return "\n".join(lines)


def plural(n: int, noun: str) -> str:
    """`1 compacted request`, `2 compacted requests`."""
    return f"{n:,} {noun}" if n == 1 else f"{n:,} {noun}s"
