"""Reading the tab's key from participant metadata."""

from __future__ import annotations

import json

from livekit import rtc
from livekit.rtc._proto import handle_pb2, participant_pb2

from voice_relay_agent.keys import (
    fingerprint,
    first_keyed,
    is_api_key,
    key_from_metadata,
    key_of_participant,
)

KEY = "va_" + "0123456789abcdef" * 4
OTHER = "va_" + "f" * 64


STANDARD = rtc.ParticipantKind.PARTICIPANT_KIND_STANDARD
AGENT = rtc.ParticipantKind.PARTICIPANT_KIND_AGENT


def owned(
    metadata: str, kind: rtc.ParticipantKind.ValueType = STANDARD, name: str = "u"
) -> participant_pb2.OwnedParticipant:
    info = participant_pb2.ParticipantInfo(
        sid=f"PA_{name}", identity=name, name=name, metadata=metadata, kind=kind
    )
    return participant_pb2.OwnedParticipant(handle=handle_pb2.FfiOwnedHandle(id=0), info=info)


def remote(
    metadata: str, kind: rtc.ParticipantKind.ValueType = STANDARD, name: str = "u"
) -> rtc.RemoteParticipant:
    return rtc.RemoteParticipant(owned(metadata, kind, name))


def test_is_api_key() -> None:
    assert is_api_key(KEY)
    assert not is_api_key(KEY.upper().replace("VA_", "va_"))
    assert not is_api_key(KEY[:-1])
    assert not is_api_key(KEY + "0")
    assert not is_api_key("vb_" + KEY[3:])
    assert not is_api_key(None)
    assert not is_api_key(7)


def test_key_from_metadata_accepts_only_valid_keys() -> None:
    assert key_from_metadata(json.dumps({"apiKey": KEY})) == KEY
    assert key_from_metadata(json.dumps({"apiKey": KEY, "other": 1})) == KEY
    for metadata in (
        None,
        "",
        "not json",
        json.dumps([KEY]),
        json.dumps(KEY),
        json.dumps({"apikey": KEY}),
        json.dumps({"apiKey": KEY.upper()}),
        json.dumps({"apiKey": KEY + " "}),
        json.dumps({"apiKey": "va_123"}),
        json.dumps({"apiKey": 12}),
    ):
        assert key_from_metadata(metadata) is None, metadata


def test_participants_agents_and_the_local_one_are_ignored() -> None:
    meta = json.dumps({"apiKey": KEY})
    assert key_of_participant(remote(meta)) == KEY
    assert key_of_participant(remote(meta, AGENT)) is None
    local = rtc.LocalParticipant(None, owned(json.dumps({"apiKey": OTHER}), name="agent"))  # type: ignore[arg-type]
    assert key_of_participant(local) is None
    assert key_of_participant(remote("{}")) is None


def test_first_keyed_skips_participants_without_a_valid_key() -> None:
    people = [
        remote(json.dumps({"apiKey": OTHER}), AGENT, "bot"),
        remote("", name="observer"),
        remote(json.dumps({"apiKey": "va_nope"}), name="broken"),
        remote(json.dumps({"apiKey": KEY}), name="tab"),
    ]
    hit = first_keyed(people)
    assert hit is not None
    participant, key = hit
    assert participant.identity == "tab"
    assert key == KEY
    assert first_keyed(people[:3]) is None


def test_fingerprint_is_8_hex_and_not_the_key() -> None:
    fp = fingerprint(KEY)
    assert len(fp) == 8
    int(fp, 16)
    assert fp not in KEY
    assert fp == fingerprint(KEY)
    assert fp != fingerprint(OTHER)
