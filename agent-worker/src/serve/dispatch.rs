//! The agent of each user: when a participant with a key joins a room, the worker mints a
//! session token for that key alone (its credential at the relay) and asks LiveKit to dispatch
//! the agent named `WORKER_AGENT_NAME` into that room, with the token in the dispatch's
//! metadata (which the agent's job reads and the room's participants never see). The agent
//! serves that user and can reach no other tab; it holds no secret of the relay's.

use std::sync::Arc;
use std::time::Duration;

use livekit_api::services::agent_dispatch::AgentDispatchClient;
use relay_wire::Fp;
use relay_wire::session::SessionRequest;
use serde::Serialize;

use crate::client::RelayClient;

/// Bound on the dispatch request.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

/// What a dispatched agent's job reads from its metadata.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DispatchMetadata<'a> {
    /// The user's routing key.
    pub api_key: &'a str,
    /// The user's LiveKit identity: the participant the agent serves.
    pub identity: &'a str,
    /// A session token for that key only.
    pub agent_token: &'a str,
    /// Its session (ended when the user leaves, with the key).
    pub session_id: &'a str,
    /// Its expiry, Unix seconds.
    pub expires_at: u64,
}

/// Dispatches the named agent for each user; cheap to clone.
#[derive(Clone)]
pub struct Dispatcher {
    agent_name: Arc<str>,
    livekit: Arc<AgentDispatchClient>,
    relay: RelayClient,
}

impl Dispatcher {
    /// `livekit_url`: the LiveKit server's HTTP(S) base URL.
    pub fn new(
        agent_name: &str,
        livekit_url: &str,
        api_key: &str,
        api_secret: &relay_wire::Secret,
        relay: RelayClient,
    ) -> Self {
        let livekit = AgentDispatchClient::with_api_key(livekit_url, api_key, api_secret.expose())
            .with_failover(false)
            .with_request_timeout(REQUEST_TIMEOUT);
        Dispatcher {
            agent_name: agent_name.into(),
            livekit: Arc::new(livekit),
            relay,
        }
    }

    /// Mints the user's session token and dispatches the agent into `room` for them, in a
    /// task of its own (a webhook is answered at once); failures are logged.
    pub fn dispatch(&self, key: &str, room: &str, identity: &str) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let this = self.clone();
        let (key, room, identity) = (key.to_owned(), room.to_owned(), identity.to_owned());
        runtime.spawn(async move {
            if let Err(cause) = this.dispatch_now(&key, &room, &identity).await {
                tracing::warn!(key = %Fp(&key), room, cause, "agent not dispatched");
            }
        });
    }

    async fn dispatch_now(&self, key: &str, room: &str, identity: &str) -> Result<(), String> {
        // One agent per user: a dispatch of ours for this user may be there already (a worker
        // that restarted without its state file reads the rooms again).
        let existing = self
            .livekit
            .list_dispatch(room)
            .await
            .map_err(|e| format!("LiveKit's dispatches could not be read: {e}"))?;
        let served = existing.iter().any(|d| {
            *d.agent_name == *self.agent_name
                && serde_json::from_str::<serde_json::Value>(&d.metadata)
                    .is_ok_and(|m| m["apiKey"] == key && m["identity"] == identity)
        });
        if served {
            tracing::debug!(key = %Fp(key), room, "the user's agent is dispatched already");
            return Ok(());
        }
        let request = SessionRequest {
            room_name: Some(room.to_owned()),
            identity: Some(identity.to_owned()),
            ..SessionRequest::for_key(key)
        };
        let session = self
            .relay
            .mint_session(&request)
            .await
            .map_err(|e| format!("no session token: {e}"))?;
        let metadata = serde_json::to_string(&DispatchMetadata {
            api_key: key,
            identity,
            agent_token: &session.token,
            session_id: &session.session_id,
            expires_at: session.expires_at,
        })
        .map_err(|e| e.to_string())?;
        let dispatch = self
            .livekit
            .create_dispatch(livekit_protocol::CreateAgentDispatchRequest {
                agent_name: self.agent_name.to_string(),
                room: room.to_owned(),
                metadata,
                ..Default::default()
            })
            .await
            .map_err(|e| format!("LiveKit refused the dispatch: {e}"))?;
        tracing::info!(
            key = %Fp(key),
            room,
            identity,
            agent = %self.agent_name,
            dispatch = dispatch.id,
            session = %Fp(&session.session_id),
            "agent dispatched for the user"
        );
        Ok(())
    }
}
