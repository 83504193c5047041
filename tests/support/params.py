"""Our message lists as the official client's parameter types: the SDK types them, our fixtures are plain dicts."""

from __future__ import annotations

from typing import Any, cast

from openai.types.chat import ChatCompletionMessageParam


def as_params(messages: list[dict[str, Any]]) -> list[ChatCompletionMessageParam]:
    return cast("list[ChatCompletionMessageParam]", messages)
