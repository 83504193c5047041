"""A big body parsed in pieces is what orjson makes of it whole, or is left for orjson to parse whole."""

from __future__ import annotations

import json
import random
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from inflight.http.intake import parse_object
from inflight.http.json_pieces import PIECES_FROM_BYTES, parse_in_pieces, top_level_arrays

TRICKY = st.sampled_from(['"', "\\", "[", "]", "{", "}", ",", ":", '\\"]', '"},{"', "\n", "é", "\u2028", "x"])
TEXT = st.lists(TRICKY, max_size=12).map("".join)
NUMBERS = st.integers(-(2**63), 2**63 - 1) | st.floats(allow_nan=False, allow_infinity=False)
SCALARS = st.none() | st.booleans() | NUMBERS | TEXT
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(TEXT, inner, max_size=4),
    max_leaves=20,
)
BODIES = st.dictionaries(TEXT, VALUES | st.lists(VALUES, max_size=6), max_size=6)


def written(body: dict[str, Any], how: int) -> bytes:
    """`body` as clients write it: compact, indented, or with spaces after the separators."""
    if how == 0:
        return orjson.dumps(body)
    if how == 1:
        return orjson.dumps(body, option=orjson.OPT_INDENT_2)
    return json.dumps(body, ensure_ascii=False).encode()


@settings(max_examples=150, deadline=None)
@given(BODIES, st.integers(0, 2))
def test_any_object_parses_to_what_orjson_makes_of_it(body: dict[str, Any], how: int) -> None:
    data = written(body, how)
    parsed = parse_in_pieces(data, array_bytes=0)  # every array in pieces, however small
    if not any(isinstance(value, list) for value in body.values()):
        assert parsed is None  # nothing to split: parsed whole
        return
    assert parsed is not None and parsed == orjson.loads(data)
    assert list(parsed) == list(body)  # the keys in their order


@pytest.mark.parametrize(
    "data",
    [
        b'[{"a": 1}]',  # not an object
        b'{"m": [1,,2]}',  # an element missing
        b'{"m": [1, 2,]}',  # a trailing comma
        b'{"m": [1, 2}',  # a bracket that does not close the array
        b'{"m": [1], "m": [2]}',  # a repeated key
        b'{"m": [1, 2]',  # no end
        b'{"m": [1, 2]}}',  # one end too many
    ],
)
def test_what_it_cannot_split_is_left_to_a_whole_parse(data: bytes) -> None:
    assert parse_in_pieces(data, array_bytes=0) is None


def test_the_arrays_of_an_agent_body_and_their_elements_are_found() -> None:
    messages = [{"role": "tool", "content": '[{]}\\",' * 10}, {"role": "user", "content": "ok"}]
    data = orjson.dumps({"model": "m", "messages": messages, "tools": [], "meta": {"nested": [1, 2]}})
    arrays = top_level_arrays(data)
    assert arrays is not None
    assert [(array.key, len(array.elements)) for array in arrays] == [("messages", 2), ("tools", 0)]
    assert [orjson.loads(data[start:end]) for start, end in arrays[0].elements] == messages


def test_a_big_agent_body_is_parsed_in_pieces_by_intake() -> None:
    rng = random.Random(7)
    text = "".join(rng.choice('ab "\\{}[],:\n') for _ in range(300_000))
    messages = [{"role": "user", "content": "task"}] + [
        {"role": "tool", "tool_call_id": f"c{i}", "content": text[i:]} for i in range(8)
    ]
    data = orjson.dumps({"model": "m", "messages": messages, "stream": True})
    assert len(data) >= PIECES_FROM_BYTES
    assert parse_in_pieces(data) == orjson.loads(data)  # split, and equal
    assert parse_object(data) == orjson.loads(data)
