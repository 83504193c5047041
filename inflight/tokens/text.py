"""Count the tokens of one string, safely even for strings that crash a tokenizer or stall a server.

tiktoken's pre-tokenizer (a backtracking regex) overflows its stack on a long run of one kind of
character and panics (`PanicException`, a `BaseException`: a million spaces is enough), and its
byte-pair merge is slow on a very long piece with no break in it. So a long string is counted in
pieces of at most `PIECE` characters, cut just before a space where there is one (the space
starts the next word's token either way) and anywhere in a run without one: the merges a cut
prevents are a token or two per piece, far below 1%. Pieces also keep a big count from holding
the GIL: tiktoken releases it while it encodes, and each piece's result is small, so the event
loop gets its turn between pieces even while a worker thread counts 30 MB.

If the tokenizer fails anyway, `safely` estimates that item with `estimate_tokens` (and
`TokenCounter` reports it).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import orjson
import tiktoken

log = logging.getLogger("inflight")

PIECE = 8192  # characters counted at a time: tiktoken handles a run this long in about 2 ms
BYTES_PER_TOKEN = 4  # the estimate when the tokenizer fails: generous for English and code


def text_tokens(enc: tiktoken.Encoding, text: str) -> int:
    if len(text) <= PIECE:
        return len(enc.encode_ordinary(text))
    return sum(len(enc.encode_ordinary(piece)) for piece in pieces(text))


SAMPLE = 512  # characters of each of the three samples `sampled_tokens` counts
SAMPLED_ABOVE = 4 * SAMPLE  # a string longer than this is estimated from samples


def sampled_tokens(enc: tiktoken.Encoding, text: str) -> int:
    """Estimate `text`'s tokens from three counted samples (its start, middle and end), scaled to its length.

    This is for text a compaction will drop: its count only needs to be roughly right, and counting
    25 MB of tool output exactly takes seconds. It depends only on `text`, so a placeholder that states
    it stays the same every turn. Short text is counted exactly."""
    if len(text) <= SAMPLED_ABOVE:
        return text_tokens(enc, text)
    middle = (len(text) - SAMPLE) // 2
    samples = (text[:SAMPLE], text[middle : middle + SAMPLE], text[-SAMPLE:])
    counted = sum(len(enc.encode_ordinary(sample)) for sample in samples)
    return -(-counted * len(text) // (3 * SAMPLE))


def estimate_tokens(text: str) -> int:
    return -(-len(text.encode("utf-8", "surrogatepass")) // BYTES_PER_TOKEN)


def safely(count: Callable[[Any, tiktoken.Encoding], int], item: Any, enc: tiktoken.Encoding) -> tuple[int, bool]:
    """Return `count(item, enc)`, or an estimate from its size (as a string, else as JSON) if the tokenizer fails.

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
    """`text_tokens`, or the estimate if the tokenizer fails (for sizing, where nothing needs to report it)."""
    return safely(lambda item, encoding: text_tokens(encoding, item), text, enc)[0]


def pieces(text: str) -> list[str]:
    """Split `text` into pieces of at most PIECE characters, each cut before a space in its second half if any."""
    out: list[str] = []
    start = 0
    while len(text) - start > PIECE:
        end = start + PIECE
        space = text.rfind(" ", start + PIECE // 2, end)
        cut = space if space > start else end
        out.append(text[start:cut])
        start = cut
    out.append(text[start:])
    return out
