"""One trace from the agent's own span to the tab's handler and back: the test opens a span (as
LiveKit Agents' ``function_tool`` span would be), calls a tool through the Python library, a tab
(the browser client built for Node, on the official socket.io-client) answers, and a real
OTLP/HTTP receiver (``otlp_receiver.py``, opentelemetry-proto) holds the trace: test → worker
request → tool → relay attempt → the relay's tool call → its delivery, with the tab's handler
time as an event and the tab inside the delivery span. Timeouts and ``no_handler`` end in error
spans; an MCP call carries its context in ``params._meta``. Every payload received is searched
for the keys and secrets the test saw."""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from voice_relay_agent.client import WorkerClient

from conftest import Server, Stack, start_stack
from mcp_support import Tab, mcp_client
from otlp_receiver import Receiver

WAIT_S = 20.0

#: Short timeouts, so a tab that holds a call times it out quickly; flip is no tab's tool.
CATALOG = {
    "initialMode": "default",
    "modes": [{"id": "default", "instructions": "Show things.", "next": []}],
    "tools": [
        {
            "name": "draw_card",
            "description": "Ask the user for a card.",
            "parameters": {
                "type": "object",
                "properties": {"positionLabel": {"type": "string"}},
                "required": ["positionLabel"],
            },
            "awaitResult": True,
            "timeoutMs": 1500,
        },
        {
            "name": "flip",
            "description": "Flip the card.",
            "parameters": {"type": "object", "properties": {}},
            "awaitResult": True,
            "timeoutMs": 1500,
        },
    ],
}


@dataclass
class Traced:
    stack: Stack
    receiver: Receiver

    @property
    def relay(self) -> Server:
        return self.stack.relay

    @property
    def worker(self) -> Server:
        return self.stack.worker


def assert_no_secret(name: str, text: str, seen: set[str]) -> None:
    """No whole key, token or secret in ``text``; nor a key's hex body, nor a session token's
    signature (the token cut in pieces)."""
    for secret in seen:
        assert secret not in text, f"the {name} holds a whole key, token or secret"
        if secret.startswith("va_"):
            assert secret[3:] not in text, f"the {name} holds a key's hex body"
        parts = secret.split(".")
        if len(parts) == 3 and len(parts[2]) >= 32:
            assert parts[2] not in text, f"the {name} holds a session token's signature"


@pytest.fixture(scope="module")
def traced(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Traced]:
    """A relay and a worker exporting every span to a receiver of the test's own."""
    logs = Path(os.environ.get("TEST_LOG_DIR") or tmp_path_factory.mktemp("logs"))
    logs.mkdir(parents=True, exist_ok=True)
    receiver = Receiver(logs / f"otlp-payloads-python-{os.getpid()}.bin").start()
    catalog = tmp_path_factory.mktemp("catalog") / "catalog.json"
    catalog.write_text(json.dumps(CATALOG))
    otel = {
        "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url,
        "OTEL_TRACES_SAMPLER": "parentbased_always_on",
        "OTEL_BSP_SCHEDULE_DELAY": "200",
    }
    try:
        stack = start_stack(logs, "python-traced", otel, {"WORKER_CATALOG": str(catalog)})
    except BaseException:
        receiver.stop()
        raise
    relay, worker = stack.relay, stack.worker
    try:
        yield Traced(stack, receiver)
    finally:
        texts = {"worker log": worker.stop(), "relay log": relay.stop()}
        receiver.stop()
        texts["spans received"] = receiver.payloads.read_bytes().decode("latin-1")
        assert receiver.requests > 0 and receiver.refused == 0
        assert any(len(s.split(".")) == 3 for s in stack.secrets_seen), "session tokens searched"
        for name, text in texts.items():
            assert_no_secret(name, text, stack.secrets_seen)


@pytest.fixture
async def tab(traced: Traced) -> AsyncIterator[Tab]:
    """The browser client itself as the tab."""
    t = await Tab.open(traced.relay.url, client=True)
    traced.stack.secrets_seen.add(t.api_key)
    try:
        yield t
    finally:
        await t.close()


def tracer(receiver: Receiver) -> Any:
    """A tracer of the test's own ("test-agent"), exporting to the receiver at once."""
    provider = TracerProvider(resource=Resource.create({"service.name": "test-agent"}))
    exporter = OTLPSpanExporter(endpoint=receiver.url + "/v1/traces")
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider.get_tracer("test")


async def spans_of(
    receiver: Receiver, trace_id: str, done: Callable[[list[dict[str, Any]]], bool]
) -> list[dict[str, Any]]:
    """The trace's spans, once ``done`` says enough of them arrived (bounded)."""
    deadline = asyncio.get_running_loop().time() + WAIT_S
    while True:
        spans = [s for s in receiver.snapshot() if s["traceId"] == trace_id]
        if done(spans):
            return spans
        if asyncio.get_running_loop().time() > deadline:
            names = [(s["service"], s["name"]) for s in spans]
            raise AssertionError(f"the trace never completed; spans so far: {names}")
        await asyncio.sleep(0.1)


def one(spans: list[dict[str, Any]], **match: Any) -> dict[str, Any]:
    found = [s for s in spans if all(s.get(k) == v for k, v in match.items())]
    assert len(found) == 1, f"{match}: {[(s['service'], s['name']) for s in spans]}"
    return found[0]


def complete(spans: list[dict[str, Any]], entry: str = "POST /agent/tools") -> bool:
    """Whether every span the tests read has arrived: the relay's call and its delivery, and the
    worker's entry (``entry``), tool and HTTP attempt. Each process exports in batches of its own,
    so a parent span, which ends last, may come in a later batch than its children."""

    def has(service: str, test: Callable[[dict[str, Any]], bool]) -> bool:
        return any(s["service"] == service and test(s) for s in spans)

    return (
        has("voice-relay", lambda s: s["name"] == "tool_call")
        and has("voice-relay", lambda s: s["name"] == "deliver")
        and has("agent-worker", lambda s: s["name"].startswith(entry))
        and has("agent-worker", lambda s: s["name"].startswith("tool "))
        and has("agent-worker", lambda s: s["kind"] == "client")
    )


async def test_one_trace_from_the_agents_span_through_worker_and_relay_to_the_tab(
    traced: Traced, tab: Tab
) -> None:
    test = tracer(traced.receiver)
    async with WorkerClient(
        traced.worker.url, traced.stack.token_for(tab.api_key), tab.api_key
    ) as client:
        with test.start_as_current_span("function_tool") as span:
            outcome = await client.call_tool("draw_card", {"positionLabel": "Past"})
    assert outcome.ok, outcome.error
    ctx = span.get_span_context()
    trace_id = f"{ctx.trace_id:032x}"
    spans = await spans_of(traced.receiver, trace_id, complete)

    agent = one(spans, service="test-agent", name="function_tool")
    request = one(spans, service="agent-worker", kind="server")
    assert request["name"] == "POST /agent/tools/{name}"
    assert request["parentSpanId"] == agent["spanId"], "the worker continues the agent's span"
    tool = one(spans, service="agent-worker", name="tool draw_card")
    assert tool["parentSpanId"] == request["spanId"]
    assert tool["attributes"]["worker.mode"] == "default"
    assert len(tool["attributes"]["worker.key"]) == 8, "the key only as its fingerprint"
    attempt = one(spans, service="agent-worker", kind="client")
    assert attempt["parentSpanId"] == tool["spanId"]
    assert attempt["attributes"]["http.request.resend_count"] == 0
    assert attempt["attributes"]["http.response.status_code"] == 200
    server = one(spans, service="voice-relay", name="tool_call")
    assert server["parentSpanId"] == attempt["spanId"], "the relay continues the worker's attempt"
    deliver = one(spans, service="voice-relay", name="deliver")
    assert deliver["parentSpanId"] == server["spanId"]
    call_id = server["attributes"]["relay.call_id"]
    assert call_id.startswith("c_")
    assert tool["attributes"]["relay.call_id"] == call_id
    assert attempt["attributes"]["relay.call_id"] == call_id
    # The tab worked inside the delivery span, and its handler time came back as an event.
    call = await tab.next("voice-agent:draw_card")
    assert call["meta"]["traceparent"] == f"00-{trace_id}-{deliver['spanId']}-01"
    answered = next(e for e in deliver["events"] if e["name"] == "tab answered")
    assert answered["attributes"]["relay.handler_ms"] >= 25
    for s in (request, tool, attempt, server, deliver):
        assert s["status"]["code"] == "unset", s["name"]
        assert "relay.params" not in s["attributes"], "payloads stay off spans"


async def test_timeouts_and_no_handler_end_in_error_spans(traced: Traced, tab: Tab) -> None:
    test = tracer(traced.receiver)
    async with WorkerClient(
        traced.worker.url, traced.stack.token_for(tab.api_key), tab.api_key
    ) as client:
        with test.start_as_current_span("function_tool") as held:
            late = await client.call_tool("draw_card", {"positionLabel": "Hold"})
        with test.start_as_current_span("function_tool") as unhandled:
            missing = await client.call_tool("flip", {})
    assert late.error is not None and late.error.code == "timeout"
    assert missing.error is not None and missing.error.code == "no_handler"
    for span, code in ((held, "timeout"), (unhandled, "no_handler")):
        trace_id = f"{span.get_span_context().trace_id:032x}"
        spans = await spans_of(traced.receiver, trace_id, complete)
        for name in ("tool_call", "deliver"):
            relay_span = one(spans, service="voice-relay", name=name)
            assert relay_span["status"] == {"code": "error", "message": code}, name
        tool = next(s for s in spans if s["name"].startswith("tool "))
        assert tool["status"] == {"code": "error", "message": code}
        attempt = one(spans, service="agent-worker", kind="client")
        assert attempt["status"]["code"] == "error"


async def test_an_mcp_call_carries_its_trace_in_params_meta(traced: Traced, tab: Tab) -> None:
    test = tracer(traced.receiver)
    async with mcp_client(
        traced.worker.url + "/mcp",
        traced.stack.token_for(tab.api_key),
        tab.api_key,
        mode="2026-07-28",
    ) as client:
        with test.start_as_current_span("function_tool") as span:
            # The mcp client puts the current context into the request's params._meta.
            result = await client.call_tool("draw_card", {"positionLabel": "Present"})
    assert not result.is_error
    trace_id = f"{span.get_span_context().trace_id:032x}"
    spans = await spans_of(traced.receiver, trace_id, lambda ss: complete(ss, "tools/call"))
    agent = one(spans, service="test-agent", name="function_tool")
    call = one(spans, service="agent-worker", name="tools/call")
    assert call["kind"] == "server"
    assert call["parentSpanId"] == agent["spanId"]
    tool = one(spans, service="agent-worker", name="tool draw_card")
    assert tool["parentSpanId"] == call["spanId"]
    server = one(spans, service="voice-relay", name="tool_call")
    attempt = one(spans, service="agent-worker", kind="client")
    assert server["parentSpanId"] == attempt["spanId"]
