"""The typed errors of the agent worker's agent API, one class per error code.

The relay's codes and the worker's own come back in ``{"ok":false,"error":{"code","message"}}``;
:func:`error_from` turns a code into its class. ``message`` is a sentence a model can speak.
"""

from __future__ import annotations

from enum import StrEnum
from typing import ClassVar


class ErrorCode(StrEnum):
    """Error codes of the relay (first block) and of the worker (second block)."""

    INVALID_REQUEST = "invalid_request"
    UNAUTHORIZED = "unauthorized"
    FORBIDDEN = "forbidden"
    UNKNOWN_KEY = "unknown_key"
    TAB_OFFLINE = "tab_offline"
    PAYLOAD_TOO_LARGE = "payload_too_large"
    RATE_LIMITED = "rate_limited"
    TOOL_FAILED = "tool_failed"
    NO_HANDLER = "no_handler"
    SHUTTING_DOWN = "shutting_down"
    UNAVAILABLE = "unavailable"
    TIMEOUT = "timeout"
    INTERNAL = "internal"

    INVALID_ARGUMENTS = "invalid_arguments"
    UNKNOWN_TOOL = "unknown_tool"
    TOOL_NOT_ALLOWED = "tool_not_allowed"
    RELAY_UNREACHABLE = "relay_unreachable"
    BAD_RESPONSE = "bad_response"
    CANCELLED = "cancelled"
    NOT_CONFIGURED = "not_configured"


class WorkerError(Exception):
    """A failure reported by the worker (or reaching it), with its code and message.

    ``code`` is an :class:`ErrorCode` when the code is known, else the raw string, so a
    newer worker's codes still come through. ``message`` is a sentence a model can speak.
    """

    default_code: ClassVar[ErrorCode | None] = None

    def __init__(self, code: ErrorCode | str, message: str, *, status: int | None = None) -> None:
        super().__init__(f"{code}: {message}")
        self.code: ErrorCode | str = code
        self.message = message
        self.status = status

    def to_json(self) -> dict[str, str]:
        return {"code": str(self.code), "message": self.message}


class InvalidRequest(WorkerError):
    default_code = ErrorCode.INVALID_REQUEST


class Unauthorized(WorkerError):
    default_code = ErrorCode.UNAUTHORIZED


class Forbidden(WorkerError):
    """A valid session token that does not reach this: another key, a tool or scope it lacks."""

    default_code = ErrorCode.FORBIDDEN


class UnknownKey(WorkerError):
    default_code = ErrorCode.UNKNOWN_KEY


class TabOffline(WorkerError):
    default_code = ErrorCode.TAB_OFFLINE


class PayloadTooLarge(WorkerError):
    default_code = ErrorCode.PAYLOAD_TOO_LARGE


class RateLimited(WorkerError):
    default_code = ErrorCode.RATE_LIMITED


class ToolFailed(WorkerError):
    default_code = ErrorCode.TOOL_FAILED


class NoHandler(WorkerError):
    default_code = ErrorCode.NO_HANDLER


class ShuttingDown(WorkerError):
    default_code = ErrorCode.SHUTTING_DOWN


class Unavailable(WorkerError):
    """The worker (or the relay behind it) cannot serve now, or cannot be reached."""

    default_code = ErrorCode.UNAVAILABLE


class CallTimeout(WorkerError):
    """The call (or the HTTP request carrying it) ran out of time."""

    default_code = ErrorCode.TIMEOUT


class InvalidArguments(WorkerError):
    default_code = ErrorCode.INVALID_ARGUMENTS


class UnknownTool(WorkerError):
    default_code = ErrorCode.UNKNOWN_TOOL


class ToolNotAllowed(WorkerError):
    default_code = ErrorCode.TOOL_NOT_ALLOWED


class RelayUnreachable(WorkerError):
    """The worker could not reach the relay (after its own retries)."""

    default_code = ErrorCode.RELAY_UNREACHABLE


class BadResponse(WorkerError):
    """The relay or the tab answered something that could not be read, or had the wrong shape."""

    default_code = ErrorCode.BAD_RESPONSE


class Cancelled(WorkerError):
    default_code = ErrorCode.CANCELLED


class NotConfigured(WorkerError):
    default_code = ErrorCode.NOT_CONFIGURED


class Internal(WorkerError):
    default_code = ErrorCode.INTERNAL


_BY_CODE: dict[str, type[WorkerError]] = {
    cls.default_code.value: cls
    for cls in (
        InvalidRequest,
        Unauthorized,
        Forbidden,
        UnknownKey,
        TabOffline,
        PayloadTooLarge,
        RateLimited,
        ToolFailed,
        NoHandler,
        ShuttingDown,
        Unavailable,
        CallTimeout,
        Internal,
        InvalidArguments,
        UnknownTool,
        ToolNotAllowed,
        RelayUnreachable,
        BadResponse,
        Cancelled,
        NotConfigured,
    )
    if cls.default_code is not None
}


def error_from(code: str, message: str, *, status: int | None = None) -> WorkerError:
    """The typed error for ``code`` (a plain :class:`WorkerError` for an unknown code)."""
    cls = _BY_CODE.get(code)
    if cls is None:
        return WorkerError(code, message, status=status)
    assert cls.default_code is not None
    return cls(cls.default_code, message, status=status)
