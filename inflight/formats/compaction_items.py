"""inflight's own `compaction` items: a summary sealed so that only the proxy can read it, for one client only.

When the upstream has no `POST /v1/responses/compact` (vLLM, llama.cpp, most gateways), inflight
answers it and hands the client a `compaction` item, as OpenAI does, whose `encrypted_content` is
ours: `inflight2.` then, base64url, a 12-byte random nonce and the summary sealed with AES-256-GCM
(the key derived from `responses.item_key` with HKDF-SHA256), its 16-byte tag last. The client's
tenant (the digest of its key) is the associated data, so an item opens only for the key it was
handed to. The item carries its own summary, so it points at no record another conversation could
reach, and a changed byte fails the tag.
"""

from __future__ import annotations

import base64
import os

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

PREFIX = "inflight2."
# Items an earlier release of inflight sealed another way: still ours (never sent upstream), never opened.
FORMER_PREFIXES = ("inflight1.",)
NONCE_BYTES = 12
TAG_BYTES = 16
KEY_INFO = b"inflight compaction item: AES-256-GCM"
MAX_ITEM_CHARS = 4 * 1024 * 1024  # a summary is a few KB: anything near this is not ours


class ItemKey:
    """The key that seals and opens our compaction items (from `responses.item_key`)."""

    def __init__(self, secret: bytes) -> None:
        key = HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=KEY_INFO).derive(secret)
        self._aead = AESGCM(key)

    def seal(self, text: str, *, tenant: str) -> str:
        """`text` sealed for the client whose key digests to `tenant` ("": a client that presents none)."""
        nonce = os.urandom(NONCE_BYTES)
        sealed = self._aead.encrypt(nonce, text.encode("utf-8"), tenant.encode("utf-8"))
        return PREFIX + base64.urlsafe_b64encode(nonce + sealed).decode("ascii")

    def open(self, token: str, *, tenant: str) -> str | None:
        """The summary sealed in `token`, or None when this key did not seal it for `tenant` (or it was edited)."""
        if not token.startswith(PREFIX) or len(token) > MAX_ITEM_CHARS:
            return None
        try:
            raw = base64.b64decode(token[len(PREFIX) :].encode("ascii"), altchars=b"-_", validate=True)
        except (ValueError, UnicodeEncodeError):  # binascii.Error is a ValueError
            return None
        if len(raw) < NONCE_BYTES + TAG_BYTES:
            return None
        try:
            return self._aead.decrypt(raw[:NONCE_BYTES], raw[NONCE_BYTES:], tenant.encode("utf-8")).decode("utf-8")
        except (InvalidTag, UnicodeDecodeError):
            return None


def is_ours(token: object) -> bool:
    """`encrypted_content` inflight sealed (now or in an earlier release), not the upstream's."""
    return isinstance(token, str) and token.startswith((PREFIX, *FORMER_PREFIXES))
