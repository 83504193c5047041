"""inflight's own compaction items: sealed with AES-GCM for one client's tenant, refused when edited, foreign or old."""

from __future__ import annotations

import base64
import logging

import pytest
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from hypothesis import given
from hypothesis import strategies as st

from inflight.app import create_app
from inflight.config import load_settings
from inflight.formats.compaction_items import KEY_INFO, PREFIX, ItemKey, is_ours
from inflight.policy.tenants import tenant_of

KEY = ItemKey(b"one")
ALICE = tenant_of([(b"authorization", b"Bearer sk-alice")])
BOB = tenant_of([(b"authorization", b"Bearer sk-bob")])


@given(st.text(max_size=2000), st.sampled_from(["", ALICE, BOB]))
def test_what_is_sealed_opens_to_itself_for_its_tenant(text: str, tenant: str) -> None:
    token = KEY.seal(text, tenant=tenant)
    assert is_ours(token) and KEY.open(token, tenant=tenant) == text


def test_the_summary_cannot_be_read_off_the_item_and_no_two_seals_are_alike() -> None:
    text = "## Task\nFix the parser in src/parser.py"
    first, second = KEY.seal(text, tenant=ALICE), KEY.seal(text, tenant=ALICE)
    assert first != second  # a fresh nonce each time
    assert "parser" not in first and "Task" not in first


def test_an_item_opens_only_for_the_tenant_and_the_key_it_was_sealed_with() -> None:
    token = KEY.seal("the summary", tenant=ALICE)
    assert KEY.open(token, tenant=BOB) is None
    assert KEY.open(token, tenant="") is None  # nor for a client that presents no key
    assert KEY.open(KEY.seal("the summary", tenant=""), tenant=ALICE) is None
    assert ItemKey(b"two").open(token, tenant=ALICE) is None


def test_an_edited_or_malformed_item_does_not_open() -> None:
    token = KEY.seal("the summary", tenant=ALICE)
    raw = bytearray(base64.urlsafe_b64decode(token[len(PREFIX) :]))
    for i in range(len(raw)):  # any changed byte: the nonce, the ciphertext, the tag
        edited = bytearray(raw)
        edited[i] ^= 0x01
        assert KEY.open(PREFIX + base64.urlsafe_b64encode(bytes(edited)).decode(), tenant=ALICE) is None
    for bad in ("", PREFIX, PREFIX + "!!!", PREFIX + "AAAA", "opaque-from-openai", token[:-4]):
        assert KEY.open(bad, tenant=ALICE) is None
    assert not is_ours("gAAAAABn-openai-encrypted") and not is_ours(None)


def test_the_token_is_a_nonce_and_standard_aes_gcm_output_bound_to_the_tenant() -> None:
    """No cipher of our own: the token opens with `cryptography`'s AES-GCM directly, the tenant as associated data."""
    token = KEY.seal("the summary", tenant=ALICE)
    raw = base64.urlsafe_b64decode(token[len(PREFIX) :])
    nonce, sealed = raw[:12], raw[12:]
    assert len(sealed) == len(b"the summary") + 16  # the ciphertext, then a 16-byte tag
    key = HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=KEY_INFO).derive(b"one")
    assert AESGCM(key).decrypt(nonce, sealed, ALICE.encode()) == b"the summary"


def test_an_item_of_the_former_scheme_is_ours_but_never_opens() -> None:
    """Sealed by an earlier inflight: recognised (so it is not forwarded as if the upstream's), never opened."""
    old = "inflight1." + base64.urlsafe_b64encode(bytes(48)).decode()
    assert is_ours(old) and KEY.open(old, tenant="") is None


def test_the_note_on_a_process_only_key_is_logged_at_the_first_item_sealed_not_at_start(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="inflight")
    create_app(load_settings(None))  # no responses.item_key, no upstream.api_key: a key of this process only
    assert not [r for r in caplog.records if r.getMessage().startswith("[responses]")]
    key = ItemKey(b"three", first_use_note="[responses] sealed with a key of this process only")
    key.seal("a summary", tenant=ALICE)
    key.seal("another", tenant=ALICE)
    assert [r.getMessage() for r in caplog.records if r.getMessage().startswith("[responses]")] == [
        "[responses] sealed with a key of this process only"
    ]
