"""A big JSON body parsed in pieces, so that no single call holds the GIL for long.

orjson parses 25 MB in about 0.1 s, in one call that holds the GIL throughout: for that long the
event loop, though the parse runs in a worker thread, answers nobody (not even `/healthz`). An agent's
body is nearly all one array (`messages`, `input`) of elements of at most a few hundred KB. So RE2
(which lets go of the GIL while it matches) finds the body's strings and brackets, which tell where
each top-level array and each of its elements begins and ends; each element is then parsed on its
own (a millisecond each), the rest of the object with those arrays left empty. JSON's grammar is
unambiguous: if every piece parses, together they are what the whole parses to. Anything this does
not expect (a body that is not an object, a repeated key, too much structure, a piece that does not
parse) returns None, and the caller parses the body whole.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import orjson
import re2

PIECES_FROM_BYTES = 1 << 20  # a body this big is parsed in pieces
ARRAY_BYTES = 64 * 1024  # a top-level array this big is parsed element by element
MAX_MARKS = 200_000  # strings and structural characters read before giving up (a body of tiny values)
WHITESPACE = b" \t\r\n"


def _structure() -> re2._Regexp[bytes]:
    options = re2.Options()
    options.encoding = re2.Options.Encoding.LATIN1  # type: ignore[attr-defined]  # bytes as bytes, no UTF-8
    return re2.compile(rb'"(?:[^"\\]|\\.)*"|[\[\]{}:,]', options)


STRUCTURE = _structure()  # a whole string (whatever brackets are in it), or one structural character


@dataclass
class ArraySpan:
    """A top-level array: its key, where it starts (`[`) and ends (after `]`), and its elements' spans."""

    key: str
    start: int
    end: int = 0
    elements: list[tuple[int, int]] = field(default_factory=list)


class TopLevel:
    """Reads a body's marks (strings and structural characters) in order: where its top-level arrays are."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.depth = 0
        self.key: tuple[int, int] | None = None  # the span of the key whose value is being read, at depth 1
        self.last_string: tuple[int, int] | None = None
        self.current: ArraySpan | None = None  # the top-level array being read
        self.element_start = 0
        self.arrays: list[ArraySpan] = []

    def mark(self, start: int, end: int) -> bool:
        """Read one mark; False when the body is not one this can split."""
        char = self.data[start : start + 1]
        if char == b'"':
            self.last_string = (start, end) if self.depth == 1 else None
        elif char == b":":
            if self.depth == 1:
                self.key, self.last_string = self.last_string, None
        elif char == b",":
            return self.comma(start)
        elif char in b"{[":
            self.open(char, start)
        else:
            return self.close(char, start)
        return True

    def open(self, char: bytes, start: int) -> None:
        if char == b"[" and self.depth == 1 and self.key is not None:
            self.current = ArraySpan(orjson.loads(self.data[self.key[0] : self.key[1]]), start)
            self.element_start = start + 1
        self.depth += 1

    def comma(self, start: int) -> bool:
        if self.depth == 1:
            self.key = None
        elif self.depth == 2 and self.current is not None:
            if not close_element(self.current, self.data, self.element_start, start, last=False):
                return False
            self.element_start = start + 1
        return True

    def close(self, char: bytes, start: int) -> bool:
        self.depth -= 1
        if self.current is not None and self.depth == 1:
            if char != b"]" or not close_element(self.current, self.data, self.element_start, start, last=True):
                return False
            self.current.end = start + 1
            self.arrays.append(self.current)
            self.current = None
        return self.depth >= 0


def top_level_arrays(data: bytes) -> list[ArraySpan] | None:
    """Every array that is the value of a key of the top-level object, with its elements (None: not an
    object, or not one this can read: then parse it whole)."""
    if data.lstrip(WHITESPACE)[:1] != b"{":
        return None
    reader = TopLevel(data)
    for count, mark in enumerate(STRUCTURE.finditer(data)):
        if count > MAX_MARKS or not reader.mark(mark.start(), mark.end()):
            return None
    return reader.arrays if reader.depth == 0 else None


def close_element(array: ArraySpan, data: bytes, start: int, end: int, *, last: bool) -> bool:
    """Add the element between `start` and `end`; False when there is none where one must be (`[1,]`)."""
    if data[start:end].strip(WHITESPACE):
        array.elements.append((start, end))
        return True
    return last and not array.elements  # `[]`: no element, and that is fine


def parse_in_pieces(data: bytes, *, array_bytes: int = ARRAY_BYTES) -> dict[str, Any] | None:
    """`data` parsed as orjson parses it whole, its big top-level arrays element by element (None: parse it
    whole instead)."""
    try:
        arrays = top_level_arrays(data)
    except orjson.JSONDecodeError:  # a key that is no JSON string
        return None
    if arrays is None:
        return None
    big = [array for array in arrays if array.end - array.start >= array_bytes]
    keys = [array.key for array in big]
    if not big or len(set(keys)) != len(keys):
        return None
    view = memoryview(data)
    rest = bytearray()
    position = 0
    for array in big:
        rest += view[position : array.start]
        rest += b"[]"
        position = array.end
    rest += view[position:]
    try:
        top = orjson.loads(rest)
        if not isinstance(top, dict) or any(top.get(key) != [] for key in keys):
            return None  # a repeated key, or one that is not the top level's after all
        for array in big:
            top[array.key] = [orjson.loads(view[start:end]) for start, end in array.elements]
    except orjson.JSONDecodeError:
        return None
    return top
