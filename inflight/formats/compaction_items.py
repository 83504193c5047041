"""inflight's own `compaction` items: a summary sealed so that only the proxy can read it, and no one can edit it.

When the upstream has no `POST /v1/responses/compact` (vLLM, llama.cpp, most gateways), inflight
answers it and hands the client a `compaction` item, as OpenAI does, whose `encrypted_content` is
ours: `inflight1.` then, base64url, a 16-byte nonce, the summary encrypted with a keystream of
HMAC-SHA256 blocks, and a 16-byte HMAC-SHA256 tag over nonce and ciphertext (encrypt-then-MAC,
separate keys derived from the configured one). The item carries its own summary, so it points at
no record another conversation could reach, and a changed byte fails the tag.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os

PREFIX = "inflight1."
NONCE_BYTES = 16
TAG_BYTES = 16
MAX_ITEM_CHARS = 4 * 1024 * 1024  # a summary is a few KB: anything near this is not ours


class ItemKey:
    """The key that seals and opens our compaction items (from `responses.item_key`)."""

    def __init__(self, secret: bytes) -> None:
        self._encrypt = hmac.new(secret, b"inflight compaction item: encrypt", hashlib.sha256).digest()
        self._sign = hmac.new(secret, b"inflight compaction item: sign", hashlib.sha256).digest()

    def seal(self, text: str) -> str:
        nonce = os.urandom(NONCE_BYTES)
        cipher = self._xor(nonce, text.encode("utf-8"))
        return PREFIX + base64.urlsafe_b64encode(nonce + cipher + self._tag(nonce, cipher)).decode("ascii")

    def open(self, token: str) -> str | None:
        """The summary sealed in `token`, or None when it is not one this key sealed (or it was edited)."""
        if not is_ours(token) or len(token) > MAX_ITEM_CHARS:
            return None
        try:
            raw = base64.b64decode(token[len(PREFIX) :].encode("ascii"), altchars=b"-_", validate=True)
        except (ValueError, UnicodeEncodeError):  # binascii.Error is a ValueError
            return None
        if len(raw) < NONCE_BYTES + TAG_BYTES:
            return None
        nonce, cipher, tag = raw[:NONCE_BYTES], raw[NONCE_BYTES:-TAG_BYTES], raw[-TAG_BYTES:]
        if not hmac.compare_digest(tag, self._tag(nonce, cipher)):
            return None
        try:
            return self._xor(nonce, cipher).decode("utf-8")
        except UnicodeDecodeError:
            return None

    def _tag(self, nonce: bytes, cipher: bytes) -> bytes:
        return hmac.new(self._sign, nonce + cipher, hashlib.sha256).digest()[:TAG_BYTES]

    def _xor(self, nonce: bytes, data: bytes) -> bytes:
        blocks = (len(data) + 31) // 32
        stream = b"".join(
            hmac.new(self._encrypt, nonce + n.to_bytes(8, "big"), hashlib.sha256).digest() for n in range(blocks)
        )
        return (int.from_bytes(data, "big") ^ int.from_bytes(stream[: len(data)], "big")).to_bytes(len(data), "big")


def is_ours(token: object) -> bool:
    return isinstance(token, str) and token.startswith(PREFIX)
