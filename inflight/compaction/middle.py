"""The middle of a conversation: choose where the unchanged tail starts, and replace what comes before it.

The head (system/developer messages and the task) and the tail stay; the middle becomes one
summary message. Both the LLM summary and its local fallback replace the same span.
"""

from __future__ import annotations

import re

from inflight.compaction.actions import Action
from inflight.compaction.conversation import Message, is_observation, pinned, turn_starts
from inflight.compaction.depth import Depth, Spacing, growth_per_turn
from inflight.compaction.draft import Budget, ViewItem
from inflight.compaction.facts import facts_of
from inflight.compaction.ledger import Ledger
from inflight.compaction.retrieval import read_back_note, span_handle
from inflight.compaction.stage import Work
from inflight.compaction.summary_job import clip, summary_message
from inflight.config import Summarize as SummarizeSettings
from inflight.frozen import frozen

REPLACED_NOTE = "[the messages this summary replaced: "  # after the ledger: how to read them back
RECENT_SHARE = 4  # the recent tokens kept whole are at most this share of the budget (`keep_recent_tokens` above it)
RECENT_TURNS_OF_ROOM = 4  # the turns of growth the recent work must leave room for, lest every turn compact again


def max_summary_tokens(settings: SummarizeSettings, budget: Budget) -> int:
    return max(min(settings.max_summary_tokens, budget.limit // 4), 32)


def valid_cuts(work: Work) -> list[int]:
    """Indices where the unchanged tail may start: whole turns after the record's summary, up to the latest request."""
    messages, draft = work.conversation.messages, work.draft
    starts = turn_starts(messages)
    valid = [i for i in range(draft.prefix_len + 1, len(messages)) if starts[i]]
    last_user = work.latest_request
    if last_user is not None and last_user >= draft.head_len:
        valid = [i for i in valid if i <= last_user]  # the last user message is never summarized
    return valid


@frozen
class Recent:
    """The agent's recent work, which every compaction sends verbatim: at least `tokens` of the newest
    conversation (`summarize.keep_recent_tokens`, at most a quarter of the budget) and the newest `results` tool outputs
    with their calls (`mask.keep_tool_results`)."""

    tokens: int
    results: int
    observation: re.Pattern[str] | None = None  # a text-action agent's observations count as tool outputs
    fewest: int = 2  # the results kept when the rest does not fit (`mask.keep_tool_results_min`)


def recent_from(work: Work, recent: Recent, view: list[ViewItem], cuts: list[int]) -> int:
    """Where the agent's recent work starts: the latest whole turn (of `cuts`, `valid_cuts`) from which the tail
    of `view` (the draft's) holds all of `recent`.

    When no turn after the record's summary does, all of the conversation after it is recent work."""
    draft, messages = work.draft, work.conversation.messages
    results = [
        i
        for i in range(draft.head_len, len(messages))
        if messages[i].get("role") == "tool" or is_observation(messages, i, recent.observation)
    ]
    bound = draft.prefix_len  # the latest message from which the tail holds `recent`
    wanted, running = min(recent.tokens, work.budget.limit // RECENT_SHARE), 0
    for _, tokens, origin in reversed(view):
        running += tokens
        if origin is not None and origin >= draft.prefix_len and running >= wanted:
            bound = origin
            break
    if results and recent.results > 0:
        bound = min(bound, results[-min(recent.results, len(results))])
    earlier = [cut for cut in cuts if cut <= bound]
    return earlier[-1] if earlier else draft.prefix_len


def kept_recent(work: Work, recent: Recent, settings: SummarizeSettings | None) -> int | None:
    """Where the agent's recent work starts, when it leaves room in the budget for the head, a summary and
    `RECENT_TURNS_OF_ROOM` more turns at the conversation's growth: a floor any tighter would make every turn
    compact again. Otherwise the newest `recent.fewest` results with no token minimum; else None: only the
    latest turn is kept whole, as before, noted on the log line (`recent_not_kept=` the floor's tokens)."""
    room = max_summary_tokens(settings, work.budget) if settings is not None else 0
    sizes = work.conversation.counts
    growth = growth_per_turn(work.conversation.messages, sizes, head_len=work.draft.head_len)
    limit = work.budget.limit - RECENT_TURNS_OF_ROOM * growth
    view, cuts = work.draft.view(work.conversation), valid_cuts(work)
    floor = 0
    for wanted in (recent, Recent(0, min(recent.fewest, recent.results), recent.observation)):
        start = recent_from(work, wanted, view, cuts)
        older = sum(t for m, t, o in view if o is not None and work.draft.prefix_len <= o < start and not pinned(m))
        floor = work.tokens - older + room
        if floor <= limit:
            return start
    work.outcome.notes["recent_not_kept"] = str(floor)
    return None


def depth_of(work: Work, spacing: Spacing) -> Depth:
    """Plan how deep this compaction goes (`inflight.compaction.depth`).

    Its floor is the fixed part, the head, a summary's room and the agent's recent work (`Work.recent_from`), or,
    when that is not kept, the shortest tail a summary may keep, as sent."""
    conversation, draft = work.conversation, work.draft
    view = draft.view(conversation)
    cuts = valid_cuts(work)
    tail_from = cuts[-1] if cuts else draft.prefix_len
    if work.recent_from is not None:
        tail_from = min(tail_from, work.recent_from)
    kept = sum(t for _, t, o in view if o is not None and (o < draft.prefix_len or o >= tail_from))
    floor = conversation.fixed_tokens + kept + max_summary_tokens(spacing.summarize, work.budget)
    sizes = [
        r.tokens if (r := draft.replaced.get(i)) is not None and r.kind == "truncate" else count
        for i, count in enumerate(conversation.counts)
    ]
    growth = growth_per_turn(conversation.messages, sizes, head_len=draft.head_len)
    budget = work.budget
    recent = work.recent_from
    masked = work.tokens - maskable(work, recent) if recent is not None else 0
    read = summary_read(work, spacing.summarize, recent) if recent is not None else 0
    return Depth.plan(
        growth=growth,
        floor=floor,
        target=budget.target,
        summarize_at=budget.summarize_at,
        spacing=spacing,
        limit=budget.limit,
        fixed=conversation.fixed_tokens + sum(t for _, t, o in view if o is not None and o < draft.head_len),
        latest=budget.earliest is not None,
        masked=masked,
        summary_input=read,
    )


PLACEHOLDER_TOKENS = 60  # about what a masked result's one line costs
CHARS_PER_TOKEN = 4


def summary_read(work: Work, settings: SummarizeSettings, end: int) -> int:
    """About the tokens a summarizer call would read now: the earlier summary, then the messages older than the
    agent's recent work (which starts at `end`), each as the transcript clips it (`clip_tool_output_chars`)."""
    conversation, draft = work.conversation, work.draft
    clipped = settings.clip_tool_output_chars // CHARS_PER_TOKEN
    return draft.summary_tokens + sum(min(conversation.counts[i], clipped) for i in range(draft.prefix_len, end))


def maskable(work: Work, end: int) -> int:
    """About the tokens masking would take out now: the tool results older than the agent's recent work (which
    starts at `end`), less their placeholders."""
    conversation, draft = work.conversation, work.draft
    messages, counts = conversation.messages, conversation.counts
    return sum(
        max(counts[i] - PLACEHOLDER_TOKENS, 0)
        for i in range(draft.prefix_len, end)
        if messages[i].get("role") == "tool" and i not in draft.replaced and i not in conversation.opaque
    )


def choose_cut(work: Work, settings: SummarizeSettings, *, growth: int = 0) -> int | None:
    """Choose where the unchanged tail starts: as many recent tokens as allowed, and at least the last turn.

    `growth` is how many tokens the conversation will gain before a summary made ahead is used. The tail
    kept now is that much shorter, so that with those tokens it ends up the usual length."""
    conversation, draft, budget = work.conversation, work.draft, work.budget
    valid = valid_cuts(work)
    if not valid:
        return None
    view = draft.view(conversation)
    tokens_from = {origin: 0 for _, _, origin in view if origin is not None}
    running = 0
    for _, tokens, origin in reversed(view):
        running += tokens
        if origin is not None and origin >= draft.prefix_len:
            tokens_from[origin] = running
    fixed = conversation.fixed_tokens + sum(t for _, t, o in view if o is None or o < draft.prefix_len)
    fixed -= draft.summary_tokens
    room = work.aim - fixed - max_summary_tokens(settings, budget)
    tail_budget = min(settings.keep_recent_tokens, budget.limit // 2, max(room, 0)) - growth
    cut = valid[-1]
    for candidate in reversed(valid[:-1]):
        if tokens_from.get(candidate, 0) > tail_budget:
            break
        cut = candidate
    if work.recent_from is not None:  # the agent's recent work is never summarized
        earlier = [candidate for candidate in valid if candidate <= work.recent_from]
        if not earlier:
            return None
        cut = min(cut, earlier[-1])
    return cut


def due_cut(work: Work, settings: SummarizeSettings) -> int | None:
    """The end of the span a summary replaces, when a summary is due this time; else None."""
    return choose_cut(work, settings) if work.summary_due() else None


def span(work: Work, cut: int) -> list[Message]:
    """The messages a summary replaces: the middle up to `cut`, except pinned ones, which stay."""
    messages = work.conversation.messages
    return [messages[i] for i in range(work.draft.prefix_len, cut) if not pinned(messages[i])]


def grown_ledger(work: Work, cut: int) -> Ledger:
    """The draft's ledger with the facts of the span up to `cut` added."""
    return (work.draft.ledger or Ledger()).add(facts_of(span(work, cut)), messages=cut - work.draft.prefix_len)


def replace_middle(
    work: Work,
    cut: int,
    text: str,
    *,
    settings: SummarizeSettings,
    fallback: bool,
    ledger: Ledger,
    action: Action | None = None,
) -> None:
    """Replace the middle up to `cut` with one summary message: `text`, then the ledger.

    Replacements inside the summarized span are dropped. The text gets at most 60% of the room, the ledger the rest."""
    draft = work.draft
    room = max(max_summary_tokens(settings, work.budget) * 4, 800)
    text = clip(text, int(room * 0.6)) if text else ""
    body = "\n\n".join(part for part in (text, ledger.render(max(room - len(text), 400))) if part)
    if work.handles:  # the summarized messages can be read back whole
        handle = span_handle(work.conversation.digests[draft.head_len : cut])
        body += f"\n\n{REPLACED_NOTE}{read_back_note(handle)}]"
    message = summary_message(body)
    draft.ledger = ledger
    work.outcome.messages_replaced += cut - draft.prefix_len
    draft.summary, draft.summary_tokens, draft.fallback = message, work.count_message(message), fallback
    draft.prefix_len = cut
    draft.replaced = {i: r for i, r in draft.replaced.items() if i >= cut or i < draft.head_len}
    work.middle_replaced = True
    work.outcome.actions.append(action or (Action.FALLBACK if fallback else Action.SUMMARIZE))
