"""Span export: the ``OTEL_*`` variables turn it on and off as they do for the relay and the
worker, and an agent that exports sends LiveKit Agents' spans over OTLP/HTTP, with the current
span's context on the library's requests to the worker.

The export test runs the agent's own :func:`agent.export_spans` in a process of its own (it
sets LiveKit Agents' tracer provider for the whole process) against a small HTTP server here
that decodes what arrives with the OpenTelemetry project's own protobuf messages."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

import config

LLM = {"OPENAI_API_KEY": "sk-test"}


def tracing(**env: str) -> config.Tracing | None:
    settings, _ = config.load({**LLM, **env})
    return settings.tracing


def problems(**env: str) -> list[str]:
    with pytest.raises(config.ConfigError) as e:
        config.load({**LLM, **env})
    return e.value.problems


def test_export_is_off_unless_asked_for() -> None:
    assert tracing() is None
    assert tracing(OTEL_SERVICE_NAME="agent", OTEL_TRACES_SAMPLER="always_on") is None
    assert tracing(OTEL_EXPORTER_OTLP_ENDPOINT="http://c:4318", OTEL_TRACES_EXPORTER="none") is None
    assert tracing(OTEL_EXPORTER_OTLP_ENDPOINT="http://c:4318", OTEL_SDK_DISABLED="true") is None


def test_an_endpoint_or_the_otlp_exporter_turns_it_on() -> None:
    assert tracing(OTEL_EXPORTER_OTLP_ENDPOINT="http://collector:4318/") == config.Tracing(
        "http://collector:4318/v1/traces"
    )
    full = tracing(OTEL_EXPORTER_OTLP_TRACES_ENDPOINT="https://c.example/otlp/traces")
    assert full is not None and full.endpoint == "https://c.example/otlp/traces"
    default = tracing(OTEL_TRACES_EXPORTER="otlp", OTEL_SERVICE_NAME="agent-eu")
    assert default == config.Tracing("http://localhost:4318/v1/traces", "agent-eu")
    assert default.service_name == "agent-eu"
    assert tracing(OTEL_TRACES_EXPORTER="otlp", OTEL_EXPORTER_OTLP_PROTOCOL="http/protobuf")


def test_the_startup_line_shows_no_credential_of_the_endpoint() -> None:
    shown = tracing(
        OTEL_EXPORTER_OTLP_TRACES_ENDPOINT="https://user:pw-123@c.example:4318/v1/traces?k=v-9"
    )
    assert shown is not None
    assert shown.describe() == (
        "spans of voice-relay-agent to https://c.example:4318/v1/traces over OTLP/HTTP"
    )
    assert "pw-123" not in repr(shown)


def test_what_the_agent_cannot_do_is_refused() -> None:
    found = problems(OTEL_TRACES_EXPORTER="console")
    assert found == [
        "OTEL_TRACES_EXPORTER='console': this agent exports spans over OTLP only (otlp or none)"
    ]
    found = problems(
        OTEL_EXPORTER_OTLP_ENDPOINT="collector:4317",
        OTEL_EXPORTER_OTLP_PROTOCOL="grpc",
        OTEL_TRACES_SAMPLER="sometimes",
    )
    text = "\n".join(found)
    assert "OTEL_EXPORTER_OTLP_PROTOCOL='grpc'" in text
    assert "OTEL_TRACES_SAMPLER='sometimes'" in text
    assert "OTEL_EXPORTER_OTLP_ENDPOINT is not an http(s) URL" in text
    assert "collector:4317" not in text, "an endpoint may hold a credential: named, not shown"
    found = problems(
        OTEL_TRACES_EXPORTER="otlp",
        OTEL_TRACES_SAMPLER="parentbased_traceidratio",
        OTEL_TRACES_SAMPLER_ARG="1.5",
    )
    assert found == [
        "OTEL_TRACES_SAMPLER_ARG='1.5': a ratio from 0 to 1 for parentbased_traceidratio"
    ]


class Collector:
    """Export requests received on ``POST /v1/traces``, decoded."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, ExportTraceServiceRequest]] = []
        collector = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                request = ExportTraceServiceRequest()
                request.ParseFromString(body)
                collector.requests.append((self.path, request))
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", "0")
                self.end_headers()

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"


@pytest.fixture
def collector() -> Iterator[Collector]:
    c = Collector()
    c.thread.start()
    try:
        yield c
    finally:
        c.server.shutdown()
        c.server.server_close()


#: In the child: the agent's settings and export, a span of LiveKit Agents' tracer named as
#: its tool spans are, the library's trace headers inside it, and a flush.
CHILD = """
import json, agent, config
from livekit.agents.telemetry import tracer
from voice_relay_agent.client import trace_headers
settings, _ = config.load(require_llm=False)
assert agent.export_spans(settings.tracing)
with tracer.start_as_current_span("function_tool") as span:
    headers = trace_headers()
ctx = span.get_span_context()
agent._PROVIDER.force_flush()
print(json.dumps({"traceId": f"{ctx.trace_id:032x}", "spanId": f"{ctx.span_id:016x}",
                  "headers": headers}))
"""


def test_an_exporting_agent_sends_livekit_agents_spans_and_their_context(
    collector: Collector,
) -> None:
    env = {
        "PATH": os.environ.get("PATH", ""),
        "HOME": os.environ.get("HOME", "/tmp"),
        # The modules these tests import (this checkout's), not whatever the venv installed.
        "PYTHONPATH": os.pathsep.join(p for p in sys.path if p),
        "OTEL_EXPORTER_OTLP_ENDPOINT": collector.url,
        "OTEL_TRACES_SAMPLER": "always_on",
    }
    done = subprocess.run(
        [sys.executable, "-c", CHILD], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    child = json.loads(done.stdout.strip().splitlines()[-1])
    # The worker continues this span: the library sends it as the request's parent (sampled).
    traceparent = child["headers"]["traceparent"]
    assert traceparent.startswith(f"00-{child['traceId']}-{child['spanId']}-")
    assert int(traceparent[-2:], 16) & 1 == 1, traceparent
    assert collector.requests, "no export request arrived"
    path, request = collector.requests[0]
    assert path == "/v1/traces"
    [resource_spans] = request.resource_spans
    service = {a.key: a.value.string_value for a in resource_spans.resource.attributes}
    assert service["service.name"] == "voice-relay-agent"
    [span] = [s for ss in resource_spans.scope_spans for s in ss.spans]
    assert span.name == "function_tool"
    assert span.trace_id.hex() == child["traceId"] and span.span_id.hex() == child["spanId"]
