"""The middle of a conversation: choose where the unchanged tail starts, and replace what comes before it.

The head (system/developer messages and the task) and the tail stay; the middle becomes one
summary message. Both the LLM summary and its local fallback replace the same span.
"""

from __future__ import annotations

from inflight.compaction.actions import Action
from inflight.compaction.conversation import Message, pinned, turn_starts
from inflight.compaction.depth import Depth, Spacing, growth_per_turn
from inflight.compaction.draft import Budget
from inflight.compaction.facts import facts_of
from inflight.compaction.ledger import Ledger
from inflight.compaction.retrieval import read_back_note, span_handle
from inflight.compaction.stage import Work
from inflight.compaction.summary_job import clip, summary_message
from inflight.config import Summarize as SummarizeSettings

REPLACED_NOTE = "[the messages this summary replaced: "  # after the ledger: how to read them back


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


def depth_of(work: Work, spacing: Spacing) -> Depth:
    """Plan how deep this compaction goes (`inflight.compaction.depth`).

    Its floor is the fixed part, the head, a summary's room and the shortest tail a summary may keep, as sent."""
    conversation, draft = work.conversation, work.draft
    view = draft.view(conversation)
    cuts = valid_cuts(work)
    tail_from = cuts[-1] if cuts else draft.prefix_len
    kept = sum(t for _, t, o in view if o is not None and (o < draft.prefix_len or o >= tail_from))
    floor = conversation.fixed_tokens + kept + max_summary_tokens(spacing.summarize, work.budget)
    sizes = [
        r.tokens if (r := draft.replaced.get(i)) is not None and r.kind == "truncate" else count
        for i, count in enumerate(conversation.counts)
    ]
    growth = growth_per_turn(conversation.messages, sizes, head_len=draft.head_len)
    budget = work.budget
    return Depth.plan(
        growth=growth,
        floor=floor,
        target=budget.target,
        summarize_at=budget.summarize_at,
        spacing=spacing,
        limit=budget.limit,
        fixed=conversation.fixed_tokens + sum(t for _, t, o in view if o is not None and o < draft.head_len),
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
