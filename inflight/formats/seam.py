"""The seam between a wire format and the core: what every format module provides.

A wire format is the shape one API gives a conversation: Chat Completions' messages, the Responses
API's `input` items, Anthropic Messages' content blocks. The core (counting, compaction, policy,
records, background summaries, archive, metrics) speaks one shape only, Chat Completions'
messages, and never asks which format it is serving. A format module is one `WireFormat`: its
`spec`, data the app is built from, and the methods that translate, both ways.

The spec (`FormatSpec`): its `name` (the config's `upstreams.<name>`, the log, the metrics), its
conversation `routes` (path patterns, a path parameter such as a model included, and whether the
path alone says the answer streams), the rest of its API to forward (`forwarded`), the headers its
clients send their key in (`credentials`; the first is how its upstream takes the proxy's own),
a header only its clients send (`client_header`), its error shape (`errors`: a body, and the event
that carries one in a stream), its session header, the bytes a stream event with usage contains
(`usage_marker`), whether a summary may continue the body in place (`in_place_summaries`), and
the upstream's exact count of a prompt where it has one (`exact_count`). The app's routes, the
credentials the upstream replaces, a path's error shape and the metrics' route labels all come
from the registered formats' specs (`inflight.formats.registered`).

Reading (`read`): the request body, and what its path says (`Target`: the route and its
parameters), become a `CoreRequest`:
- `view`: a Chat Completions-shaped mapping, what the core counts and compacts: `messages` in
  order (system/developer instructions and the head first, as the body has them; tool calls as
  assistant `tool_calls`, each answered by a `tool` message with its `tool_call_id`), and the
  fields the tool definitions cost (`tools`, `tool_choice`, `response_format`, ...). A format
  whose instructions sit outside its messages (`instructions`, a top-level `system`) puts them
  first as a `system` message, so they are counted and pinned like any other.
- `observations`: user messages that are no request (text beside a turn's tool results), which
  the core must not take for the latest request.
- `opaque`: the indices of messages the core must never edit: encrypted reasoning items, signed
  thinking blocks, compaction items. They are kept byte for byte or dropped whole with the turn
  they belong to (the assistant output they precede), never rewritten, masked or reordered.
- `output_limit`: the reply's reserve the client asked for (`max_tokens`, `max_output_tokens`);
  `output_limit_binding` False when the upstream need not fit it (Claude Code asks 128k of any model).
- `session`: a conversation id the body carries (`prompt_cache_key`, `metadata.user_id`), else None;
  the client's `x-inflight-session` comes first, the spec's `session_header` before or after the
  body's (`session_header_first`).
- `compactable`: False when part of the conversation is not in the body (the Responses API's
  `previous_response_id`): the request is counted, never rewritten.
- `origins`: the format's own map from each message back to what it came from, for `write`.
- `expanded`: messages the format made of what only inflight can read (its own compaction items):
  such a body is always rewritten.
- `compact_at`: the threshold of server-side compaction the client asks of the upstream (the
  Responses API's `context_management`); `server_edits`: the client asks the upstream to edit its
  context (Anthropic's `context_management.edits`). When the upstream lacks either, inflight takes
  it over: `take_over` does what the upstream would have done (a format's own edits) and removes
  the request, with the report the upstream would have given, which `reported_body` and
  `reported_event` put in the answer; `rejects_server_compaction` recognises an upstream that
  refuses the field.
- None when the body is not a conversation this format can count: it is forwarded as sent.

Writing (`write`): the compacted message list back into the client's body. Only what compaction
changed is rewritten: every other field of the body is kept as the client sent it, a message the
core did not touch goes back as the format's own original item (re-serialized, equal in value:
every string, encrypted content and signatures included, unchanged), and a new message (the
summary, a masked or truncated tool result) is written in the format's own shape. The core keeps
every tool call with its result (a cut never separates them), so `write` never has to. When
nothing was compacted `write` is never called: the client's exact bytes go upstream.

Summaries: when the upstream's own model summarizes a conversation, it is asked in the format the
request came in (Codex's models answer only through the Responses API): `summary_request` builds a
non-streaming `UpstreamCall` (its path, which may name the model, its body and the headers it
needs) from the summarizer's messages (the prompt first, as a `system` message), `summary_reply`
reads the text and whether it was cut at the token limit.

Answers: `refusal` and `stream_refusal` recognise "the prompt is too long" in an error body and
in a stream's first event that `stream_pending` does not pass over (the Responses API announces
a response before it fails it), with the window and the upstream's own count when the text names
them; `prompt_tokens` and `output_tokens` find the upstream's counts in a JSON body or one stream
event.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import orjson

from inflight.policy.refusals import Refusal

Message = dict[str, Any]


@dataclass(frozen=True)
class TakenOver:
    """A body whose request for context management inflight did itself: the body to go on with, and the
    report the upstream would have given (None: nothing to report)."""

    payload: dict[str, Any]
    report: dict[str, Any] | None = None
    edited: bool = False  # the conversation changed (not only the request removed): it is counted again


@dataclass(frozen=True)
class CoreRequest:
    """A request body as the core reads it (see the module docstring)."""

    model: str
    view: dict[str, Any]  # Chat Completions-shaped: `messages` and the tool fields
    output_limit: int | None = None
    # False: the upstream does not refuse a prompt that leaves less room than `output_limit` (Anthropic's
    # models stop at the window): the budget reserves at most the configured reserve (<= window/4).
    output_limit_binding: bool = True
    session: str | None = None
    opaque: frozenset[int] = field(default_factory=frozenset)
    compactable: bool = True  # False: part of the conversation lives upstream (`previous_response_id`)
    # The format's own map from each message back to what it came from (the Responses API: item indices).
    origins: list[tuple[int, ...] | None] = field(default_factory=list)
    # Messages the format made of something the upstream cannot read (inflight's own compaction items):
    # they go upstream as new messages, so the body is rewritten even when nothing is compacted.
    expanded: frozenset[int] = field(default_factory=frozenset)
    # The client asks the upstream to compact past this many tokens (the Responses API's
    # `context_management`); None: it does not.
    compact_at: int | None = None
    server_edits: bool = False  # the client asks the upstream to edit its context (Anthropic's `context_management`)
    # User messages that are no request: text a tool turn carries beside its results (Claude Code's
    # `<system-reminder>`s); the latest request is looked for before them.
    observations: frozenset[int] = field(default_factory=frozenset)

    @property
    def server_managed(self) -> bool:
        """The client asks the upstream to manage its context (compact it, or edit it)."""
        return self.compact_at is not None or self.server_edits

    @property
    def messages(self) -> list[Message]:
        messages: list[Message] = self.view["messages"]
        return messages


@dataclass(frozen=True)
class Route:
    """A path a format takes conversations on, in starlette's syntax (`{model}` a path parameter, as in
    `/v1beta/models/{model}:generateContent`), and whether the path alone says the answer streams (Gemini's
    `:streamGenerateContent`; None: the body says, as `stream: true`)."""

    path: str
    stream: bool | None = None


@dataclass(frozen=True)
class Target:
    """What a request's path says, for `read`: the route it came by and that route's path parameters."""

    route: Route | None = None
    params: Mapping[str, str] = field(default_factory=dict)

    @property
    def stream(self) -> bool | None:
        return self.route.stream if self.route is not None else None


UNROUTED = Target()  # a body read apart from any request (the CLI, the benchmarks): only the body speaks


@dataclass(frozen=True)
class UpstreamCall:
    """A request the proxy makes of the upstream on its own (a summary, an exact count): where it goes, its
    JSON body, and the headers it needs beside the credentials."""

    path: str
    body: dict[str, Any]
    headers: tuple[tuple[bytes, bytes], ...] = ()


class ErrorShape(Protocol):
    """How a format's clients read an error: a JSON body, and the event that carries one in a stream."""

    def body(self, message: str, *, error_type: str, param: str | None, code: str | None) -> bytes:
        """One of the proxy's own errors, in this shape."""
        ...

    def event(self, body: bytes) -> bytes:
        """An error body (this shape) as the SSE event its clients raise on, once a stream began."""
        ...


class ExactCount(Protocol):
    """An upstream's exact count of a prompt (Anthropic's `count_tokens`)."""

    def request(self, payload: dict[str, Any]) -> UpstreamCall:
        """The call that counts a request's prompt, without what only generation takes."""
        ...

    def tokens(self, document: object) -> int | None:
        """The prompt's tokens in the call's answer (None: not there)."""
        ...


@dataclass(frozen=True)
class FormatSpec:
    """What a format is, as data: where it is served, which headers carry its clients' keys, how its errors
    look, and the few facts the pipeline asks of it. The app's routes, the credentials the upstream replaces,
    the error shape of a path and the metrics' route labels are all derived from these."""

    name: str  # e.g. "chat_completions": `upstreams.<name>`, `pricing.formats`, the log line, the metrics
    routes: tuple[Route, ...]  # its conversation endpoints (POST): counted, compacted when needed
    errors: ErrorShape
    # Headers that carry a client's key; the first is how the upstream takes the proxy's own key
    # (`authorization` as `Bearer <key>`, any other the key alone, as `x-api-key` and `x-goog-api-key` do).
    credentials: tuple[bytes, ...] = (b"authorization",)
    forwarded: tuple[str, ...] = ()  # the rest of its API (route patterns): forwarded as it comes
    # A header only its clients send (`anthropic-version`): such a request on a path forwarded for another
    # format goes to this format's upstream.
    client_header: str | None = None
    session_header: str | None = None  # a request header that names the conversation (None: the format has none)
    session_header_first: bool = False  # that header names it before the body does (else after)
    usage_marker: bytes = b'"usage"'  # a stream event without these bytes carries no usage: not parsed
    in_place_summaries: bool = False  # a summary may be asked as a Chat Completions continuation of this body
    exact_count: ExactCount | None = None  # where the upstream counts a prompt exactly (None: nowhere)


class WireFormat(Protocol):
    spec: FormatSpec

    def read(self, payload: dict[str, Any], target: Target = UNROUTED, *, tenant: str = "") -> CoreRequest | None:
        """The body (and what its path says) as the core's conversation, or None when it is none this
        format can count. `tenant`: the client's (`Options.tenant`), which inflight's own compaction items
        are sealed for."""
        ...

    def write(self, payload: dict[str, Any], request: CoreRequest, messages: list[Message]) -> bytes:
        """The body to send upstream with `messages` (the compacted view) in place of the conversation."""
        ...

    def refusal(self, status: int, body: bytes, *, content_encoding: bytes | None) -> Refusal | None:
        """A context-length refusal in an error response's body (None: some other answer)."""
        ...

    def stream_pending(self, event: bytes) -> bool:
        """The event says nothing yet of acceptance or refusal: hold the stream for the next one."""
        ...

    def stream_refusal(self, event: bytes) -> Refusal | None:
        """A context-length refusal in a stream's first event (None: the stream is under way)."""
        ...

    def prompt_tokens(self, document: object) -> int | None:
        """The upstream's count of the prompt in a parsed JSON body or stream event (None: not there)."""
        ...

    def output_tokens(self, document: object) -> int | None:
        """The upstream's count of the reply in a parsed JSON body or stream event (None: not there)."""
        ...

    def take_over(self, payload: dict[str, Any], *, prompt_tokens: int, count: Callable[[str], int]) -> TakenOver:
        """The body with what it asks of the upstream's context management done here, the request removed
        (`prompt_tokens`: the prompt's size in the upstream's units; `count`: a text's, likewise)."""
        ...

    def reported_body(self, body: bytes, report: dict[str, Any]) -> bytes:
        """A whole JSON answer with the report of the context management done here."""
        ...

    def reported_event(self, event: bytes, report: dict[str, Any]) -> bytes:
        """One event of a stream, with the report where the upstream would have put it (else as it is)."""
        ...

    def rejects_server_compaction(self, status: int, body: bytes) -> bool:
        """The upstream refused the request for server-side compaction (an unknown field to it)."""
        ...

    def summary_request(
        self, messages: list[Message], *, model: str, max_tokens: int, tools: object = None
    ) -> UpstreamCall:
        """A non-streaming request for `model`'s reply to `messages` (`tools`: offered, none to be called)."""
        ...

    def summary_reply(self, document: object) -> tuple[str, str | None]:
        """The reply's text ("" when there is none) and how it ended (`length`: cut at the token limit)."""
        ...


def openai_error(message: str, *, error_type: str, param: str | None = None, code: str | None = None) -> bytes:
    """OpenAI's error shape, which the Responses API and every OpenAI-compatible server share."""
    return orjson.dumps({"error": {"message": message, "type": error_type, "param": param, "code": code}})


UNKNOWN_FIELD = re.compile(
    rb"unrecognized|unknown|extra (inputs|fields)|not permitted|unsupported|not supported|unexpected"
)
MAX_ERROR_SCAN = 64 * 1024


def usage_count(document: object, key: str, *, envelope: str | None = None) -> int | None:
    """A count in a parsed body's or stream event's `usage` (None: not there); `envelope` is the key a stream
    event wraps the body in (the Responses API's `response`, Anthropic's `message`)."""
    if envelope is not None and isinstance(document, dict) and isinstance(document.get(envelope), dict):
        document = document[envelope]
    usage = document.get("usage") if isinstance(document, dict) else None
    tokens = usage.get(key) if isinstance(usage, dict) else None
    return tokens if isinstance(tokens, int) and not isinstance(tokens, bool) else None


def refuses_field(status: int, body: bytes, names: tuple[bytes, ...]) -> bool:
    """An error that names one of `names` as a field (or beta) the upstream does not know: vLLM's
    "Unrecognized request argument supplied: context_management", a pydantic gateway's (422)
    "context_management: Extra inputs are not permitted". Not a value of it refused."""
    text = body[:MAX_ERROR_SCAN].lower()
    named = any(name in text for name in names)
    return status in (400, 422) and named and UNKNOWN_FIELD.search(text) is not None


def text_of_parts(parts: object) -> str:
    """The text of a content: a string, or the `text` of its parts (blocks) joined by newlines."""
    if isinstance(parts, str):
        return parts
    if not isinstance(parts, list):
        return ""
    return "\n".join(p["text"] for p in parts if isinstance(p, dict) and isinstance(p.get("text"), str))


def data_event(body: bytes) -> bytes:
    """An error body as the SSE event OpenAI's clients raise on (`data: {"error": ...}`)."""
    return b"data: " + body.strip().replace(b"\n", b"") + b"\n\n"


class OpenAIErrors:
    """OpenAI's error shape, which the Responses API and every OpenAI-compatible server share; in a stream
    a bare `data:` event."""

    def body(self, message: str, *, error_type: str, param: str | None, code: str | None) -> bytes:
        return openai_error(message, error_type=error_type, param=param, code=code)

    def event(self, body: bytes) -> bytes:
        return data_event(body)


OPENAI_ERRORS = OpenAIErrors()


class OpenAIShape:
    """What the OpenAI formats (Chat Completions, the Responses API) answer alike: nothing of inflight's to
    report in an answer (the upstream reports its own context management). A format of that family takes
    these and writes only what differs."""

    def reported_body(self, body: bytes, report: dict[str, Any]) -> bytes:
        return body

    def reported_event(self, event: bytes, report: dict[str, Any]) -> bytes:
        return event


def event_name(event: bytes) -> str | None:
    """An SSE event's name (its `event:` line; None: it has none)."""
    for line in event.splitlines():
        if line.startswith(b"event:"):
            return line[6:].strip().decode("utf-8", "replace")
    return None


def is_comment(event: bytes) -> bool:
    """An SSE event of comment lines only (`: OPENROUTER PROCESSING`, keep-alives): it says nothing."""
    return all(line.startswith(b":") for line in event.splitlines() if line.strip())
