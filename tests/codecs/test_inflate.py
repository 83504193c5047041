"""Inflating a body within a bound: whole or as it comes, gzip members, raw deflate, and what it refuses."""

from __future__ import annotations

import gzip
import zlib

import pytest

from inflight.codecs.inflate import (
    InflatedTooLarge,
    InflateError,
    Inflater,
    encoding_name,
    inflate,
    is_identity,
    is_inflatable,
)

TEXT = b"the quick brown fox jumps over the lazy dog\n" * 5_000  # 220 KB


def raw_deflate(data: bytes) -> bytes:
    compressor = zlib.compressobj(wbits=-15)
    return compressor.compress(data) + compressor.flush()


def test_content_encodings_are_named_as_http_does() -> None:
    assert encoding_name(None) == encoding_name(b"") == encoding_name(" Identity ") == "identity"
    assert encoding_name(b"GZIP") == "gzip"
    assert is_identity(None) and not is_identity("gzip")
    assert is_inflatable(b"gzip") and is_inflatable("x-gzip") and is_inflatable(" Deflate")
    assert not is_inflatable("br") and not is_inflatable(None)


@pytest.mark.parametrize(
    ("encoded", "encoding"),
    [
        (gzip.compress(TEXT), "gzip"),
        (gzip.compress(TEXT[:1000]) + gzip.compress(TEXT[1000:]), "gzip"),  # two members
        (zlib.compress(TEXT), "deflate"),
        (raw_deflate(TEXT), "deflate"),  # what some clients send as deflate
    ],
)
def test_a_whole_body_inflates(encoded: bytes, encoding: str) -> None:
    assert inflate(encoded, encoding, limit=len(TEXT)) == TEXT


def test_a_whole_body_past_the_bound_is_refused() -> None:
    with pytest.raises(InflatedTooLarge):
        inflate(gzip.compress(TEXT), "gzip", limit=len(TEXT) - 1)


@pytest.mark.parametrize(
    ("encoded", "encoding"),
    [
        (b"not gzip at all", "gzip"),
        (gzip.compress(TEXT)[:-20], "gzip"),  # ends early
        (gzip.compress(TEXT) + b"junk", "gzip"),  # not a member after the first
        (raw_deflate(TEXT)[:-20], "deflate"),
    ],
)
def test_what_is_not_the_encoding_is_refused(encoded: bytes, encoding: str) -> None:
    with pytest.raises(InflateError):
        inflate(encoded, encoding, limit=10 * len(TEXT))


def test_as_it_comes_it_inflates_to_the_same_in_pieces_of_at_most_the_piece() -> None:
    encoded = gzip.compress(TEXT[:70_000]) + gzip.compress(TEXT[70_000:])
    for size in (1, 7, 4096, len(encoded)):
        inflater = Inflater(limit=len(TEXT), piece=10_000)
        pieces = [p for start in range(0, len(encoded), size) for p in inflater.feed(encoded[start : start + size])]
        assert b"".join(pieces) == TEXT, size
        assert max(map(len, pieces)) <= 10_000
        assert inflater.complete and not inflater.exceeded


def test_as_it_comes_it_stops_at_the_bound_and_says_more_was_there() -> None:
    bomb = gzip.compress(b"\0" * (50 * 1024 * 1024), compresslevel=9)
    inflater = Inflater(limit=1024 * 1024)
    inflated = sum(
        len(piece) for start in range(0, len(bomb), 16_384) for piece in inflater.feed(bomb[start : start + 16_384])
    )
    assert inflated == 1024 * 1024
    assert inflater.exceeded


def test_a_body_that_inflates_to_exactly_the_bound_is_not_past_it() -> None:
    inflater = Inflater(limit=len(TEXT))
    assert b"".join(inflater.feed(gzip.compress(TEXT))) == TEXT
    assert not inflater.exceeded and inflater.complete
