"""Long strings are counted in pieces (runs that break a tokenizer too), close to the whole-string count."""

from __future__ import annotations

import pytest

from inflight.tokens import TokenCounter
from inflight.tokens.encodings import load_encoding
from inflight.tokens.text import pieces, text_tokens


@pytest.mark.parametrize(
    "text",
    [
        " " * 30_000,
        "a" * 30_000,
        "\n" * 30_000,
        "x = 1\n" + "ab" * 15_000 + " tail",
        "word " * 10_000 + "\t" * 9000,
        "héllo wörld, 数据 and emoji 🙂 " * 5_000,
        "def f(x):\n    return {'key': [1, 2, 3], \"s\": x}  # comment\n" * 3_000,
    ],
)
def test_long_runs_count_within_one_percent_of_the_whole_string(text: str) -> None:
    enc = load_encoding("o200k_base")
    whole = len(enc.encode_ordinary(text))  # these sizes do not break tiktoken; a million spaces do
    assert abs(text_tokens(enc, text) - whole) <= max(0.01 * whole, 3)
    assert "".join(pieces(text)) == text


def test_a_million_spaces_is_counted_not_a_panic() -> None:
    counter = TokenCounter()
    body = {"model": "gpt-4o", "messages": [{"role": "user", "content": " " * 1_000_000 + "done"}]}
    count = counter.count_request(body, "o200k_base")
    assert not count.estimated
    assert 1_000_000 / 256 < count.total < 1_000_000  # tiktoken merges runs of spaces into long tokens
