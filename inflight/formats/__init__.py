"""Wire formats: one module per API shape, each translating between its bytes and the core's conversation.

The contract every format keeps is `seam.WireFormat` (its docstring says it in full). Chat
Completions is `chat_completions`, the Responses API `responses`, Anthropic Messages `messages`.
Only the pipeline and the edge import this package; the core never does.
"""

from inflight.formats.chat_completions import CHAT_COMPLETIONS, ChatCompletions
from inflight.formats.messages import MESSAGES, Messages
from inflight.formats.responses import RESPONSES, Responses
from inflight.formats.seam import CoreRequest, Message, WireFormat
from inflight.formats.usage import UsageReader

__all__ = [
    "CHAT_COMPLETIONS",
    "MESSAGES",
    "RESPONSES",
    "ChatCompletions",
    "CoreRequest",
    "Message",
    "Messages",
    "Responses",
    "UsageReader",
    "WireFormat",
]
