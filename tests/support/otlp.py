"""A real OTLP/HTTP trace receiver for tests: `POST /v1/traces` decoded with `opentelemetry-proto`, each span kept
as plain data (ids in hex, attributes as Python values)."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route, Router

KINDS = {1: "internal", 2: "server", 3: "client", 4: "producer", 5: "consumer"}


@dataclass(frozen=True)
class ReceivedSpan:
    name: str
    kind: str
    trace_id: str
    span_id: str
    parent_span_id: str
    attributes: dict[str, Any]
    status: int  # 0 unset, 1 ok, 2 error
    service: str


def value_of(value: AnyValue) -> Any:
    which = value.WhichOneof("value")
    if which == "array_value":
        return [value_of(item) for item in value.array_value.values]
    return getattr(value, which) if which else None


class Receiver:
    """The spans received so far, in order; `app` is the ASGI app to serve."""

    def __init__(self) -> None:
        self.spans: list[ReceivedSpan] = []
        self.exports = 0
        self._lock = threading.Lock()
        self.app = Router(routes=[Route("/v1/traces", self.traces, methods=["POST"])])

    async def traces(self, request: Request) -> Response:
        assert request.headers.get("content-type") == "application/x-protobuf"
        export = ExportTraceServiceRequest()
        export.ParseFromString(await request.body())
        received = []
        for resource_spans in export.resource_spans:
            resource = {item.key: value_of(item.value) for item in resource_spans.resource.attributes}
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    received.append(
                        ReceivedSpan(
                            name=span.name,
                            kind=KINDS.get(span.kind, str(span.kind)),
                            trace_id=span.trace_id.hex(),
                            span_id=span.span_id.hex(),
                            parent_span_id=span.parent_span_id.hex(),
                            attributes={item.key: value_of(item.value) for item in span.attributes},
                            status=span.status.code,
                            service=str(resource.get("service.name")),
                        )
                    )
        with self._lock:
            self.spans += received
            self.exports += 1
        body = ExportTraceServiceResponse().SerializeToString()
        return Response(body, media_type="application/x-protobuf")

    def named(self, name: str) -> list[ReceivedSpan]:
        with self._lock:
            return [span for span in self.spans if span.name == name]

    def children_of(self, parent: ReceivedSpan) -> list[ReceivedSpan]:
        with self._lock:
            return [span for span in self.spans if span.parent_span_id == parent.span_id]
