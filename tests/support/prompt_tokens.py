"""How the fake upstreams count a prompt: o200k_base tokens of each piece, remembered, as agents resend their
history every turn."""

from __future__ import annotations

from typing import Any

import orjson
import tiktoken

from inflight.tokens import load_encoding


class RememberedTokens:
    """o200k_base tokens of a string, or of a value's JSON, each counted once."""

    def __init__(self) -> None:
        self._encoding: tiktoken.Encoding | None = None
        self._counted: dict[bytes, int] = {}

    def __call__(self, value: Any) -> int:
        if self._encoding is None:
            self._encoding = load_encoding("o200k_base")
        text = value.encode() if isinstance(value, str) else orjson.dumps(value)
        if text not in self._counted:
            self._counted[text] = len(self._encoding.encode_ordinary(text.decode()))
        return self._counted[text]
