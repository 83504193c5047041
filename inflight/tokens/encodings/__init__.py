"""The BPE rank files tiktoken would download, shipped so counting works offline, and which model uses which.

Each file is verified against tiktoken's published sha256 before use: a corrupted or swapped
file would make every count silently wrong, which is worse than refusing to start.
"""

from __future__ import annotations

import base64
import fnmatch
import functools
import gzip
import hashlib
from importlib import resources

import tiktoken

from inflight.frozen import frozen

# Which tiktoken encoding OpenAI's own model families use (tiktoken/model.py); other models get an estimate.
FAMILY_ENCODINGS: tuple[tuple[str, str], ...] = (
    ("gpt-4o*", "o200k_base"),
    ("chatgpt-4o*", "o200k_base"),
    ("gpt-4.1*", "o200k_base"),
    ("gpt-4.5*", "o200k_base"),
    ("gpt-5*", "o200k_base"),
    ("gpt-oss*", "o200k_base"),
    ("o1*", "o200k_base"),
    ("o3*", "o200k_base"),
    ("o4*", "o200k_base"),
    ("gpt-4*", "cl100k_base"),
    ("gpt-3.5*", "cl100k_base"),
)
FALLBACK_ENCODING = "o200k_base"

ENDOFTEXT = "<|endoftext|>"
FIM_PREFIX = "<|fim_prefix|>"
FIM_MIDDLE = "<|fim_middle|>"
FIM_SUFFIX = "<|fim_suffix|>"
ENDOFPROMPT = "<|endofprompt|>"


@frozen
class Spec:
    expected_sha256: str
    pat_str: str
    special_tokens: dict[str, int]


# Patterns and special tokens as tiktoken_ext/openai_public.py (tiktoken 0.14) defines them.
SPECS: dict[str, Spec] = {
    "o200k_base": Spec(
        expected_sha256="446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d",
        pat_str="|".join(
            [
                r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
                r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
                r"""\p{N}{1,3}""",
                r""" ?[^\s\p{L}\p{N}]+[\r\n/]*""",
                r"""\s*[\r\n]+""",
                r"""\s+(?!\S)""",
                r"""\s+""",
            ]
        ),
        special_tokens={ENDOFTEXT: 199999, ENDOFPROMPT: 200018},
    ),
    "cl100k_base": Spec(
        expected_sha256="223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7",
        pat_str=r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+|\s++$|\s*[\r\n]|\s+(?!\S)|\s""",  # noqa: E501
        special_tokens={
            ENDOFTEXT: 100257,
            FIM_PREFIX: 100258,
            FIM_MIDDLE: 100259,
            FIM_SUFFIX: 100260,
            ENDOFPROMPT: 100276,
        },
    ),
}


class EncodingFileError(RuntimeError):
    """A shipped rank file is missing or does not match tiktoken's published hash."""


def parse_ranks(data: bytes, *, name: str, expected_sha256: str) -> dict[bytes, int]:
    digest = hashlib.sha256(data).hexdigest()
    if digest != expected_sha256:
        raise EncodingFileError(
            f"encoding file for {name} is corrupt: sha256 {digest}, expected {expected_sha256}; reinstall inflight"
        )
    return {base64.b64decode(token): int(rank) for token, rank in (line.split() for line in data.splitlines() if line)}


def is_loaded(name: str) -> bool:
    """Whether `load_encoding(name)` would return at once (the first build takes about a second)."""
    return name in _LOADED


_LOADED: set[str] = set()


@functools.cache
def load_encoding(name: str) -> tiktoken.Encoding:
    """Build the named encoding from the packaged file (a second or so; cached for the process)."""
    spec = SPECS.get(name)
    if spec is None:
        raise EncodingFileError(f"unknown encoding {name!r}; known: {', '.join(SPECS)}")
    try:
        compressed = resources.files(__package__).joinpath(f"{name}.tiktoken.gz").read_bytes()
    except FileNotFoundError as exc:
        raise EncodingFileError(f"encoding file for {name} is missing from the package") from exc
    ranks = parse_ranks(gzip.decompress(compressed), name=name, expected_sha256=spec.expected_sha256)
    encoding = tiktoken.Encoding(name, pat_str=spec.pat_str, mergeable_ranks=ranks, special_tokens=spec.special_tokens)
    _LOADED.add(name)
    return encoding


@frozen(slots=True)
class EncodingChoice:
    name: str
    exact: bool  # False: another tokenizer's model, counted with o200k_base as an estimate


@functools.lru_cache(maxsize=4096)
def choose_encoding(model: str, override: str | None = None) -> EncodingChoice:
    """The encoding a model is counted with (cached: it runs on every request)."""
    if override:
        return EncodingChoice(override, exact=True)
    base = model.rsplit("/", 1)[-1].lower()  # "openai/gpt-4o" on a gateway is still gpt-4o
    for pattern, name in FAMILY_ENCODINGS:
        if fnmatch.fnmatchcase(base, pattern):
            return EncodingChoice(name, exact=True)
    return EncodingChoice(FALLBACK_ENCODING, exact=False)
