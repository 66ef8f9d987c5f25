//! Rooms as the LiveKit server knows them, read through its RoomService API at start and every
//! few seconds, so that a worker restart or a lost webhook loses no session: a participant with
//! a key that is in a room has a session, and a session whose participant is in no room any
//! more is closed and its key revoked. The keys of the open LiveKit sessions are also kept in a
//! state file (when configured), so that a participant that left while the worker was down is
//! noticed when it comes back.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use livekit_api::services::room::RoomClient;
use relay_wire::Fp;

use super::kept::LIVEKIT;
use super::livekit::{joined, key_of, revoke};
use super::state::ServeState;

/// Bound on one RoomService request.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

/// What one read of the rooms changed.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct SyncReport {
    pub rooms: usize,
    pub participants_with_keys: usize,
    pub opened: usize,
    pub closed: usize,
}

/// Reads every room and its participants, opens the sessions that are missing and closes (and
/// revokes) the LiveKit sessions whose participant is gone.
pub async fn sync_once(state: &ServeState, client: &RoomClient) -> anyhow::Result<SyncReport> {
    let rooms = client.list_rooms(Vec::new()).await?;
    let mut present: HashMap<String, (String, String)> = HashMap::new();
    for room in &rooms {
        for p in client.list_participants(&room.name).await? {
            if let Some(key) = key_of(Some(&p)) {
                present.insert(key, (room.name.clone(), p.identity.clone()));
            }
        }
    }
    let sessions = &state.worker.sessions;
    let mut report = SyncReport {
        rooms: rooms.len(),
        participants_with_keys: present.len(),
        ..SyncReport::default()
    };
    for (key, (room, identity)) in &present {
        if joined(state, key, room, identity) {
            report.opened += 1;
        }
    }
    for (key, room, _) in sessions.from_source(LIVEKIT) {
        if !present.contains_key(&key) {
            tracing::info!(key = %Fp(&key), room, "participant is in no room any more");
            sessions.end(&key, "participant_gone");
            revoke(state, &key).await;
            report.closed += 1;
        }
    }
    if report.opened + report.closed > 0 {
        state.persist();
    }
    Ok(report)
}

/// Reads the rooms every `every` until the task is dropped. A failure is logged when it starts
/// and when it ends, not at every round.
pub async fn keep_in_sync(state: Arc<ServeState>, client: RoomClient, every: Duration) {
    let mut failing = false;
    loop {
        match tokio::time::timeout(REQUEST_TIMEOUT * 4, sync_once(&state, &client)).await {
            Ok(Ok(report)) => {
                if failing {
                    tracing::info!("LiveKit's RoomService answers again");
                    failing = false;
                }
                if report.opened + report.closed > 0 {
                    tracing::info!(
                        rooms = report.rooms,
                        with_keys = report.participants_with_keys,
                        opened = report.opened,
                        closed = report.closed,
                        "sessions brought in line with LiveKit's rooms"
                    );
                }
            }
            Ok(Err(e)) if !failing => {
                tracing::warn!(cause = %e, "cannot read LiveKit's rooms; sessions follow webhooks only until it answers");
                failing = true;
            }
            Err(_) if !failing => {
                tracing::warn!(
                    "LiveKit's RoomService did not answer in time; sessions follow webhooks only until it answers"
                );
                failing = true;
            }
            _ => {}
        }
        tokio::time::sleep(every).await;
    }
}

/// A RoomService client for `url` (HTTP base) with bounded requests.
pub fn room_client(url: &str, key: &str, secret: &relay_wire::Secret) -> RoomClient {
    RoomClient::with_api_key(url, key, secret.expose())
        .with_failover(false)
        .with_request_timeout(REQUEST_TIMEOUT)
}
