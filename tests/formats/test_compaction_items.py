"""inflight's own compaction items: sealed and opened by one key, refused when edited or foreign."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from inflight.formats.compaction_items import PREFIX, ItemKey, is_ours

KEY = ItemKey(b"one")


@given(st.text(max_size=2000))
def test_what_is_sealed_opens_to_itself(text: str) -> None:
    token = KEY.seal(text)
    assert is_ours(token) and KEY.open(token) == text


def test_the_summary_cannot_be_read_off_the_item_and_no_two_seals_are_alike() -> None:
    text = "## Task\nFix the parser in src/parser.py"
    first, second = KEY.seal(text), KEY.seal(text)
    assert first != second  # a fresh nonce each time
    assert "parser" not in first and "Task" not in first


def test_an_edited_foreign_or_malformed_item_does_not_open() -> None:
    token = KEY.seal("the summary")
    body = token[len(PREFIX) :]
    for i in range(0, len(body) - 2, 7):  # any changed character along the token
        flipped = body[:i] + ("A" if body[i] != "A" else "B") + body[i + 1 :]
        assert KEY.open(PREFIX + flipped) is None
    assert ItemKey(b"two").open(token) is None
    for bad in ("", PREFIX, PREFIX + "!!!", PREFIX + "AAAA", "opaque-from-openai", token[:-4]):
        assert KEY.open(bad) is None
    assert not is_ours("gAAAAABn-openai-encrypted") and not is_ours(None)
