"""Our messages and items as the official client's parameter types: the SDK types them, our fixtures are dicts."""

from __future__ import annotations

from typing import Any, cast

from openai.types.chat import ChatCompletionMessageParam
from openai.types.responses import ResponseInputParam


def as_params(messages: list[dict[str, Any]]) -> list[ChatCompletionMessageParam]:
    return cast("list[ChatCompletionMessageParam]", messages)


def as_input(items: list[dict[str, Any]]) -> ResponseInputParam:
    return cast("ResponseInputParam", items)
