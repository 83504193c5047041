"""The seam between a wire format and the core: what every format module provides.

A wire format is the shape one API gives a conversation: Chat Completions' messages, the Responses
API's `input` items, Anthropic Messages' content blocks, the Gemini API's `contents` of parts. The
core (counting, compaction, policy, records, background summaries, archive, metrics) works with one
shape only, Chat Completions' messages, and never asks which format it is serving. A format module
provides one `WireFormat`: its `spec`, which is data the app is built from, and methods that translate
in both directions.

The spec (`FormatSpec`) holds:
- `name`: used in the config's `upstreams.<name>`, the log and the metrics;
- `routes`: its conversation endpoints (path patterns, possibly with a parameter such as the model,
  and whether the path alone means the answer streams);
- `forwarded`: the rest of its API, forwarded unchanged;
- `credentials`: the headers its clients send their key in (the first is how its upstream expects
  the proxy's own key);
- `client_header`: a header only its clients send;
- `errors`: its error shape (a body, and the event that carries one in a stream);
- its session header;
- `usage_marker`: bytes every stream event that reports usage contains;
- `in_place_summaries`: whether a summary may be asked as a continuation of the body;
- `exact_count`: the upstream's exact prompt count, where it offers one;
- `model_list`: whether its upstream lists its models' windows at `GET /v1/models`.
The app's routes, the credentials the upstream replaces, a path's error shape and the metrics' route
labels all come from the registered formats' specs (`inflight.formats.registered`).

Reading (`read`) turns the request body and what its path says (`Target`: the route and its
parameters) into a `CoreRequest`:
- `view`: a Chat Completions-shaped mapping, which the core counts and compacts. It holds `messages`
  in order (instructions and the head first, as in the body; tool calls as assistant `tool_calls`,
  each answered by a `tool` message with its `tool_call_id`), and the fields that count toward the
  tool definitions' cost (`tools`, `tool_choice`, `response_format`, ...). A format whose instructions
  live outside its messages (`instructions`, a top-level `system`) puts them first as a `system`
  message, so they are counted and kept like any other.
- `observations`: user messages that are not requests (text sent alongside a turn's tool results),
  which the core must not mistake for the latest request.
- `opaque`: the indices of messages the core must never edit: encrypted reasoning items, signed
  thinking blocks, compaction items. They are kept byte for byte or dropped together with the turn
  they belong to (the assistant output they precede), never rewritten, masked or reordered.
- `output_limit`: the reply's reserve the client asked for (`max_tokens`, `max_output_tokens`);
  `output_limit_binding` is False when the upstream does not require room for it (Claude Code asks
  for 128k from any model).
- `session`: a conversation id carried in the body (`prompt_cache_key`, `metadata.user_id`), else
  None. The client's `x-inflight-session` takes precedence; the spec's `session_header` goes before
  or after the body's id (`session_header_first`).
- `compactable`: False when part of the conversation is not in the body (the Responses API's
  `previous_response_id`); such a request is counted but never rewritten.
- `origins`: the format's own map from each message back to the part of the body it came from, for
  `write`.
- `expanded`: messages the format made from content only inflight can read (its own compaction
  items); such a body is always rewritten. `unopened`: how many of those could not be read (sealed
  with another key), so a note stands in their place.
- `compact_at`: the threshold for server-side compaction the client asks of the upstream (the
  Responses API's `context_management`). `server_edits`: the client asks the upstream to edit its
  context (Anthropic's `context_management.edits`). If the upstream supports neither, inflight does
  the work instead: `take_over` does what the upstream would have done (the format's own edits),
  removes the field, and returns the report the upstream would have given, which `reported_body` and
  `reported_event` put into the answer. `rejects_server_compaction` recognises an upstream that
  refuses the field.
- `read` returns None when the body is not a conversation this format can count; it is then
  forwarded unchanged.

Writing (`write`) puts the compacted message list back into the client's body. Only what compaction
changed is rewritten. Every other field is kept as the client sent it; a message the core did not
touch is written back as the format's original item (re-serialized, but equal in value, with every
string, encrypted content and signature unchanged); a new message (the summary, a masked or truncated
tool result) is written in the format's own shape. The core always keeps a tool call together with
its result, so `write` need not. When nothing was compacted `write` is not called, and the client's
exact bytes go upstream.

Summaries: when the upstream's own model summarizes a conversation, it is asked in the request's own
format (Codex's models answer only through the Responses API). `summary_request` builds a
non-streaming `UpstreamCall` (its path, which may name the model, its body and the headers it needs)
from the summarizer's messages (the prompt first, as a `system` message); `summary_reply` reads the
text and whether it was cut off at the token limit.

Answers: `refusal` recognises "the prompt is too long" in an error body, and `stream_refusal` in a
stream's first meaningful event (`stream_pending` marks events to skip, since the Responses API
announces a response before it fails it). Both extract the window and the upstream's own count when
the text gives them. `prompt_tokens` and `output_tokens` find the upstream's counts in a JSON body or
a stream event.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import field
from typing import Any, Protocol

import orjson

from inflight.frozen import frozen
from inflight.policy.refusals import Refusal, messages_of, parse

Message = dict[str, Any]


@frozen
class TakenOver:
    """The result of inflight doing a body's requested context management itself: the body to continue with,
    and the report the upstream would have given (None: nothing to report)."""

    payload: dict[str, Any]
    report: dict[str, Any] | None = None
    edited: bool = False  # the conversation changed (not only the field removed), so it must be counted again


@frozen(slots=True)
class CoreRequest:
    """A request body in the core's format-neutral form (see the module docstring)."""

    model: str
    view: dict[str, Any]  # Chat Completions-shaped: `messages` and the tool fields
    output_limit: int | None = None
    # False: the upstream does not refuse a prompt that leaves less room than `output_limit` (Anthropic's
    # models just stop at the window), so the budget reserves at most the configured reserve (<= window/4).
    output_limit_binding: bool = True
    session: str | None = None
    opaque: frozenset[int] = field(default_factory=frozenset)
    compactable: bool = True  # False: part of the conversation lives upstream (`previous_response_id`)
    # The format's own map from each message back to the part of the body it came from (the Responses API:
    # item indices).
    origins: list[tuple[int, ...] | None] = field(default_factory=list)
    # Messages the format made from something the upstream cannot read (inflight's own compaction items).
    # They go upstream as new messages, so the body is rewritten even when nothing is compacted.
    expanded: frozenset[int] = field(default_factory=frozenset)
    unopened: int = 0  # of those, how many could not be opened (another key): a note went in their place
    # The client asks the upstream to compact past this many tokens (the Responses API's
    # `context_management`); None: it does not.
    compact_at: int | None = None
    server_edits: bool = False  # the client asks the upstream to edit its context (Anthropic's `context_management`)
    # User messages that are not requests: text sent alongside a turn's tool results (Claude Code's
    # `<system-reminder>`s). The latest request is searched for among the messages before them.
    observations: frozenset[int] = field(default_factory=frozenset)
    # Whether the answer streams, when the path says so (Gemini's `:streamGenerateContent`); None: the body's
    # `stream` says.
    streams: bool | None = None

    @property
    def server_managed(self) -> bool:
        """Whether the client asks the upstream to manage its context (compact it or edit it)."""
        return self.compact_at is not None or self.server_edits

    @property
    def messages(self) -> list[Message]:
        messages: list[Message] = self.view["messages"]
        return messages


@frozen
class Route:
    """A path a format accepts conversations on, in starlette's syntax (`{model}` is a path parameter, as in
    `/v1beta/models/{model}:generateContent`).

    `stream` says whether the path alone means the answer streams (Gemini's `:streamGenerateContent`);
    None means the body decides, as with `stream: true`."""

    path: str
    stream: bool | None = None


@frozen(slots=True)
class Target:
    """What a request's path says, for `read`: the route it matched and that route's path parameters."""

    route: Route | None = None
    params: Mapping[str, str] = field(default_factory=dict)

    @property
    def stream(self) -> bool | None:
        return self.route.stream if self.route is not None else None


UNROUTED = Target()  # a body read outside any HTTP request (the CLI, the benchmarks): only the body counts


@frozen
class UpstreamCall:
    """A request the proxy makes to the upstream on its own behalf (a summary, an exact count): its path, its
    JSON body, and the headers it needs besides the credentials."""

    path: str
    body: dict[str, Any]
    headers: tuple[tuple[bytes, bytes], ...] = ()


class ErrorShape(Protocol):
    """How a format's clients read an error: a JSON body, and the event that carries one in a stream."""

    def body(self, message: str, *, error_type: str, param: str | None, code: str | None) -> bytes:
        """One of the proxy's own errors, in this shape."""
        ...

    def event(self, body: bytes) -> bytes:
        """An error body (in this shape) as the SSE event its clients raise an error on, once a stream has begun."""
        ...


class ExactCount(Protocol):
    """An upstream's exact count of a prompt (Anthropic's `count_tokens`, Gemini's `countTokens`)."""

    def request(self, payload: dict[str, Any], *, model: str) -> UpstreamCall:
        """The call that counts a request's prompt for `model` (Gemini's path names it), without the fields only
        generation accepts."""
        ...

    def tokens(self, document: object) -> int | None:
        """The prompt's tokens in the call's answer (None: not present)."""
        ...


@frozen
class FormatSpec:
    """A format described as data: where it is served, which headers carry its clients' keys, how its errors
    look, and the few facts the pipeline needs.

    The app's routes, the credentials the upstream replaces, a path's error shape and the metrics' route
    labels are all derived from these."""

    name: str  # e.g. "chat_completions": `upstreams.<name>`, `pricing.formats`, the log line, the metrics
    routes: tuple[Route, ...]  # its conversation endpoints (POST): counted, and compacted when needed
    errors: ErrorShape
    # Headers that carry a client's key. The first is how the upstream expects the proxy's own key
    # (`authorization` as `Bearer <key>`; any other header holds the key alone, as `x-api-key` and
    # `x-goog-api-key` do).
    credentials: tuple[bytes, ...] = (b"authorization",)
    # A query parameter its clients may send their key in instead (Gemini's `?key=`): taken as the first header.
    query_key: bytes | None = None
    forwarded: tuple[str, ...] = ()  # the rest of its API (route patterns), forwarded unchanged
    # A header only its clients send (`anthropic-version`): a request with it, on a path forwarded for another
    # format, goes to this format's upstream.
    client_header: str | None = None
    session_header: str | None = None  # a request header that names the conversation (None: the format has none)
    session_header_first: bool = False  # that header takes precedence over the body's session (else the reverse)
    usage_marker: bytes = b'"usage"'  # a stream event without these bytes carries no usage and is not parsed
    in_place_summaries: bool = False  # a summary may be asked as a Chat Completions continuation of this body
    exact_count: ExactCount | None = None  # how the upstream counts a prompt exactly (None: it cannot)
    # Its upstream lists its models' windows at `GET /v1/models` (Gemini's list is elsewhere, in its own shape, so
    # a Gemini request never starts the discovery).
    model_list: bool = True


class WireFormat(Protocol):
    spec: FormatSpec

    def read(self, payload: dict[str, Any], target: Target = UNROUTED, *, tenant: str = "") -> CoreRequest | None:
        """The body (and what its path says) as the core's conversation, or None if this format cannot count it.

        `tenant` is the client's (`Options.tenant`); inflight's own compaction items are encrypted for it."""
        ...

    def write(self, payload: dict[str, Any], request: CoreRequest, messages: list[Message]) -> bytes:
        """The body to send upstream with `messages` (the compacted view) in place of the conversation."""
        ...

    def refusal(self, status: int, body: bytes, *, content_encoding: bytes | None) -> Refusal | None:
        """A context-length refusal in an error response's body (None: some other answer)."""
        ...

    def stream_pending(self, event: bytes) -> bool:
        """Whether the event does not yet show acceptance or refusal, so the next event must be read too."""
        ...

    def stream_refusal(self, event: bytes) -> Refusal | None:
        """A context-length refusal in a stream's first event (None: the stream is proceeding normally)."""
        ...

    def prompt_tokens(self, document: object) -> int | None:
        """The upstream's count of the prompt in a parsed JSON body or stream event (None: not present)."""
        ...

    def output_tokens(self, document: object) -> int | None:
        """The upstream's count of the reply in a parsed JSON body or stream event (None: not present)."""
        ...

    def take_over(self, payload: dict[str, Any], *, prompt_tokens: int, count: Callable[[str], int]) -> TakenOver:
        """Do here the context management the body asks of the upstream, and remove that field from the body.

        `prompt_tokens` is the prompt's size in the upstream's units; `count` measures a text in those units."""
        ...

    def reported_body(self, body: bytes, report: dict[str, Any]) -> bytes:
        """A complete JSON answer with the report of the context management inflight did added."""
        ...

    def reported_event(self, event: bytes, report: dict[str, Any]) -> bytes:
        """One stream event, with the report added where the upstream would have put it (other events unchanged)."""
        ...

    def rejects_server_compaction(self, status: int, body: bytes) -> bool:
        """Whether the upstream refused the request's server-side compaction field as unknown."""
        ...

    def summary_request(
        self, messages: list[Message], *, model: str, max_tokens: int, tools: object = None
    ) -> UpstreamCall:
        """A non-streaming request for `model`'s reply to `messages` (`tools` are offered but not to be called)."""
        ...

    def summary_reply(self, document: object) -> tuple[str, str | None]:
        """The reply's text ("" if none) and its finish reason (`length`: cut off at the token limit)."""
        ...


def openai_error(message: str, *, error_type: str, param: str | None = None, code: str | None = None) -> bytes:
    """OpenAI's error shape, which the Responses API and every OpenAI-compatible server share."""
    return orjson.dumps({"error": {"message": message, "type": error_type, "param": param, "code": code}})


# How servers say a request's top-level field is unknown, each the whole of an error message; `field` must then be
# the field itself, not a key inside it ("context_management.edits.0.x: Extra inputs are not permitted" is the
# client's mistake, not the upstream lacking the feature).
UNKNOWN_FIELD_WORDINGS = tuple(
    re.compile(pattern, re.IGNORECASE)
    for pattern in (
        # vLLM: "Unrecognized request argument supplied: context_management" (several: comma-separated)
        r"\s*Unrecognized request arguments? supplied: (?P<fields>[\w\-]+(?:, ?[\w\-]+)*)\.?\s*",
        # OpenAI: "Unknown parameter: 'context_management'."
        r"\s*Unknown parameter: '(?P<fields>[\w\-]+)'\.?\s*",
        # Anthropic, pydantic gateways: "context_management: Extra inputs are not permitted"
        r"\s*(?:body\.)?(?P<fields>[\w\-]+): Extra (?:inputs|fields) (?:are )?not permitted\.?\s*",
        r"\s*(?:Unknown|Unexpected|Unsupported|Unrecognized) (?:field|parameter|argument|key|property): "
        r"[`'\"]?(?P<fields>[\w\-]+)[`'\"]?\.?\s*",
    )
)
# Anthropic, for a beta it does not know: "Unexpected value(s) `context-management-2025-06-27` for the
# `anthropic-beta` header. ..."
UNKNOWN_BETA = re.compile(
    r"\s*Unexpected value\(s\) `(?P<fields>[\w\-]+)` for the `anthropic-beta` header\..*", re.DOTALL
)
MAX_ERROR_SCAN = 64 * 1024


def usage_count(document: object, key: str, *, envelope: str | None = None) -> int | None:
    """A count from the `usage` of a parsed body or stream event (None: not present).

    `envelope` is the key under which a stream event wraps the body (the Responses API's `response`,
    Anthropic's `message`)."""
    if envelope is not None and isinstance(document, dict) and isinstance(document.get(envelope), dict):
        document = document[envelope]
    usage = document.get("usage") if isinstance(document, dict) else None
    tokens = usage.get(key) if isinstance(usage, dict) else None
    return tokens if isinstance(tokens, int) and not isinstance(tokens, bool) else None


def refuses_field(status: int, body: bytes, field: str, *, beta: str | None = None) -> bool:
    """Whether an error says the upstream does not know the request's top-level `field`, or the `beta` (a prefix of
    the beta's name, which ends in its date) that enables it.

    Examples: vLLM's "Unrecognized request argument supplied: context_management", or a pydantic gateway's
    (422) "context_management: Extra inputs are not permitted", each the whole message. A refused value of the
    field, or an unknown key inside it, does not count: that is the client's mistake."""
    if status not in (400, 422) or len(body) > MAX_ERROR_SCAN:
        return False
    document = parse(body, None)
    for message in messages_of(document):
        for wording in UNKNOWN_FIELD_WORDINGS:
            found = wording.fullmatch(message)
            if found and field in re.split(r", ?", found["fields"]):
                return True
        unknown_beta = UNKNOWN_BETA.fullmatch(message)
        if (
            beta is not None
            and unknown_beta
            and re.fullmatch(rf"{re.escape(beta)}\d{{4}}-\d{{2}}-\d{{2}}", unknown_beta["fields"])
        ):
            return True
    return any(_extra_field(entry, field) for entry in _details(document))


def _details(document: Any) -> list[Any]:
    """A pydantic validation error's entries (FastAPI's 422 `{"detail": [...]}`), else none."""
    details = document.get("detail") if isinstance(document, dict) else None
    return details if isinstance(details, list) else []


def _extra_field(entry: Any, field: str) -> bool:
    """Whether a pydantic error entry says the body's own `field` is not allowed."""
    if not isinstance(entry, dict) or entry.get("type") != "extra_forbidden":
        return False
    return entry.get("loc") in (["body", field], [field])


def text_of_parts(parts: object) -> str:
    """The text of a content: a string, or the `text` of its parts (blocks) joined by newlines."""
    if isinstance(parts, str):
        return parts
    if not isinstance(parts, list):
        return ""
    return "\n".join(p["text"] for p in parts if isinstance(p, dict) and isinstance(p.get("text"), str))


def data_event(body: bytes) -> bytes:
    """An error body as the SSE event OpenAI's clients raise an error on (`data: {"error": ...}`)."""
    return b"data: " + body.strip().replace(b"\n", b"") + b"\n\n"


class OpenAIErrors:
    """OpenAI's error shape, shared by the Responses API and every OpenAI-compatible server; in a stream it is
    a plain `data:` event."""

    def body(self, message: str, *, error_type: str, param: str | None, code: str | None) -> bytes:
        return openai_error(message, error_type=error_type, param=param, code=code)

    def event(self, body: bytes) -> bytes:
        return data_event(body)


OPENAI_ERRORS = OpenAIErrors()


class OpenAIShape:
    """Behaviour the OpenAI formats (Chat Completions, the Responses API) share: inflight adds no report to
    their answers, because the upstream reports its own context management.

    A format in that family inherits these and implements only what differs."""

    def reported_body(self, body: bytes, report: dict[str, Any]) -> bytes:
        return body

    def reported_event(self, event: bytes, report: dict[str, Any]) -> bytes:
        return event


def event_name(event: bytes) -> str | None:
    """An SSE event's name (its `event:` line; None if it has none)."""
    for line in event.splitlines():
        if line.startswith(b"event:"):
            return line[6:].strip().decode("utf-8", "replace")
    return None


def is_comment(event: bytes) -> bool:
    """Whether an SSE event holds only comment lines (`: OPENROUTER PROCESSING`, keep-alives), which carry nothing."""
    return all(line.startswith(b":") for line in event.splitlines() if line.strip())


def replaced_origin(request: CoreRequest, message: Message, start: int) -> tuple[tuple[int, int], int] | None:
    """Where in the client's body a masked or truncated tool message came from (its entry and part: a
    `tool_result` block, a `functionResponse` part), and the position after it in the core's messages.

    It is the first tool message at or after `start` that answers the same call."""
    if message.get("role") != "tool":
        return None
    for position in range(start, len(request.messages)):
        original, origin = request.messages[position], request.origins[position]
        if original.get("role") == "tool" and original.get("tool_call_id") == message.get("tool_call_id") and origin:
            return (origin[0], origin[1]), position + 1
    return None
