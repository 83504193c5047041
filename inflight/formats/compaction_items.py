"""inflight's own `compaction` items: a summary encrypted so that only the proxy can read it, for one client only.

When the upstream lacks `POST /v1/responses/compact` (vLLM, llama.cpp, most gateways), inflight answers
it and gives the client a `compaction` item, as OpenAI does, with our own `encrypted_content`:
`inflight2.` followed by the base64url of a 12-byte random nonce and the summary encrypted with
AES-256-GCM (key derived from `responses.item_key` with HKDF-SHA256), with its 16-byte tag last. The
client's tenant is the associated data, so an item decrypts only for the key it was given to. The item
carries its own summary rather than pointing at a record another conversation could reach, and any
changed byte fails the tag check.
"""

from __future__ import annotations

import base64
import logging
import os
import time
import uuid
from typing import Any

import orjson
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from inflight.formats.seam import text_of_parts

PREFIX = "inflight2."
# Prefixes of items encrypted differently by earlier releases: recognised as ours (never sent upstream) but not
# decrypted.
FORMER_PREFIXES = ("inflight1.",)
NONCE_BYTES = 12
TAG_BYTES = 16
KEY_INFO = b"inflight compaction item: AES-256-GCM"
MAX_ITEM_CHARS = 4 * 1024 * 1024  # a summary is a few KB, so anything this large is not ours


class ItemKey:
    """The key that encrypts and decrypts our compaction items (from `responses.item_key`)."""

    def __init__(self, secret: bytes, *, first_use_note: str | None = None) -> None:
        key = HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=KEY_INFO).derive(secret)
        self._aead = AESGCM(key)
        self._note = first_use_note  # logged once, as the first item is sealed: it concerns only a proxy that seals

    def seal(self, text: str, *, tenant: str) -> str:
        """`text` encrypted for the client whose tenant is `tenant` ("" for a client that presents no key)."""
        if self._note is not None:
            note, self._note = self._note, None
            logging.getLogger("inflight").info("%s", note)
        nonce = os.urandom(NONCE_BYTES)
        sealed = self._aead.encrypt(nonce, text.encode("utf-8"), tenant.encode("utf-8"))
        return PREFIX + base64.urlsafe_b64encode(nonce + sealed).decode("ascii")

    def open(self, token: str, *, tenant: str) -> str | None:
        """The summary in `token`, or None if this key did not encrypt it for `tenant` (or it was altered)."""
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
    """Whether `encrypted_content` was encrypted by inflight (this or an earlier release), not the upstream."""
    return isinstance(token, str) and token.startswith((PREFIX, *FORMER_PREFIXES))


def sealed_output(original: list[Any], compacted: object, key: ItemKey, *, tenant: str) -> list[Any] | None:
    """The compacted items, with the messages the compaction wrote (the summary, and any earlier summary of ours
    it kept) encrypted for the client `tenant` into one compaction item at the first one's place.

    None if the compaction wrote no messages."""
    if not isinstance(compacted, list):
        return None
    theirs = {orjson.dumps(item) for item in original}
    written = [
        i
        for i, item in enumerate(compacted)
        if isinstance(item, dict)
        and item.get("type") == "message"
        and item.get("role") == "user"
        and orjson.dumps(item) not in theirs
    ]
    if not written:
        return None
    text = "\n\n".join(text_of_parts(compacted[i].get("content")) for i in written)
    item = {"type": "compaction", "id": f"cmp_{uuid.uuid4().hex}", "encrypted_content": key.seal(text, tenant=tenant)}
    folded = set(written)
    return [
        item if i == written[0] else other for i, other in enumerate(compacted) if i == written[0] or i not in folded
    ]


def compaction_answer(output: list[Any], *, prompt_tokens: int) -> bytes:
    """The answer to `POST /v1/responses/compact`, in OpenAI's shape: the items to send instead of the history."""
    answer = {
        "id": f"resp_compact_{uuid.uuid4().hex}",
        "object": "response.compaction",
        "created_at": int(time.time()),
        "output": output,
        "usage": {"input_tokens": prompt_tokens, "output_tokens": 0, "total_tokens": prompt_tokens},
    }
    return orjson.dumps(answer)
