"""The dispatch grant: read from a job's metadata, refused with a reason that shows no value."""

from __future__ import annotations

import json

import pytest

from voice_relay_agent.dispatch import DispatchGrant

KEY = "va_" + "ef" * 32
TOKEN = "eyJhbGciOiJFZERTQSJ9.eyJzdWIiOiJ4In0.c2ln"


def metadata(**over: object) -> str:
    data: dict[str, object] = {
        "apiKey": KEY,
        "identity": "user-1",
        "agentToken": TOKEN,
        "sessionId": "s_" + "0" * 48,
        "expiresAt": 1_900_000_000,
    }
    data.update(over)
    return json.dumps(data)


def test_a_grant_is_read_and_never_shows_its_secrets() -> None:
    grant = DispatchGrant.parse(metadata())
    assert grant.api_key == KEY and grant.identity == "user-1" and grant.agent_token == TOKEN
    shown = repr(grant)
    assert KEY not in shown and TOKEN not in shown and "user-1" in shown
    assert grant.key_fingerprint == grant.key_fingerprint[:8]


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        (None, "no dispatch metadata"),
        ("", "no dispatch metadata"),
        ("[]", "not a JSON object"),
        (metadata(apiKey="va_nope"), "apiKey"),
        (metadata(agentToken="a-server-secret"), "agentToken"),
        (metadata(identity=""), "identity"),
        (metadata(expiresAt="soon"), "expiresAt"),
    ],
)
def test_a_job_without_a_grant_is_refused(raw: str | None, reason: str) -> None:
    with pytest.raises(ValueError, match=reason) as e:
        DispatchGrant.parse(raw)
    assert TOKEN not in str(e.value)
