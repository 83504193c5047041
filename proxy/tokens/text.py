"""Counting the tokens of one string, safe against the strings that break a tokenizer.

tiktoken's pre-tokenizer (a backtracking regex) overflows its stack on a long run of one kind of
character and panics (`PanicException`, a `BaseException`: a million spaces is enough), and its
byte-pair merge is slow on a very long piece with no break in it. Such runs are counted in
blocks: the merges a cut prevents are at most a token or two per block, far below 1%. Should the
tokenizer fail anyway, `safely` counts that item by `estimate_tokens` (and `TokenCounter` says so).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from typing import Any

import orjson
import tiktoken

log = logging.getLogger("inflight")

BLOCK = 1024  # characters of a long run counted at a time
LONG_RUN = re.compile(r"\s{2048,}|\S{2048,}")
BYTES_PER_TOKEN = 4  # the estimate when the tokenizer fails: generous for English and code


def text_tokens(enc: tiktoken.Encoding, text: str) -> int:
    if len(text) < 2048:
        return len(enc.encode_ordinary(text))
    return sum(len(enc.encode_ordinary(piece)) for piece in pieces(text))


def estimate_tokens(text: str) -> int:
    return -(-len(text.encode("utf-8", "surrogatepass")) // BYTES_PER_TOKEN)


def safely(count: Callable[[Any, tiktoken.Encoding], int], item: Any, enc: tiktoken.Encoding) -> tuple[int, bool]:
    """`count(item, enc)`, or an estimate from its size (a string's own, else its JSON's) if the tokenizer fails.

    tiktoken can panic (`PanicException` derives from BaseException); a request must not be lost
    to it. `text_tokens` avoids the inputs known to do that; this is for the ones not known. Returns
    (tokens, estimated).
    """
    try:
        return count(item, enc), False
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException as exc:
        log.warning("[tokens] %s failed (%s); estimating from size", enc.name, type(exc).__name__)
        return estimate_tokens(item if isinstance(item, str) else orjson.dumps(item, default=str).decode()), True


def counted_or_estimated(enc: tiktoken.Encoding, text: str) -> int:
    """`text_tokens`, or the estimate if the tokenizer fails (for sizing, where no header need say so)."""
    return safely(lambda item, encoding: text_tokens(encoding, item), text, enc)[0]


def pieces(text: str) -> list[str]:
    """`text` with every long run cut into blocks; everything between runs whole."""
    out: list[str] = []
    start = 0
    for run in LONG_RUN.finditer(text):
        if run.start() > start:
            out.append(text[start : run.start()])
        out += [text[i : min(i + BLOCK, run.end())] for i in range(run.start(), run.end(), BLOCK)]
        start = run.end()
    if start < len(text):
        out.append(text[start:])
    return out
