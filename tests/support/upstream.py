"""The one fake OpenAI-compatible upstream, for tests and benchmarks: it records every byte both ways.

It is a raw ASGI app so that what it sends is exactly what it records. Tests steer it with the
`x-scenario` request header (which the proxy forwards like any other header) or by queueing
`Scripted` replies for the next chat completions. It can enforce a context window per model,
refusing like OpenAI does, and it answers the proxy's summarizer calls. The Responses API,
Anthropic's Messages API and the Gemini API have their own fakes (`responses.py`, `messages.py`,
`gemini.py`), each with its agent. `bill` has a line for every request those fakes answer and for
every summary answered (its prompt counted as the fake of its API counts, all uncached; the reply's text as output).

Benchmarks run it in its own process: `python -m tests.support.upstream --port N [--window M=T]`;
`GET /_upstream/stats` then tells them what it saw.
"""

from __future__ import annotations

import argparse
import asyncio
import fnmatch
import gzip
import json
import threading
import time
import zlib
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import orjson

from inflight.tokens import TokenCounter
from tests.support.billing import Bill
from tests.support.gemini import FakeGemini, model_of, sse_chunk, summary_reply
from tests.support.messages import FakeMessages, beta_names, error_body, message_object, text_of
from tests.support.responses import STEP_DONE, FakeResponses, assistant_message, response_object, sse_event
from tests.support.retriever import RetrievingModel, last_result
from tests.support.servers import read_body

Headers = list[tuple[bytes, bytes]]
SUMMARY_PROMPT_START = "You write the handoff note"  # how the proxy's summary prompt opens
FLOOD_EVENT_CHARS = 16 * 1024
FLOOD_CAP_BYTES = 64 * 1024 * 1024  # a flood without `x-flood-bytes` ends here (past every buffer on the way)


@dataclass
class Recorded:
    method: str
    path: str
    query: bytes
    headers: dict[str, str]
    raw_headers: Headers
    body: bytes
    sent: bytearray = field(default_factory=bytearray)
    status: int = 0
    disconnected: threading.Event = field(default_factory=threading.Event)
    raw_path: bytes = b""  # the path as it was on the request line
    flooded: int = 0  # the bytes of a `flood` sent (those alone are not kept in `sent`)

    def json(self) -> Any:
        encoding = self.headers.get("content-encoding")
        body = self.body
        if encoding == "gzip":
            body = gzip.decompress(body)
        elif encoding == "deflate":
            try:
                body = zlib.decompress(body)
            except zlib.error:
                body = zlib.decompress(body, wbits=-15)
        try:
            return orjson.loads(body)
        except orjson.JSONDecodeError:
            return json.loads(body)  # a lone surrogate escape: legal JSON that orjson refuses


CONVERSATIONS = frozenset({"/v1/chat/completions", "/v1/responses", "/v1/messages"})


def readable(record: Recorded) -> bool:
    """Whether the fake can read a request's body as a JSON object (and write it back, as its counts do)."""
    try:
        payload = record.json()
        orjson.dumps(payload)
    except (ValueError, TypeError, OSError, zlib.error, RecursionError):
        return False
    return isinstance(payload, dict)


@dataclass
class Scripted:
    """One canned reply: a status and a body, or SSE events (each a str or dict, sent as its own chunk)."""

    status: int = 200
    body: Any = None
    events: list[Any] | None = None
    content_type: str = "application/json"


def sse(data: Any) -> bytes:
    text = data if isinstance(data, str) else orjson.dumps(data).decode()
    return f"data: {text}\n\n".encode()


def completion(model: str, text: str = "Hello from upstream.", prompt_tokens: int = 11) -> dict[str, Any]:
    return {
        "id": "chatcmpl-test",
        "object": "chat.completion",
        "created": 1700000000,
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": text, "refusal": None},
                "logprobs": None,
                "finish_reason": "stop",
            }
        ],
        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": 5, "total_tokens": prompt_tokens + 5},
        "system_fingerprint": "fp_test",
    }


def stream_events(model: str, *, include_usage: bool, prompt_tokens: int, chunks: int = 8) -> list[Any]:
    base = {"id": "chatcmpl-stream", "object": "chat.completion.chunk", "created": 1700000000, "model": model}
    events: list[Any] = [{**base, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]}]
    events += [
        {**base, "choices": [{"index": 0, "delta": {"content": f"tok{i} "}, "finish_reason": None}]}
        for i in range(chunks)
    ]
    call = {"index": 0, "id": "call_abc", "type": "function", "function": {"name": "read_file", "arguments": ""}}
    events.append({**base, "choices": [{"index": 0, "delta": {"tool_calls": [call]}}]})
    for piece in ['{"pa', 'th": "src/', 'app.py"}']:
        delta = {"tool_calls": [{"index": 0, "function": {"arguments": piece}}]}
        events.append({**base, "choices": [{"index": 0, "delta": delta}]})
    events.append({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]})
    if include_usage:
        usage = {"prompt_tokens": prompt_tokens, "completion_tokens": chunks, "total_tokens": prompt_tokens + chunks}
        events.append({**base, "choices": [], "usage": usage})
    events.append("[DONE]")
    return events


def is_summarizer_call(payload: dict[str, Any]) -> bool:
    """The proxy's summary prompt opens its system message, or (asked in place) its last user message."""
    messages = payload.get("messages") or [{}]
    if not isinstance(messages, list) or not messages:
        return False
    ends = [m.get("content") for m in (messages[0], messages[-1]) if isinstance(m, dict)]
    return any(isinstance(text, str) and text.startswith(SUMMARY_PROMPT_START) for text in ends)


def is_messages_summarizer_call(payload: dict[str, Any]) -> bool:
    """The proxy's summary prompt opens the `system` (a string or text blocks), or (asked in place) the last message."""
    messages = payload.get("messages")
    last = (
        messages[-1].get("content")
        if isinstance(messages, list) and messages and isinstance(messages[-1], dict)
        else None
    )
    system = payload.get("system")
    texts = (
        [system] if isinstance(system, str) else [text_of([block]) for block in system or [] if isinstance(block, dict)]
    )
    return any(text.startswith(SUMMARY_PROMPT_START) for text in [*texts, text_of(last)])


def summary_body(model: str, text: str, finish_reason: str, api: str) -> bytes:
    """A summarizer's reply: a chat completion, a response (cut short: `incomplete`, as OpenAI says it), or a
    message (cut short: `stop_reason: max_tokens`, as Anthropic says it)."""
    if api == "gemini":
        return orjson.dumps(summary_reply(text, finish_reason))
    if api == "messages":
        usage = {
            "input_tokens": 100,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0,
            "output_tokens": 50,
        }
        reply = message_object("msg_summary", model, [{"type": "text", "text": text}], usage)
        reply["stop_reason"] = "max_tokens" if finish_reason == "length" else "end_turn"
        return orjson.dumps(reply)
    if api != "responses":
        reply = completion(model, text)
        reply["choices"][0]["finish_reason"] = finish_reason
        return orjson.dumps(reply)
    usage = {"input_tokens": 100, "output_tokens": 50, "total_tokens": 150}
    response = response_object("resp_summary", model, "completed", [assistant_message(text, 0)], usage)
    if finish_reason == "length":
        response |= {"status": "incomplete", "incomplete_details": {"reason": "max_output_tokens"}}
    return orjson.dumps(response)


JSON = "application/json"


def gemini_error(message: str) -> dict[str, Any]:
    return {"error": {"code": 400, "message": message, "status": "INVALID_ARGUMENT"}}


def context_refusal(window: int, tokens: int) -> dict[str, Any]:
    """OpenAI's answer to a prompt over the window, word for word."""
    message = (
        f"This model's maximum context length is {window} tokens. However, your messages resulted in "
        f"{tokens} tokens. Please reduce the length of the messages."
    )
    return {
        "error": {
            "message": message,
            "type": "invalid_request_error",
            "param": "messages",
            "code": "context_length_exceeded",
        }
    }


class UpstreamApp:
    def __init__(
        self,
        *,
        windows: dict[str, int] | None = None,
        record: bool = True,
        stream_chunks: int = 8,
        stream_interval: float = 0.0,
    ) -> None:
        """`windows`: context windows to enforce, by model or glob (counted with o200k_base); `record`: keep every
        request (a benchmark's long run would not); each stream has `stream_chunks` content events,
        `stream_interval` seconds apart."""
        self.windows = windows or {}
        self.record = record
        self.stream_chunks = stream_chunks
        self.stream_interval = stream_interval
        self.counter = TokenCounter()
        self.last_messages: list[Any] = []  # the last client chat's messages (not a summarizer call)
        self.summary_count = 0
        self.requests: list[Recorded] = []
        self.script: deque[Scripted] = deque()
        # What `usage.prompt_tokens` reports: a fixed number, or a factor of the request's JSON length, or what a
        # chat template that leaves the tools out counts: (overhead, per_token), `overhead` plus `per_token` times
        # the messages' own o200k count (llama.cpp's template for SmolLM2, a tokenizer longer than o200k).
        self.prompt_tokens: int | None = None
        self.prompt_tokens_factor: float | None = None
        self.prompt_tokens_template: tuple[int, float] | None = None
        # Summarizer calls (recognised by the proxy's summary prompt) are answered here, or fail.
        self.summaries: list[Recorded] = []
        self.summarizer_status = 200
        self.summarizer_delay = 0.0  # seconds before a summarizer call is answered (a hang, when long)
        self.summarizer_reply: tuple[str, str] | None = None  # (text, finish_reason) instead of a good summary
        # A summarizer call whose body holds one of these texts is answered only once the test sets its event:
        # a summary that is still being made for as long as a test needs, however slow the machine.
        self.summarizer_holds: dict[str, threading.Event] = {}
        self.bill = Bill()  # what the Responses and Messages APIs and the summaries would cost
        self.responses = FakeResponses(windows=self.windows, bill=self.bill)  # POST /v1/responses
        # POST /v1/messages and /v1/messages/count_tokens
        self.messages = FakeMessages(windows=self.windows, bill=self.bill)
        self.gemini = FakeGemini(windows=self.windows, bill=self.bill)  # POST /v1beta/models/{model}:...

        # A model that reads back what compaction took out (`inflight_retrieve`), in every format; None: off.
        self.retriever: RetrievingModel | None = None
        self.flood_read_backs = False  # a chat request ending with the tool's result is answered with a flood
        self.compact_reply: Any = None  # POST /v1/responses/compact, as OpenAI answers it (None: 404)
        # When each of the latest POSTs arrived (wall clock, at its headers), its size and whether it was a
        # summary: what a benchmark measures the proxy's own time by, from outside.
        self.arrivals: deque[dict[str, Any]] = deque(maxlen=1000)
        self.models_body: Any = {
            "object": "list",
            "data": [{"id": "gpt-4o-mini", "object": "model", "created": 1700000000, "owned_by": "test"}],
        }

    def chat_requests(self) -> list[Recorded]:
        """Chat completions the client's requests became (the proxy's summarizer calls are in `summaries`)."""
        return [r for r in self.requests if r.path.endswith("/chat/completions") and r not in self.summaries]

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                elif message["type"] == "lifespan.shutdown":
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        arrived = time.time()
        body = await read_body(receive)
        raw_headers: Headers = list(scope["headers"])
        record = Recorded(
            method=scope["method"],
            path=scope["path"],
            query=scope["query_string"],
            headers={k.decode().lower(): v.decode("latin-1") for k, v in raw_headers},
            raw_headers=raw_headers,
            body=bytes(body),
            raw_path=scope.get("raw_path") or b"",
        )
        if self.record:
            self.requests.append(record)
        if record.method == "POST":
            summary = SUMMARY_PROMPT_START.encode() in record.body
            tag = record.headers.get("x-bench-tag")  # a benchmark's name for the request it sent
            self.arrivals.append(
                {"at": arrived, "path": record.path, "bytes": len(record.body), "summary": summary, "tag": tag}
            )
        if record.method == "POST" and record.path in CONVERSATIONS and not readable(record):
            # As a real upstream answers a body it cannot parse (one the proxy forwarded unread).
            error = {"error": {"message": "could not parse the JSON body", "type": "invalid_request_error"}}
            await self.respond(record, send, 400, orjson.dumps(error), "application/json")
            return
        await self.route(record, receive, send)

    async def respond(self, record: Recorded, send: Any, status: int, body: bytes, content_type: str) -> None:
        record.status = status
        headers = [(b"content-type", content_type.encode()), (b"content-length", str(len(body)).encode())]
        headers.append((b"x-upstream-header", b"kept"))
        await send({"type": "http.response.start", "status": status, "headers": headers})
        record.sent += body
        await send({"type": "http.response.body", "body": body})

    async def stream(self, record: Recorded, send: Any, events: list[Any], *, delay: float = 0.0) -> None:
        record.status = 200
        headers = [(b"content-type", b"text/event-stream; charset=utf-8"), (b"cache-control", b"no-cache")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        for event in events:
            chunk = sse(event) if not isinstance(event, bytes) else event
            record.sent += chunk
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
            if delay:
                await asyncio.sleep(delay)
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    def usage_tokens(self, record: Recorded) -> int:
        if self.prompt_tokens is not None:
            return self.prompt_tokens
        if self.prompt_tokens_factor is not None:
            return int(len(record.body) * self.prompt_tokens_factor)
        if self.prompt_tokens_template is not None:
            overhead, per_token = self.prompt_tokens_template
            return overhead + round(per_token * self.message_tokens(record.json().get("messages", [])))
        return 11

    def message_tokens(self, messages: list[Any]) -> int:
        """The messages counted as the proxy counts them (o200k_base, its framing of 3 a message)."""
        encoding = self.counter.encoding("o200k_base")
        return sum(self.counter.count_message(message, encoding) for message in messages)

    async def route(self, record: Recorded, receive: Any, send: Any) -> None:
        scenario = record.headers.get("x-scenario", "")
        if scenario.startswith("status-"):
            status = int(scenario.split("-")[1])
            error = {"error": {"message": f"upstream says {status}", "type": "test_error", "param": None, "code": None}}
            await self.respond(record, send, status, orjson.dumps(error), "application/json")
            return
        if scenario == "slow":
            await asyncio.sleep(3)
        if scenario == "hang":
            # Two events, then nothing until the proxy closes the connection.
            await self.stream_until_disconnect(record, receive, send)
            return
        if scenario == "flood":
            await self.flood(record, receive, send)
            return
        fixed = self.fixed_answer(record)
        if fixed is not None:
            await self.respond(record, send, 200, orjson.dumps(fixed), "application/json")
            return
        if record.path == "/v1/chat/completions":
            await self.chat(record, receive, send)
            return
        if record.method == "POST" and await self.answer_api(record, receive, send):
            return
        await self.respond(
            record, send, 404, b'{"error": {"message": "no route", "type": "not_found"}}', "application/json"
        )

    async def answer_api(self, record: Recorded, receive: Any, send: Any) -> bool:
        """A POST to the Responses, Messages or Gemini API, answered (False: none of theirs)."""
        if record.path == "/v1/responses":
            await self.answer_responses(record, receive, send)
            return True
        if record.path == "/v1/messages":
            await self.answer_messages(record, receive, send)
            return True
        if (found := model_of(record.path)) is not None:
            await self.answer_gemini(record, receive, send, *found)
            return True
        if record.path == "/v1/messages/count_tokens":
            betas = beta_names(record.headers.get("anthropic-beta"))
            status, counted = self.messages.count_tokens(record.json(), betas)
            await self.respond(record, send, status, orjson.dumps(counted), "application/json")
            return True
        return False

    def fixed_answer(self, record: Recorded) -> Any:
        """The body of a route that answers the same whatever is sent (None: not one of them)."""
        if record.path == "/_upstream/stats":
            arrivals = list(self.arrivals)
            return {"summaries": self.summary_count, "last_messages": self.last_messages, "arrivals": arrivals}
        if record.path == "/v1/models" and record.method == "GET":
            return self.models_body
        if record.path == "/v1/embeddings":
            embedding = {"object": "embedding", "index": 0, "embedding": [0.1, -0.2, 0.3]}
            usage = {"prompt_tokens": 2, "total_tokens": 2}
            return {"object": "list", "data": [embedding], "model": "text-embedding-3-small", "usage": usage}
        if record.path == "/v1/echo":
            return {"method": record.method, "query": record.query.decode(), "length": len(record.body)}
        if record.path == "/v1/responses/compact":  # None (the default): 404, as vLLM answers it
            return self.compact_reply
        return None

    async def chat(self, record: Recorded, receive: Any, send: Any) -> None:
        payload = record.json()
        if is_summarizer_call(payload):
            await self.summary(record, receive, send, payload.get("model", "unknown"))
            return
        if self.flood_read_backs and payload.get("stream") and last_result("chat", payload) is not None:
            await self.flood(record, receive, send)
            return
        if await self.retrieving(record, send, "chat", payload):
            return
        if self.script:
            reply = self.script.popleft()
            if reply.events is not None:
                await self.stream(record, send, reply.events)
            else:
                body = reply.body if isinstance(reply.body, bytes) else orjson.dumps(reply.body)
                await self.respond(record, send, reply.status, body, reply.content_type)
            return
        model = payload.get("model", "unknown")
        self.last_messages = payload.get("messages") or []
        if await self.refused(record, send, payload):
            return
        if payload.get("stream"):
            include_usage = bool((payload.get("stream_options") or {}).get("include_usage"))
            delay = 0.02 if record.headers.get("x-scenario") == "paced" else self.stream_interval
            prompt_tokens = self.usage_tokens(record)
            events = stream_events(
                model, include_usage=include_usage, prompt_tokens=prompt_tokens, chunks=self.stream_chunks
            )
            await self.stream(record, send, events, delay=delay)
        else:
            body = orjson.dumps(completion(model, prompt_tokens=self.usage_tokens(record)))
            await self.respond(record, send, 200, body, "application/json")

    async def refused(self, record: Recorded, send: Any, payload: dict[str, Any]) -> bool:
        """Refuse a chat completion over its model's window, as OpenAI does (False: it fits, or has no window)."""
        model = str(payload.get("model", "unknown"))
        window = next((w for pattern, w in self.windows.items() if fnmatch.fnmatchcase(model, pattern)), None)
        if window is None:
            return False
        tokens = self.counter.count_request(payload, "o200k_base").total
        if tokens <= window:
            return False
        await self.respond(record, send, 400, orjson.dumps(context_refusal(window, tokens)), "application/json")
        return True

    async def answer_responses(self, record: Recorded, receive: Any, send: Any) -> None:
        payload = record.json()
        if str(payload.get("instructions") or "").startswith(SUMMARY_PROMPT_START):
            await self.summary(record, receive, send, str(payload.get("model")), api="responses")
            return
        if await self.retrieving(record, send, "responses", payload):
            return
        if await self.scripted(record, send):
            return
        status, answer, events = self.responses.answer(payload)
        if events is not None:
            await self.stream(record, send, [sse_event(event) for event in events], delay=self.stream_interval)
        else:
            await self.respond(record, send, status, orjson.dumps(answer), "application/json")

    async def answer_messages(self, record: Recorded, receive: Any, send: Any) -> None:
        payload = record.json()
        if is_messages_summarizer_call(payload):
            await self.summary(record, receive, send, str(payload.get("model")), api="messages")
            return
        if await self.retrieving(record, send, "messages", payload):
            return
        if await self.scripted(record, send):
            return
        status, answer, events = self.messages.answer(payload, beta_names(record.headers.get("anthropic-beta")))
        if events is not None:
            await self.stream(record, send, [sse_event(event) for event in events], delay=self.stream_interval)
        else:
            await self.respond(record, send, status, orjson.dumps(answer), "application/json")

    async def answer_gemini(self, record: Recorded, receive: Any, send: Any, model: str, method: str) -> None:
        """The Gemini API: a summarizer call (the proxy's prompt as the system instruction), a count, or the fake's
        answer, streamed for `streamGenerateContent`."""
        if not readable(record):
            await self.respond(record, send, 400, orjson.dumps(gemini_error("Invalid JSON payload received.")), JSON)
            return
        payload = record.json()
        if method == "countTokens":
            status, counted = self.gemini.count_tokens(payload)
            await self.respond(record, send, status, orjson.dumps(counted), JSON)
            return
        system = payload.get("systemInstruction")
        parts = system.get("parts") if isinstance(system, dict) else None
        first = parts[0].get("text") if isinstance(parts, list) and parts and isinstance(parts[0], dict) else None
        if isinstance(first, str) and first.startswith(SUMMARY_PROMPT_START):
            await self.summary(record, receive, send, model, api="gemini")
            return
        if await self.scripted(record, send):
            return
        if await self.retrieving(record, send, "gemini", payload, stream=method == "streamGenerateContent"):
            return
        status, answer, chunks = self.gemini.answer(model, payload, stream=method == "streamGenerateContent")
        if chunks is not None:
            await self.stream(record, send, [sse_chunk(chunk) for chunk in chunks], delay=self.stream_interval)
        else:
            await self.respond(record, send, status, orjson.dumps(answer), JSON)

    def gemini_requests(self) -> list[Recorded]:
        """The generate requests the client's became (the proxy's summarizer calls are in `summaries`)."""
        return [
            r
            for r in self.requests
            if r.method == "POST"
            and (model_of(r.path) or ("", ""))[1] in ("generateContent", "streamGenerateContent")
            and r not in self.summaries
        ]

    async def retrieving(
        self, record: Recorded, send: Any, api: str, payload: dict[str, Any], *, stream: bool | None = None
    ) -> bool:
        """The retrieving model's answer, when it is on (False: it is off)."""
        if self.retriever is None:
            return False
        if api == "chat" and await self.refused(record, send, payload):
            return True
        body, events = self.retriever.answer(api, payload, stream=stream)
        if events is not None:
            await self.stream(record, send, events)
        else:
            await self.respond(record, send, 200, body, "application/json")
        return True

    def cached_share(self) -> float:
        """The share of every prompt token the Messages API was sent that its cache served: the client's
        requests and the proxy's summaries alike (a summary's prompt is never cached here)."""
        summaries = sum(self.messages.count(r.json()) for r in self.summaries if r.path == "/v1/messages")
        return self.messages.cache_read_tokens / max(self.messages.prompt_tokens + summaries, 1)

    def messages_requests(self) -> list[Recorded]:
        """The `POST /v1/messages` the client's requests became (the proxy's summarizer calls are in `summaries`)."""
        return [r for r in self.requests if r.path == "/v1/messages" and r.method == "POST" and r not in self.summaries]

    async def scripted(self, record: Recorded, send: Any) -> bool:
        """The next scripted reply, in the named-event form of the Responses and Messages APIs (False: none)."""
        if not self.script:
            return False
        reply = self.script.popleft()
        if reply.events is not None:
            await self.stream(record, send, [e if isinstance(e, bytes) else sse_event(e) for e in reply.events])
        else:
            body = reply.body if isinstance(reply.body, bytes) else orjson.dumps(reply.body)
            await self.respond(record, send, reply.status, body, reply.content_type)
        return True

    def responses_requests(self) -> list[Recorded]:
        """The `POST /v1/responses` the client's requests became (the proxy's summarizer calls are in `summaries`)."""
        return [
            r for r in self.requests if r.path == "/v1/responses" and r.method == "POST" and r not in self.summaries
        ]

    async def summary(self, record: Recorded, receive: Any, send: Any, model: str, *, api: str = "chat") -> None:
        """A summarizer call, answered as a chat completion, or as a response (`api="responses"`) or a message
        (`api="messages"`)."""
        if self.record:
            self.summaries.append(record)
        self.summary_count += 1
        await self.held(record)
        if self.summarizer_delay:
            try:  # the body is read: the next message is the caller hanging up, if it gives up first
                await asyncio.wait_for(receive(), self.summarizer_delay)
                return
            except TimeoutError:
                pass
        if self.summarizer_status != 200:
            error: dict[str, Any] = {
                "error": {"message": "summarizer down", "type": "server_error", "param": None, "code": None}
            }
            if api == "messages":
                error = error_body("summarizer down", "api_error")
            await self.respond(record, send, self.summarizer_status, orjson.dumps(error), "application/json")
            return
        if self.summarizer_reply is not None:
            text, finish_reason = self.summarizer_reply
            self.bill_summary(record, text, api)
            await self.respond(record, send, 200, summary_body(model, text, finish_reason, api), "application/json")
            return
        # Like a model summarizing the fake agents' task, it says how far the steps it was shown got.
        done = [int(n) for n in STEP_DONE.findall(record.body.decode("utf-8", "replace"))]
        progress = f" The task's steps 1 to {max(done)} are done." if done else ""
        text = (
            f'## Task\n"Fix the bug." Summary number {self.summary_count}.\n'
            f"## State of the work\nThe cause is found.{progress}\n"
            "## Files and changes\n- src/app.py: fixed the parser.\n"
            "## Commands, tests and results\n- `pytest -q`: 3 passed.\n"
            "## Errors and approaches ruled out\n- none.\n## Next step\nRun the full suite."
        )
        self.bill_summary(record, text, api)
        await self.respond(record, send, 200, summary_body(model, text, "stop", api), "application/json")

    def bill_summary(self, record: Recorded, text: str, api: str) -> None:
        """A line of the bill for an answered summary: its prompt as the fake of its API counts it, never
        cached, and the reply's text as output."""
        payload = record.json()
        if api == "messages":
            prompt = self.messages.count(payload)
        elif api == "gemini":
            prompt = self.gemini.count(payload)
        elif api == "responses":
            source = payload.get("input")
            items = [{"type": "message", "role": "user", "content": source}] if isinstance(source, str) else source
            prompt = self.responses.count(payload, list(items or []))[0]
        else:
            prompt = self.counter.count_request(payload, "o200k_base").total
        self.bill.add("summary", uncached=prompt, output=self.messages.tokens(text))

    async def held(self, record: Recorded, limit_s: float = 60.0) -> None:
        """Wait while a hold names this summarizer call (`summarizer_holds`), at most `limit_s`."""
        gates = [gate for text, gate in self.summarizer_holds.items() if text.encode() in record.body]
        deadline = time.monotonic() + limit_s
        while any(not gate.is_set() for gate in gates) and time.monotonic() < deadline:
            await asyncio.sleep(0.005)

    async def stream_until_disconnect(self, record: Recorded, receive: Any, send: Any) -> None:
        record.status = 200
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/event-stream")]})
        for event in stream_events("m", include_usage=False, prompt_tokens=1)[:2]:
            chunk = sse(event)
            record.sent += chunk
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
        try:
            message = await asyncio.wait_for(receive(), timeout=15)
        except TimeoutError:
            return
        if message["type"] == "http.disconnect":
            record.disconnected.set()

    async def flood(self, record: Recorded, receive: Any, send: Any) -> None:
        """Events of 16 KB as fast as the proxy takes them: `x-flood-bytes` of them then `[DONE]`, or (without
        it) until the proxy closes the connection, which sets `record.disconnected`. Only their count is
        kept (`record.flooded`), not the bytes."""
        limit = int(record.headers.get("x-flood-bytes", FLOOD_CAP_BYTES))
        gone = asyncio.ensure_future(receive())  # the body is read: the next message is the proxy hanging up
        record.status = 200
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/event-stream")]})
        base = {"id": "chatcmpl-flood", "object": "chat.completion.chunk", "created": 1700000000, "model": "m"}
        event = sse({**base, "choices": [{"index": 0, "delta": {"content": "x" * FLOOD_EVENT_CHARS}}]})
        try:
            while record.flooded < limit and not gone.done():
                await send({"type": "http.response.body", "body": event, "more_body": True})
                record.flooded += len(event)
                await asyncio.sleep(0)  # a send to a closed connection returns at once: let `gone` see it
            if gone.done():
                if gone.result()["type"] == "http.disconnect":
                    record.disconnected.set()
                return
            await send({"type": "http.response.body", "body": sse("[DONE]"), "more_body": False})
        finally:
            gone.cancel()


def main() -> None:
    parser = argparse.ArgumentParser(description="Run the fake upstream on a loopback port (for benchmarks).")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument(
        "--window", action="append", default=[], metavar="MODEL=TOKENS", help="refuse above this (MODEL may be a glob)"
    )
    parser.add_argument("--stream-chunks", type=int, default=8)
    parser.add_argument("--stream-interval", type=float, default=0.0)
    parser.add_argument("--summarizer-delay", type=float, default=0.0, help="seconds each summary takes")
    args = parser.parse_args()
    windows = {model: int(tokens) for model, tokens in (item.rsplit("=", 1) for item in args.window)}
    app = UpstreamApp(
        windows=windows, record=False, stream_chunks=args.stream_chunks, stream_interval=args.stream_interval
    )
    app.summarizer_delay = args.summarizer_delay
    import uvicorn

    uvicorn.run(app, host="127.0.0.1", port=args.port, log_level="warning", access_log=False, lifespan="on")


if __name__ == "__main__":
    main()
