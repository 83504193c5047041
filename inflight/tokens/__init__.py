"""Count prompt tokens offline, the way OpenAI bills them. No web stack is used here."""

from inflight.tokens.counter import THREAD_THRESHOLD_BYTES, RequestCount, TokenCounter, message_digest
from inflight.tokens.encodings import FALLBACK_ENCODING, EncodingChoice, choose_encoding, is_loaded, load_encoding

__all__ = [
    "FALLBACK_ENCODING",
    "THREAD_THRESHOLD_BYTES",
    "EncodingChoice",
    "RequestCount",
    "TokenCounter",
    "choose_encoding",
    "is_loaded",
    "load_encoding",
    "message_digest",
]
