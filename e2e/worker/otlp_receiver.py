"""A real OTLP/HTTP trace receiver for the tests: ``POST /v1/traces`` takes an
``ExportTraceServiceRequest`` (protobuf, gzip allowed), decodes it with ``opentelemetry-proto``
(the OpenTelemetry project's own generated messages) and keeps every span; ``GET /spans`` answers
them as JSON (ids in hex, attributes as plain values). Every payload, decompressed, is appended
to a file (``--payloads``) so a test can search it for keys, tokens and secrets, as it searches
the servers' logs.

In a process of its own (for the JavaScript suites)::

    python e2e/worker/otlp_receiver.py --payloads FILE
    # prints "otlp receiver listening on http://127.0.0.1:PORT", serves until SIGTERM

or in the test's own process (the Python suites): ``Receiver(payloads).start()``.
"""

from __future__ import annotations

import argparse
import gzip
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue

#: Largest request accepted (a batch of spans is far smaller).
MAX_BODY = 16 * 1024 * 1024

#: OTLP's span kinds by number.
KINDS = {0: "unspecified", 1: "internal", 2: "server", 3: "client", 4: "producer", 5: "consumer"}
#: OTLP's status codes by number.
STATUS = {0: "unset", 1: "ok", 2: "error"}


def plain(value: AnyValue) -> Any:
    """An attribute's value as a plain Python value."""
    which = value.WhichOneof("value")
    if which is None:
        return None
    if which == "array_value":
        return [plain(v) for v in value.array_value.values]
    if which == "kvlist_value":
        return attributes(value.kvlist_value.values)
    if which == "bytes_value":
        return value.bytes_value.hex()
    return getattr(value, which)


def attributes(kvs: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for kv in kvs:
        assert isinstance(kv, KeyValue)
        out[kv.key] = plain(kv.value)
    return out


def spans_of(request: ExportTraceServiceRequest) -> list[dict[str, Any]]:
    """Every span of a request, with its service and scope."""
    spans = []
    for rs in request.resource_spans:
        resource = attributes(rs.resource.attributes)
        for ss in rs.scope_spans:
            for s in ss.spans:
                spans.append(
                    {
                        "service": resource.get("service.name"),
                        "resource": resource,
                        "scope": ss.scope.name,
                        "traceId": s.trace_id.hex(),
                        "spanId": s.span_id.hex(),
                        "parentSpanId": s.parent_span_id.hex(),
                        "traceState": s.trace_state,
                        "name": s.name,
                        "kind": KINDS.get(s.kind, str(s.kind)),
                        "start": s.start_time_unix_nano,
                        "end": s.end_time_unix_nano,
                        "attributes": attributes(s.attributes),
                        "events": [
                            {
                                "name": e.name,
                                "time": e.time_unix_nano,
                                "attributes": attributes(e.attributes),
                            }
                            for e in s.events
                        ],
                        "links": [
                            {"traceId": ln.trace_id.hex(), "spanId": ln.span_id.hex()}
                            for ln in s.links
                        ],
                        "status": {
                            "code": STATUS.get(s.status.code, str(s.status.code)),
                            "message": s.status.message,
                        },
                    }
                )
    return spans


class Receiver:
    """The receiver's state and its HTTP server, on a free port of loopback."""

    def __init__(self, payloads: Path) -> None:
        self.payloads = payloads
        self.spans: list[dict[str, Any]] = []
        self.requests = 0
        self.refused = 0
        self.lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def _answer(self, status: int, body: bytes, content_type: str) -> None:
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def _body(self) -> bytes | None:
                """The request's body, sized by Content-Length or sent in chunks (as Node's
                exporter sends it); None when it is empty, larger than MAX_BODY or malformed."""
                if (self.headers.get("Transfer-Encoding") or "").lower() != "chunked":
                    length = int(self.headers.get("Content-Length") or 0)
                    return self.rfile.read(length) if 0 < length <= MAX_BODY else None
                chunks: list[bytes] = []
                total = 0
                while True:
                    line = self.rfile.readline(100).split(b";")[0].strip()
                    try:
                        size = int(line, 16)
                    except ValueError:
                        return None
                    if size == 0:
                        self.rfile.readline(100)
                        break
                    total += size
                    if total > MAX_BODY:
                        return None
                    chunks.append(self.rfile.read(size))
                    self.rfile.readline(100)
                return b"".join(chunks) or None

            def do_POST(self) -> None:
                if self.path != "/v1/traces":
                    self._answer(404, b"not found", "text/plain")
                    return
                body = self._body()
                if body is None:
                    self._answer(400, b"a body of 1 byte to 16 MiB", "text/plain")
                    return
                if (self.headers.get("Content-Encoding") or "").lower() == "gzip":
                    body = gzip.decompress(body)
                status, answer = receiver.take(body, self.headers.get("Content-Type") or "")
                self._answer(status, answer, "application/x-protobuf")

            def do_GET(self) -> None:
                if self.path != "/spans":
                    self._answer(404, b"not found", "text/plain")
                    return
                with receiver.lock:
                    body = json.dumps(
                        {
                            "spans": receiver.spans,
                            "requests": receiver.requests,
                            "refused": receiver.refused,
                        }
                    ).encode()
                self._answer(200, body, "application/json")

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        port = self.server.server_address[1]
        return f"http://127.0.0.1:{port}"

    def take(self, body: bytes, content_type: str) -> tuple[int, bytes]:
        """Decodes one export request; keeps its spans and its bytes."""
        with self.lock:
            self.requests += 1
            with self.payloads.open("ab") as f:
                f.write(body + b"\n")
        if not content_type.startswith("application/x-protobuf"):
            with self.lock:
                self.refused += 1
            return 415, b""
        request = ExportTraceServiceRequest()
        try:
            request.ParseFromString(body)
        except DecodeError:
            with self.lock:
                self.refused += 1
            return 400, b""
        spans = spans_of(request)
        with self.lock:
            self.spans.extend(spans)
        return 200, ExportTraceServiceResponse().SerializeToString()

    def start(self) -> Receiver:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def snapshot(self) -> list[dict[str, Any]]:
        with self.lock:
            return list(self.spans)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--payloads", type=Path, required=True, help="where payloads are kept")
    args = parser.parse_args()
    receiver = Receiver(args.payloads)
    print(f"otlp receiver listening on {receiver.url}", flush=True)
    # Serves until the process is stopped (SIGTERM); every payload is on disk as it arrives.
    receiver.server.serve_forever()


if __name__ == "__main__":
    main()
