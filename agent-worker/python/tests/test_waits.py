"""Waiting in a room for the participant an agent serves: the dispatched user only, or the
first keyed one; participants already there, joining later or keyed later by a metadata
change; a room that disconnects first; no listener left behind."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Any, cast

import pytest
from livekit import rtc

from test_keys import AGENT, KEY, OTHER, remote
from voice_relay_agent.dispatch import DispatchGrant, wait_for_user
from voice_relay_agent.keys import wait_for_keyed_participant


class Room:
    """The part of ``rtc.Room`` the waits use: its participants and its event listeners."""

    def __init__(self, *present: rtc.RemoteParticipant) -> None:
        self.remote_participants = {p.identity: p for p in present}
        self.listeners: dict[str, list[Callable[..., None]]] = {}

    def on(self, event: str, listener: Callable[..., None]) -> None:
        self.listeners.setdefault(event, []).append(listener)

    def off(self, event: str, listener: Callable[..., None]) -> None:
        self.listeners[event].remove(listener)

    def emit(self, event: str, *args: Any) -> None:
        for listener in list(self.listeners.get(event, [])):
            listener(*args)

    def listening(self) -> int:
        return sum(len(ls) for ls in self.listeners.values())


def grant(identity: str = "user-1", key: str = KEY) -> DispatchGrant:
    return DispatchGrant.parse(
        json.dumps(
            {
                "apiKey": key,
                "identity": identity,
                "agentToken": "a.b.c",
                "sessionId": "s_" + "0" * 48,
                "expiresAt": 1_900_000_000,
            }
        )
    )


async def test_the_dispatched_user_is_served_and_no_one_else() -> None:
    other_user = remote(json.dumps({"apiKey": OTHER}), name="user-2")
    same_name_other_key = remote(json.dumps({"apiKey": OTHER}), name="user-1")
    room = Room(other_user, same_name_other_key)
    waiting = asyncio.ensure_future(wait_for_user(cast(rtc.Room, room), grant()))
    await asyncio.sleep(0)
    room.emit("participant_connected", remote(json.dumps({"apiKey": KEY}), AGENT, "user-1"))
    await asyncio.sleep(0)
    assert not waiting.done()
    user = remote(json.dumps({"apiKey": KEY}), name="user-1")
    room.emit("participant_metadata_changed", user, "", "")
    assert await asyncio.wait_for(waiting, 1) is user
    assert room.listening() == 0


async def test_a_user_already_in_the_room_is_served_at_once() -> None:
    user = remote(json.dumps({"apiKey": KEY}), name="user-1")
    room = Room(user)
    assert await asyncio.wait_for(wait_for_user(cast(rtc.Room, room), grant()), 1) is user
    assert room.listening() == 0


async def test_the_first_keyed_participant_is_found_when_its_key_arrives() -> None:
    room = Room(remote("", name="observer"))
    waiting = asyncio.ensure_future(wait_for_keyed_participant(cast(rtc.Room, room)))
    await asyncio.sleep(0)
    assert not waiting.done()
    tab = remote(json.dumps({"apiKey": KEY}), name="tab")
    room.emit("participant_metadata_changed", tab, "", "")
    assert await asyncio.wait_for(waiting, 1) == (tab, KEY)
    assert room.listening() == 0


WAITS: list[tuple[Callable[[rtc.Room], Awaitable[object]], str]] = [
    (lambda room: wait_for_user(room, grant()), "the user joined"),
    (wait_for_keyed_participant, "a user with a key joined"),
]


@pytest.mark.parametrize(("wait", "awaited"), WAITS)
async def test_a_room_that_disconnects_first_ends_the_wait(
    wait: Callable[[rtc.Room], Awaitable[object]], awaited: str
) -> None:
    room = Room()
    waiting = asyncio.ensure_future(wait(cast(rtc.Room, room)))
    await asyncio.sleep(0)
    room.emit("connection_state_changed", rtc.ConnectionState.CONN_DISCONNECTED)
    with pytest.raises(RuntimeError, match=f"disconnected before {awaited}"):
        await asyncio.wait_for(waiting, 1)
    assert room.listening() == 0
