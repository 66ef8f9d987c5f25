"""A typed async client of the agent worker's agent API.

``GET /agent/tools`` gives the instructions and UI tools of the session's current mode;
``POST /agent/tools/{name}`` runs one (through the relay to the tab, or a mode change).
Every request carries ``Authorization: Bearer <session token>`` (a token for that one key,
which reaches no other tab) and the tab's key in ``X-Voice-Agent-Key``. The client holds no
global state: make one per key (or share one ``httpx.AsyncClient`` between several through
``http=``).

Two kinds of failure, kept apart:

- the API call itself fails (a refused or expired token, a token for another key, a
  malformed key, worker unreachable, no answer in time): the method raises a
  :class:`WorkerError` subclass;
- the tool ran and failed (tab offline, the user's tab answered with an error, invalid
  arguments): :meth:`WorkerClient.call_tool` returns a :class:`CallOutcome` whose ``error``
  holds the same typed error as a value, with a message a model can speak.
"""

from __future__ import annotations

import asyncio
import json
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Self
from urllib.parse import quote

import httpx

from .errors import (
    BadResponse,
    CallTimeout,
    Cancelled,
    ErrorCode,
    Forbidden,
    Internal,
    InvalidArguments,
    InvalidRequest,
    NoHandler,
    NotConfigured,
    PayloadTooLarge,
    RateLimited,
    RelayUnreachable,
    ShuttingDown,
    TabOffline,
    ToolFailed,
    ToolNotAllowed,
    Unauthorized,
    Unavailable,
    UnknownKey,
    UnknownTool,
    WorkerError,
    error_from,
)
from .keys import fingerprint, is_api_key

#: The client's names and, for callers of this module, the typed errors of :mod:`.errors`.
__all__ = [
    "CALL_ATTEMPTS",
    "DEFAULT_CALL_TIMEOUT_MS",
    "DEFAULT_MARGIN_S",
    "IDEMPOTENCY_HEADER",
    "KEY_HEADER",
    "MAX_WAIT_S",
    "RETRY_PAUSES_S",
    "BadResponse",
    "CallOutcome",
    "CallTimeout",
    "Cancelled",
    "ErrorCode",
    "Forbidden",
    "Internal",
    "InvalidArguments",
    "InvalidRequest",
    "NoHandler",
    "NotConfigured",
    "PayloadTooLarge",
    "RateLimited",
    "RelayUnreachable",
    "ShuttingDown",
    "TabOffline",
    "ToolFailed",
    "ToolNotAllowed",
    "ToolOffer",
    "ToolSpec",
    "Unauthorized",
    "Unavailable",
    "UnknownKey",
    "UnknownTool",
    "WorkerClient",
    "WorkerError",
    "error_from",
    "parse_call_body",
    "parse_error_body",
]

#: Header that carries the tab's routing key on every agent API request.
KEY_HEADER = "X-Voice-Agent-Key"
IDEMPOTENCY_HEADER = "Idempotency-Key"
#: Attempts of one tool call when the worker cannot be reached or answers 503; every attempt
#: carries the same Idempotency-Key, so the tab gets the call once.
CALL_ATTEMPTS = 3
#: Pause before the second and third attempts, seconds.
RETRY_PAUSES_S = (0.2, 0.6)

#: The relay's default call timeout, used for a tool whose ``timeoutMs`` is ``null``.
DEFAULT_CALL_TIMEOUT_MS = 15_000

#: What an HTTP request may take beyond the call's own timeout (worker retries, transit).
DEFAULT_MARGIN_S = 10.0

#: The longest wait the worker accepts for a changed tool offer.
MAX_WAIT_S = 30.0


@dataclass(frozen=True)
class ToolSpec:
    """One tool as the worker offers it (the schema is the worker registry's, verbatim)."""

    name: str
    description: str
    parameters: dict[str, Any]
    output_schema: dict[str, Any] | None
    await_result: bool
    timeout_ms: int | None

    @property
    def is_mode_change(self) -> bool:
        return self.name.startswith(("enter_", "leave_"))

    def raw_schema(self) -> dict[str, Any]:
        """``{"name", "description", "parameters"}`` for an LLM function definition."""
        return {"name": self.name, "description": self.description, "parameters": self.parameters}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ToolSpec:
        name = data.get("name")
        parameters = data.get("parameters")
        if not isinstance(name, str) or not name:
            raise ValueError("a tool without a name")
        if not isinstance(parameters, dict):
            raise ValueError(f"tool {name}: parameters is not a JSON Schema object")
        output_schema = data.get("outputSchema")
        timeout_ms = data.get("timeoutMs")
        return cls(
            name=name,
            description=str(data.get("description") or ""),
            parameters=parameters,
            output_schema=output_schema if isinstance(output_schema, dict) else None,
            await_result=bool(data.get("awaitResult", False)),
            timeout_ms=int(timeout_ms) if isinstance(timeout_ms, int | float) else None,
        )


@dataclass(frozen=True)
class ToolOffer:
    """The session's current mode: its instructions and its tools, for what the tab handles.

    ``revision`` changes whenever any of it does (ask again with it to wait for a change).
    """

    mode: str
    instructions: str
    tools: tuple[ToolSpec, ...]
    revision: str = ""

    def tool(self, name: str) -> ToolSpec | None:
        return next((t for t in self.tools if t.name == name), None)

    @classmethod
    def from_json(cls, data: Any) -> ToolOffer:
        if not isinstance(data, dict):
            raise ValueError("the tool offer is not a JSON object")
        tools = data.get("tools")
        if not isinstance(tools, list):
            raise ValueError("the tool offer has no tools list")
        return cls(
            mode=str(data.get("mode") or ""),
            instructions=str(data.get("instructions") or ""),
            tools=tuple(ToolSpec.from_json(t) for t in tools if isinstance(t, dict)),
            revision=str(data.get("revision") or ""),
        )


@dataclass(frozen=True)
class CallOutcome:
    """What one tool call came to: a result or an error value, and the mode after it."""

    name: str
    ok: bool
    result: Any
    error: WorkerError | None
    mode: str
    mode_changed: bool
    #: When the call was sent and when its answer (or failure) came, in Unix seconds.
    started_at: float | None = None
    ended_at: float | None = None

    def to_json(self) -> dict[str, Any]:
        body: dict[str, Any] = {"name": self.name, "ok": self.ok}
        if self.ok:
            body["result"] = self.result
        elif self.error is not None:
            body["error"] = self.error.to_json()
        body["mode"] = self.mode
        body["modeChanged"] = self.mode_changed
        return body


def parse_error_body(status: int, body: Any) -> WorkerError:
    """The typed error of a non-200 answer (``{"ok":false,"error":{"code","message"}}``)."""
    error = body.get("error") if isinstance(body, dict) else None
    if isinstance(error, dict) and isinstance(error.get("code"), str):
        return error_from(error["code"], str(error.get("message") or ""), status=status)
    fallback = {
        400: ErrorCode.INVALID_REQUEST,
        401: ErrorCode.UNAUTHORIZED,
        403: ErrorCode.FORBIDDEN,
        404: ErrorCode.UNKNOWN_KEY,
        413: ErrorCode.PAYLOAD_TOO_LARGE,
        429: ErrorCode.RATE_LIMITED,
        503: ErrorCode.UNAVAILABLE,
        504: ErrorCode.TIMEOUT,
    }.get(status, ErrorCode.UNAVAILABLE)
    return error_from(fallback, f"the agent worker answered HTTP {status}", status=status)


def parse_call_body(name: str, body: Any) -> CallOutcome:
    """The outcome in a 200 answer of ``POST /agent/tools/{name}``."""
    if not isinstance(body, dict) or not isinstance(body.get("ok"), bool):
        raise Unavailable(ErrorCode.UNAVAILABLE, "the agent worker sent an unreadable answer")
    mode = str(body.get("mode") or "")
    mode_changed = bool(body.get("modeChanged", False))
    if body["ok"]:
        return CallOutcome(name, True, body.get("result"), None, mode, mode_changed)
    error = body.get("error")
    if isinstance(error, dict) and isinstance(error.get("code"), str):
        err = error_from(error["code"], str(error.get("message") or ""), status=200)
    else:
        err = ToolFailed(ErrorCode.TOOL_FAILED, f"The {name} tool failed.", status=200)
    return CallOutcome(name, False, None, err, mode, mode_changed)


class WorkerClient:
    """The agent API for one tab's key, with a session token for that key.

    ``token`` is the agent's session token (from its dispatch's metadata, or from the app's
    backend); it is sent on every request and never logged. ``timeout_ms`` of a tool sets the
    HTTP timeout of its call: that time plus ``margin_s`` (``DEFAULT_CALL_TIMEOUT_MS`` when
    the tool has none). Use as an async context manager, or call :meth:`aclose`.
    """

    def __init__(
        self,
        base_url: str,
        token: str,
        key: str,
        *,
        http: httpx.AsyncClient | None = None,
        list_timeout_s: float = 10.0,
        margin_s: float = DEFAULT_MARGIN_S,
        default_call_timeout_ms: int = DEFAULT_CALL_TIMEOUT_MS,
    ) -> None:
        if not is_api_key(key):
            raise ValueError("key is not a routing key (va_ and 64 lowercase hex characters)")
        if token.count(".") != 2:
            raise ValueError("token is not a session token (a JWT the relay minted for the key)")
        self._base = base_url.rstrip("/")
        self._headers = {
            "Authorization": f"Bearer {token}",
            KEY_HEADER: key,
            "Accept": "application/json",
        }
        self._owns_http = http is None
        self._http = http or httpx.AsyncClient()
        self._list_timeout = list_timeout_s
        self._margin = margin_s
        self._default_call_timeout_ms = default_call_timeout_ms
        self.key_fingerprint = fingerprint(key)

    def __repr__(self) -> str:
        return f"WorkerClient({self._base!r}, key={self.key_fingerprint})"

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        if self._owns_http:
            await self._http.aclose()

    def call_timeout_s(self, spec: ToolSpec | None) -> float:
        """The HTTP timeout of a call to ``spec``: its own timeout plus the margin."""
        timeout_ms = spec.timeout_ms if spec is not None else None
        if timeout_ms is None:
            timeout_ms = self._default_call_timeout_ms
        return timeout_ms / 1000.0 + self._margin

    async def list_tools(self, *, after: str | None = None, wait_s: float = 0.0) -> ToolOffer:
        """The current mode's instructions and tools.

        With ``after`` (the ``revision`` of the offer the caller has) and ``wait_s`` (at most
        ``MAX_WAIT_S``), the worker answers when the offer changes (the mode, or a handler
        added or removed in the tab), or with the same offer when the wait ends.
        """
        path = "/agent/tools"
        timeout = self._list_timeout
        if after is not None and wait_s > 0:
            wait_ms = int(min(wait_s, MAX_WAIT_S) * 1000)
            path += f"?after={quote(after, safe='')}&waitMs={wait_ms}"
            timeout += wait_ms / 1000.0
        response = await self._request("GET", path, None, timeout)
        body = _json_body(response)
        if response.status_code != 200:
            raise parse_error_body(response.status_code, body)
        try:
            return ToolOffer.from_json(body)
        except ValueError as e:
            raise Unavailable(
                ErrorCode.UNAVAILABLE, f"the agent worker sent an unreadable tool list ({e})"
            ) from e

    async def call_tool(
        self,
        name: str,
        arguments: Mapping[str, Any] | None = None,
        *,
        spec: ToolSpec | None = None,
        timeout_s: float | None = None,
        idempotency_key: str | None = None,
    ) -> CallOutcome:
        """Runs tool ``name``; a tool failure comes back in the outcome, not as an exception.

        ``spec`` (the tool as offered) sets the timeout; ``timeout_s`` overrides it. When the
        worker cannot be reached or answers 503 the call is tried again (``CALL_ATTEMPTS`` in
        all) with the same ``Idempotency-Key`` (``idempotency_key``, or a fresh one), so a
        retry never shows the user the same thing twice.
        """
        timeout = timeout_s if timeout_s is not None else self.call_timeout_s(spec)
        path = "/agent/tools/" + quote(name, safe="")
        # One key for every attempt of this call: the relay replays the first outcome to a
        # retry instead of emitting the call again.
        idempotency_key = idempotency_key or "py-" + secrets.token_hex(16)
        for attempt in range(CALL_ATTEMPTS):
            last = attempt == CALL_ATTEMPTS - 1
            try:
                response = await self._request(
                    "POST",
                    path,
                    dict(arguments or {}),
                    timeout,
                    extra_headers={IDEMPOTENCY_HEADER: idempotency_key},
                )
            except Unavailable:
                if last:
                    raise
                await asyncio.sleep(RETRY_PAUSES_S[attempt])
                continue
            if response.status_code == 503 and not last:
                await asyncio.sleep(RETRY_PAUSES_S[attempt])
                continue
            body = _json_body(response)
            if response.status_code != 200:
                raise parse_error_body(response.status_code, body)
            return parse_call_body(name, body)
        raise AssertionError("unreachable: the last attempt returns or raises")

    async def _request(
        self,
        method: str,
        path: str,
        body: dict[str, Any] | None,
        timeout_s: float,
        *,
        extra_headers: Mapping[str, str] | None = None,
    ) -> httpx.Response:
        headers = {**self._headers, **(extra_headers or {})}
        if body is not None:
            headers["Content-Type"] = "application/json"
        try:
            return await self._http.request(
                method,
                self._base + path,
                headers=headers,
                content=None if body is None else json.dumps(body).encode("utf-8"),
                timeout=httpx.Timeout(timeout_s, connect=min(timeout_s, 5.0)),
            )
        except httpx.TimeoutException as e:
            raise CallTimeout(ErrorCode.TIMEOUT, "The agent worker did not answer in time.") from e
        except httpx.HTTPError as e:
            raise Unavailable(
                ErrorCode.UNAVAILABLE,
                f"The agent worker cannot be reached ({type(e).__name__}).",
            ) from e


def _json_body(response: httpx.Response) -> Any:
    try:
        return response.json()
    except ValueError:
        return None
