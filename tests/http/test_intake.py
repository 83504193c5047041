"""The body's intake, in process: whether orjson can write a parsed body back, asked of a big body a piece at a time
(a value or an array's element at the depth it has in the body) with the answer the whole body would give."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from inflight.http.intake import parse_request, writable
from inflight.http.json_pieces import PIECES_FROM_BYTES

FILLER = orjson.dumps([{"role": "user", "content": "y" * 1000} for _ in range(PIECES_FROM_BYTES // 1000 + 1)])


def body(depth: int, where: str) -> bytes:
    """A big chat body with one value `depth` lists deep: in a message, or as a top-level value of its own."""
    deep = b"[" * depth + b'"x"' + b"]" * depth
    if where == "message":
        return b'{"model":"gpt-4o","messages":' + FILLER[:-1] + b',{"role":"user","content":' + deep + b"}]}"
    return b'{"model":"gpt-4o","messages":' + FILLER + b',"metadata":' + deep + b"}"


def whole_writable(payload: dict[str, Any]) -> bool:
    try:
        orjson.dumps(payload)
    except orjson.JSONEncodeError:
        return False
    return True


@pytest.mark.parametrize("where", ["message", "top-level value"])
def test_a_big_body_is_writable_exactly_when_the_whole_would_be(where: str) -> None:
    answers = []
    for depth in range(248, 258):
        data = body(depth, where)
        assert len(data) >= PIECES_FROM_BYTES
        parsed, countable = parse_request(data)
        assert countable == writable(data, parsed) == whole_writable(parsed), depth
        answers.append(countable)
    assert True in answers and False in answers  # orjson's limit lies within the depths tried


def test_a_big_body_of_many_small_blocks_nested_wide_and_deep_is_answered_without_a_recursion_error() -> None:
    level = b'{"k":"' + b"y" * 3000 + b'","v":['
    wide = b'"a",' * 20
    deep = (wide + level) * 400  # 400 levels of an object and a list of 21 items: past orjson's writing depth
    data = b'{"model":"gpt-4o","messages":[' + level + deep + b"1" + b"]}" * 401 + b"]}"
    assert len(data) >= PIECES_FROM_BYTES
    parsed, countable = parse_request(data)
    assert countable is False and writable(data, parsed) is whole_writable(parsed) is False
