"""What an agent is dispatched with: the one user it serves, and a session token for that
user's key alone.

The agent worker asks LiveKit to dispatch the agent (explicit dispatch, by agent name) into
the room of each user who joins with a key, with this JSON as the job's metadata::

    {"apiKey": "va_…", "identity": "…", "agentToken": "…", "sessionId": "s_…", "expiresAt": 0}

The room's participants never see a job's metadata. The token reaches that key's tab only
(listing, calling, the mode, the status; never revoking), and dies when the user leaves (the
worker revokes the key). An agent holds no other credential of the relay's.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from .keys import fingerprint, is_api_key, key_of_participant, wait_for_participant

if TYPE_CHECKING:
    from livekit import rtc


@dataclass(frozen=True)
class DispatchGrant:
    """The user an agent serves and its session token (never shown by ``repr``)."""

    api_key: str = field(repr=False)
    identity: str
    agent_token: str = field(repr=False)
    session_id: str = field(repr=False)
    expires_at: int

    @property
    def key_fingerprint(self) -> str:
        return fingerprint(self.api_key)

    @classmethod
    def parse(cls, metadata: str | None) -> DispatchGrant:
        """The grant in a job's metadata; ``ValueError`` saying what is missing (never a value)."""
        try:
            data = json.loads(metadata or "")
        except ValueError:
            raise ValueError(
                "the job carries no dispatch metadata: the agent is dispatched by the agent "
                "worker (WORKER_AGENT_NAME) for one user"
            ) from None
        if not isinstance(data, dict):
            raise ValueError("the job's metadata is not a JSON object")
        key = data.get("apiKey")
        identity = data.get("identity")
        token = data.get("agentToken")
        session = data.get("sessionId")
        expires = data.get("expiresAt")
        problems = [
            name
            for name, ok in (
                ("apiKey", is_api_key(key)),
                ("identity", isinstance(identity, str) and bool(identity)),
                ("agentToken", isinstance(token, str) and token.count(".") == 2),
                ("sessionId", isinstance(session, str) and session.startswith("s_")),
                ("expiresAt", isinstance(expires, int)),
            )
            if not ok
        ]
        if problems:
            raise ValueError("the job's metadata lacks a valid " + ", ".join(problems))
        assert isinstance(key, str) and isinstance(identity, str)
        assert isinstance(token, str) and isinstance(session, str) and isinstance(expires, int)
        return cls(key, identity, token, session, expires)


async def wait_for_user(room: rtc.Room, grant: DispatchGrant) -> rtc.RemoteParticipant:
    """Waits until the user of ``grant`` is in ``room``: the participant with its identity whose
    metadata carries its key. Anyone else (another user, another agent) is not served.

    Raises ``RuntimeError`` if the room disconnects first; callers bound the wait themselves.
    """

    def pick(participant: rtc.Participant) -> rtc.RemoteParticipant | None:
        from livekit import rtc

        if not isinstance(participant, rtc.RemoteParticipant):
            return None
        if participant.identity != grant.identity:
            return None
        return participant if key_of_participant(participant) == grant.api_key else None

    return await wait_for_participant(room, pick, "the user joined")
