"""The tab's routing key (``va_`` + 64 lowercase hex) and how the agent finds it.

The key travels in the LiveKit participant metadata of the user's tab, as JSON
``{"apiKey": "va_…"}``. The agent reads it from that remote participant only, never from
its own metadata, and never logs it whole: log :func:`fingerprint` instead.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    # The participant helpers need the ``livekit`` package (the ``livekit`` extra); the key
    # checks and fingerprints above them do not, so the client imports this module without it.
    from livekit import rtc

T = TypeVar("T")

_KEY_RE = re.compile(r"va_[0-9a-f]{64}")


def is_api_key(value: object) -> bool:
    """Whether ``value`` is a well-formed routing key."""
    return isinstance(value, str) and _KEY_RE.fullmatch(value) is not None


def fingerprint(secret: str) -> str:
    """The first 8 hex characters of SHA-256 of ``secret``: what logs may show of a key."""
    return hashlib.sha256(secret.encode("utf-8")).hexdigest()[:8]


def key_from_metadata(metadata: str | None) -> str | None:
    """The routing key in a participant's metadata, or ``None`` when there is no valid one."""
    if not metadata:
        return None
    try:
        data = json.loads(metadata)
    except ValueError:
        return None
    if not isinstance(data, dict):
        return None
    key = data.get("apiKey")
    return key if is_api_key(key) else None


def key_of_participant(participant: rtc.Participant) -> str | None:
    """The key of a user participant; ``None`` for agents, the local participant or no key."""
    from livekit import rtc

    if not isinstance(participant, rtc.RemoteParticipant):
        return None
    if participant.kind == rtc.ParticipantKind.PARTICIPANT_KIND_AGENT:
        return None
    return key_from_metadata(participant.metadata)


def first_keyed(
    participants: Iterable[rtc.Participant],
) -> tuple[rtc.RemoteParticipant, str] | None:
    """The first remote, non-agent participant that carries a valid key, with that key."""
    from livekit import rtc

    for participant in participants:
        key = key_of_participant(participant)
        if key is not None and isinstance(participant, rtc.RemoteParticipant):
            return participant, key
    return None


async def wait_for_keyed_participant(room: rtc.Room) -> tuple[rtc.RemoteParticipant, str]:
    """Waits until a user participant with a valid key is in ``room``.

    Participants without a valid key (other agents, observers) are ignored. A key that
    arrives later through a metadata update counts too. Raises ``RuntimeError`` if the room
    disconnects first; callers bound the wait with their own timeout if they need one.
    """
    return await wait_for_participant(
        room, lambda participant: first_keyed([participant]), "a user with a key joined"
    )


async def wait_for_participant(
    room: rtc.Room, pick: Callable[[rtc.Participant], T | None], awaited: str
) -> T:
    """Waits until ``pick`` accepts a participant of ``room`` (one already there, one that
    joins, or one whose metadata changes) and returns what it gave.

    Raises ``RuntimeError`` naming ``awaited`` if the room disconnects first; callers bound
    the wait themselves.
    """
    from livekit import rtc

    loop = asyncio.get_running_loop()
    found: asyncio.Future[T] = loop.create_future()

    def consider(participant: rtc.Participant) -> None:
        if found.done():
            return
        hit = pick(participant)
        if hit is not None:
            found.set_result(hit)

    def on_metadata(participant: rtc.Participant, _old: str, _new: str) -> None:
        consider(participant)

    def on_state(state: int) -> None:
        if state == rtc.ConnectionState.CONN_DISCONNECTED and not found.done():
            found.set_exception(RuntimeError(f"the room disconnected before {awaited}"))

    room.on("participant_connected", consider)
    room.on("participant_metadata_changed", on_metadata)
    room.on("connection_state_changed", on_state)
    try:
        for participant in list(room.remote_participants.values()):
            consider(participant)
        return await found
    finally:
        room.off("participant_connected", consider)
        room.off("participant_metadata_changed", on_metadata)
        room.off("connection_state_changed", on_state)
