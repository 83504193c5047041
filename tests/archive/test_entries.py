"""What a compaction's archive entry says it dropped: only what that compaction took out, and how."""

from __future__ import annotations

from typing import Any

from inflight.archive.entries import conversation_id, conversation_label, dropped, summary_kind
from inflight.compaction.ledger import LEDGER_HEADING
from inflight.compaction.record import Record, Replacement
from inflight.compaction.stages.digest import NO_SUMMARY_NOTE, digest_text
from inflight.compaction.summary_job import summary_message

SUMMARY = {"role": "user", "content": "[Previous conversation summary]\n## Task\nfix it"}


def conversation(length: int) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [{"role": "system", "content": "sys"}, {"role": "user", "content": "task"}]
    messages += [{"role": "tool" if i % 2 else "assistant", "content": f"m{i}"} for i in range(2, length)]
    messages[5] = {"role": "system", "content": "a reminder in the middle"}
    return messages


def mask(index: int, kind: Any = "mask") -> Replacement:
    return Replacement(bytes(16), {"role": "tool", "content": "[pruned]"}, 3, kind)


def test_a_first_compaction_drops_its_summarized_middle_and_what_it_masked() -> None:
    messages = conversation(16)
    record = Record(2, 8, b"", SUMMARY, 10, replaced={9: mask(9), 11: mask(11, "truncate")})
    found = [(item["index"], item["how"]) for item in dropped(messages, None, record)]
    # The system message in the middle is sent as it is: not dropped.
    assert found == [
        (2, "summarized"),
        (3, "summarized"),
        (4, "summarized"),
        (6, "summarized"),
        (7, "summarized"),
        (9, "masked"),
        (11, "truncated"),
    ]
    assert dropped(messages, None, record)[0]["message"] is messages[2]  # the client's own message


def test_a_later_compaction_lists_only_what_it_took_out_itself() -> None:
    messages = conversation(20)
    previous = Record(2, 8, b"", SUMMARY, 10, replaced={9: mask(9), 11: mask(11), 13: mask(13)})
    record = Record(2, 12, b"", SUMMARY, 10, replaced={13: mask(13), 15: mask(15), 17: mask(17, "truncate")})
    found = [(item["index"], item["how"]) for item in dropped(messages, previous, record)]
    assert found == [
        (8, "summarized"),
        (9, "summarized"),
        (10, "summarized"),
        (11, "summarized"),
        (15, "masked"),
        (17, "truncated"),
    ]
    masked_only = Record(2, 2, b"", None, 0, replaced={13: mask(13), 15: mask(15)})
    assert [item["index"] for item in dropped(messages, Record(2, 2, b"", replaced={13: mask(13)}), masked_only)] == [
        15
    ]


def test_a_truncated_head_or_pinned_message_is_dropped_content_too() -> None:
    messages = conversation(16)
    record = Record(2, 8, b"", SUMMARY, 10, replaced={1: mask(1, "truncate"), 5: mask(5, "truncate"), 9: mask(9)})
    found = [(item["index"], item["how"]) for item in dropped(messages, None, record)]
    assert (1, "truncated") in found and (5, "truncated") in found and (9, "masked") in found
    assert [index for index, how in found if how == "summarized"] == [2, 3, 4, 6, 7]


def test_conversation_ids_are_short_and_labels_readable() -> None:
    session, head = "session:agent/1 <x>", "head:gpt-4o:" + "ab" * 16
    assert conversation_label(session) == "agent/1 <x>" and conversation_label(head) == "gpt-4o"
    assert conversation_id(session).isalnum() and len(conversation_id(session)) == 16
    assert conversation_id(session) != conversation_id(head)
    assert (
        conversation_label(session + "#tab12.wcd34") == "agent/1 <x>" and conversation_label(head + "#tab") == "gpt-4o"
    )
    assert conversation_label("session:a#b#") == "a#b"  # a name holding a `#` has a scope, if empty
    assert len(conversation_label("session:" + "s" * 1_000_000)) == 256


def test_what_stands_for_the_summarized_messages_is_named_by_what_it_holds() -> None:
    """An LLM summary, the ledger alone, or an earlier summary with the ledger of what came after: the viewer's
    title says which (it once called a real summary "the summarizer gave none")."""

    def record(text: str | None, *, fallback: bool) -> Record:
        summary = None if text is None else summary_message(f"{text}\n\n{LEDGER_HEADING}\n- ran `ls`")
        return Record(head_len=2, prefix_len=6, prefix_hash=b"", summary=summary, fallback=fallback)

    assert summary_kind(record(None, fallback=False)) is None
    assert summary_kind(record("## Task\nFix it.", fallback=False)) == "summary"
    assert summary_kind(record(NO_SUMMARY_NOTE, fallback=True)) == "ledger"
    assert summary_kind(record(digest_text("## Task\nFix it."), fallback=True)) == "summary-and-ledger"
    assert summary_kind(record(digest_text(digest_text("")), fallback=True)) == "ledger"
