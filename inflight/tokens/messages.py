"""Count one message's tokens by OpenAI's billing formula (the per-message part of `inflight.tokens`).

    message  = 3                                  per-message framing
             + enc(role) + content
             + enc(name) + 1                      when `name` is set
             + enc(tool_call_id)                  tool results
             + sum(enc(fn.name) + enc(fn.arguments) + 3)   each assistant tool call
             + enc(function_call.name) + enc(function_call.arguments) + 3   legacy call
             + enc(refusal) and enc(any other string field, e.g. reasoning_content)
    content  = enc(str) | sum(part): text/refusal -> enc(text); image_url, input_audio, file ->
               inflight.tokens.media's formulas; an unknown part -> enc(its JSON)

`enc` is `encode_ordinary`: user text may legitimately contain `<|endoftext|>`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson
import tiktoken

from inflight.tokens import media
from inflight.tokens.text import text_tokens

TOKENS_PER_MESSAGE = 3
TOKENS_PER_NAME = 1
TOKENS_PER_CALL = 3
# How a string is counted: exactly (`text_tokens`), or from samples for text that will be dropped.
TextCount = Callable[[tiktoken.Encoding, str], int]


def message_tokens(message: Any, enc: tiktoken.Encoding, text: TextCount = text_tokens) -> int:
    if not isinstance(message, dict):
        return text(enc, orjson.dumps(message).decode())
    tokens = TOKENS_PER_MESSAGE
    for key, value in message.items():
        if key == "content":
            tokens += content_tokens(value, enc, text)
        elif key == "name" and isinstance(value, str):
            tokens += text(enc, value) + TOKENS_PER_NAME
        elif key == "tool_calls" and isinstance(value, list):
            tokens += sum(_call_tokens(call.get("function"), enc, text) for call in value if isinstance(call, dict))
        elif key == "function_call":
            tokens += _call_tokens(value, enc, text)
        elif isinstance(value, str):  # role, tool_call_id, refusal, reasoning_content, ...
            tokens += text(enc, value)
    return tokens


def content_tokens(content: Any, enc: tiktoken.Encoding, text: TextCount = text_tokens) -> int:
    if content is None:
        return 0
    if isinstance(content, str):
        return text(enc, content)
    if isinstance(content, list):
        return sum(part_tokens(part, enc, text) for part in content)
    return text(enc, orjson.dumps(content).decode())


def part_tokens(part: Any, enc: tiktoken.Encoding, text: TextCount = text_tokens) -> int:
    if not isinstance(part, dict):
        return text(enc, part if isinstance(part, str) else orjson.dumps(part).decode())
    kind = part.get("type")
    if kind in ("text", "input_text", "output_text") and isinstance(part.get("text"), str):
        return text(enc, part["text"])
    if kind == "refusal" and isinstance(part.get("refusal"), str):
        return text(enc, part["refusal"])
    if kind == "image_url" and isinstance(part.get("image_url"), dict):
        image = part["image_url"]
        url = image.get("url")
        return media.image_tokens(url if isinstance(url, str) else "", image.get("detail"))
    if kind == "input_audio" and isinstance(part.get("input_audio"), dict):
        audio = part["input_audio"]
        data = audio.get("data")
        return media.audio_tokens(data if isinstance(data, str) else "", audio.get("format"))
    if kind == "file" and isinstance(part.get("file"), dict):
        return media.file_tokens(part["file"])
    return text(enc, orjson.dumps(part).decode())


def _call_tokens(function: Any, enc: tiktoken.Encoding, text: TextCount) -> int:
    if not isinstance(function, dict):
        return 0
    tokens = TOKENS_PER_CALL
    for field in ("name", "arguments"):
        value = function.get(field)
        if isinstance(value, str):
            tokens += text(enc, value)
    return tokens
