//! What every surface of `agent-worker serve` shares: the worker, who may call (agents with
//! their session tokens through the [`Keyring`], operators with their secret, Vapi with its
//! signing secret, LiveKit with its webhook signature), the MCP sessions' owners, who is
//! dispatched for a user, the state file of open LiveKit sessions, and the shutdown signal.

use std::sync::Arc;

use axum::extract::FromRequestParts;
use axum::http::HeaderMap;
use axum::http::request::Parts;
use livekit_api::access_token::TokenVerifier;
use livekit_api::webhooks::WebhookReceiver;
use relay_wire::Secret;
use sha2::{Digest, Sha256};
use tokio_util::sync::CancellationToken;

use super::auth::{self, Agent, Keyring, bearer};
use super::dispatch::Dispatcher;
use super::error::ApiError;
use super::kept::{self, StateFile};
use super::mcp::config::McpConfig;
use super::mcp::owners::Owners;
use super::signature::VapiSigning;
use crate::Worker;

pub struct ServeState {
    pub worker: Worker,
    pub(super) receiver: WebhookReceiver,
    pub keyring: Keyring,
    pub(super) vapi: Option<VapiSigning>,
    /// SHA-256 of each secret of the operators' credential.
    operators: Vec<[u8; 32]>,
    pub(super) dispatcher: Option<Dispatcher>,
    state_file: Option<StateFile>,
    pub(super) mcp: McpConfig,
    /// Which agent session opened each MCP session.
    pub(super) mcp_owners: Owners,
    /// Fired when the server stops: ends the MCP sessions and their open streams.
    pub(super) shutdown: CancellationToken,
}

fn digest(s: &str) -> [u8; 32] {
    Sha256::digest(s.as_bytes()).into()
}

impl ServeState {
    pub fn new(
        worker: Worker,
        livekit_key: &str,
        livekit_secret: &Secret,
        vapi_secret: Option<&Secret>,
        operator_secrets: &[Secret],
    ) -> Self {
        let keyring = Keyring::new(worker.client.clone());
        ServeState {
            worker,
            receiver: WebhookReceiver::new(TokenVerifier::with_api_key(
                livekit_key,
                livekit_secret.expose(),
            )),
            keyring,
            vapi: vapi_secret.map(VapiSigning::new),
            operators: operator_secrets
                .iter()
                .map(|s| digest(s.expose()))
                .collect(),
            dispatcher: None,
            state_file: None,
            mcp: McpConfig::default(),
            mcp_owners: Owners::default(),
            shutdown: CancellationToken::new(),
        }
    }

    /// Who may reach the MCP endpoint (hosts and origins).
    pub fn with_mcp(mut self, config: McpConfig) -> Self {
        self.mcp = config;
        self
    }

    /// Dispatches an agent for each user who joins a room with a key.
    pub fn with_dispatcher(mut self, dispatcher: Dispatcher) -> Self {
        self.dispatcher = Some(dispatcher);
        self
    }

    /// Keeps the open LiveKit sessions in `file`, and opens the ones it kept from the last run
    /// (the first read of the rooms closes those whose participant is gone).
    pub fn with_state_file(mut self, file: StateFile) -> Self {
        for kept in file.load() {
            self.worker
                .sessions
                .open(&kept.key, &kept.room, &kept.identity, kept::LIVEKIT, true);
        }
        self.state_file = Some(file);
        self
    }

    /// Writes the open LiveKit sessions to the state file, when there is one.
    pub fn persist(&self) {
        if let Some(file) = &self.state_file {
            let kept: Vec<kept::Kept> = self
                .worker
                .sessions
                .from_source(kept::LIVEKIT)
                .into_iter()
                .map(|(key, room, identity)| kept::Kept {
                    key,
                    room,
                    identity,
                })
                .collect();
            file.save(&kept);
        }
    }

    /// Forgets what expired: verified tokens, MCP sessions' owners, Vapi's replay memory.
    pub fn sweep(&self) {
        let now = crate::unix_now();
        self.keyring.sweep();
        self.mcp_owners.sweep(now);
        if let Some(vapi) = &self.vapi {
            vapi.sweep(now);
        }
    }

    /// The agent a request comes from (see [`auth::agent`]).
    pub async fn agent(&self, headers: &HeaderMap) -> Result<Agent, ApiError> {
        auth::agent(&self.keyring, headers, |digest| {
            self.worker.sessions.key_of_digest(digest)
        })
        .await
    }

    /// Passes a request carrying one of the operators' secrets as its Bearer credential (each
    /// compared in constant time); `401` otherwise, and always when none is configured.
    pub fn operator(&self, headers: &HeaderMap) -> Result<(), ApiError> {
        use subtle::ConstantTimeEq;
        let presented = bearer(headers).map(digest);
        let known = presented.is_some_and(|p| {
            self.operators
                .iter()
                .fold(false, |found, known| found | bool::from(known.ct_eq(&p)))
        });
        if known {
            Ok(())
        } else {
            Err(ApiError::unauthorized(
                "missing or wrong operators' credential (Authorization: Bearer <RELAY_OPERATOR_SECRET>)",
            ))
        }
    }
}

impl FromRequestParts<Arc<ServeState>> for Agent {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &Arc<ServeState>,
    ) -> Result<Self, ApiError> {
        state.agent(&parts.headers).await
    }
}
