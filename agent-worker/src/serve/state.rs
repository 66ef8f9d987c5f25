//! What every surface of `agent-worker serve` shares: the worker, the credentials it accepts
//! (digests of the agent secrets and of Vapi's, LiveKit's webhook verifier), who may reach the
//! MCP endpoint (and its sessions, counted in the metrics), what operators see (`/debug`, its
//! trace links), the state file of open LiveKit sessions, and the shutdown signal.

use axum::http::{HeaderMap, header};
use livekit_api::access_token::TokenVerifier;
use livekit_api::webhooks::WebhookReceiver;
use relay_wire::{Secret, headers, is_api_key};
use sha2::{Digest, Sha256};
use tokio_util::sync::CancellationToken;

use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;

use super::mcp::McpConfig;
use super::rooms::{self, StateFile};
use crate::Worker;

pub struct ServeState {
    pub worker: Worker,
    pub(super) receiver: WebhookReceiver,
    vapi_secret: Option<[u8; 32]>,
    agent_secrets: Vec<[u8; 32]>,
    state_file: Option<StateFile>,
    pub(super) mcp: McpConfig,
    /// The MCP endpoint's sessions.
    pub(super) mcp_sessions: std::sync::Arc<LocalSessionManager>,
    /// What operators see: the `/debug` page (off by default) and its link to a trace viewer.
    pub(super) debug: DebugConfig,
    /// Fired when the server stops: ends the MCP sessions and their open streams.
    pub(super) shutdown: CancellationToken,
}

/// The `/debug` page's settings (`WORKER_DEBUG_PAGE`, `WORKER_TRACE_LINK`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DebugConfig {
    pub page: bool,
    /// `https://…{traceId}…`: where a trace id links to.
    pub trace_link: Option<String>,
}

fn digest(s: &str) -> [u8; 32] {
    Sha256::digest(s.as_bytes()).into()
}

/// Constant-time check of a presented secret against a known digest.
fn matches(known: &[u8; 32], presented: &str) -> bool {
    use subtle::ConstantTimeEq;
    bool::from(known.ct_eq(&digest(presented)))
}

/// The credential of an `Authorization: Bearer …` header.
pub(super) fn bearer(headers: &HeaderMap) -> Option<&str> {
    headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(relay_wire::headers::bearer)
}

/// The tab's routing key from `X-Voice-Agent-Key`.
pub fn routing_key(headers: &HeaderMap) -> Result<String, &'static str> {
    let value = headers
        .get(headers::VOICE_AGENT_KEY)
        .ok_or("the X-Voice-Agent-Key header with the tab's key (va_…) is missing")?;
    let key = value
        .to_str()
        .map(str::trim)
        .map_err(|_| "X-Voice-Agent-Key is not a key (va_ and 64 lowercase hex characters)")?;
    if is_api_key(key) {
        Ok(key.to_owned())
    } else {
        Err("X-Voice-Agent-Key is not a key (va_ and 64 lowercase hex characters)")
    }
}

impl ServeState {
    pub fn new(
        worker: Worker,
        livekit_key: &str,
        livekit_secret: &Secret,
        vapi_secret: Option<&Secret>,
        agent_secrets: &[Secret],
    ) -> Self {
        ServeState {
            worker,
            receiver: WebhookReceiver::new(TokenVerifier::with_api_key(
                livekit_key,
                livekit_secret.expose(),
            )),
            vapi_secret: vapi_secret.map(|s| digest(s.expose())),
            agent_secrets: agent_secrets.iter().map(|s| digest(s.expose())).collect(),
            state_file: None,
            mcp: McpConfig::default(),
            mcp_sessions: Default::default(),
            debug: DebugConfig::default(),
            shutdown: CancellationToken::new(),
        }
    }

    /// Turns the `/debug` page on or off, with its trace links.
    pub fn with_debug(mut self, debug: DebugConfig) -> Self {
        self.debug = debug;
        self
    }

    /// True when the request carries the operators' credential: what `/sessions`, the
    /// timelines and `/debug` need. Every operator route asks here, so the credential changes
    /// in one place.
    pub fn operator_authorized(&self, headers: &HeaderMap) -> bool {
        self.agent_authorized(headers)
    }

    /// Who may reach the MCP endpoint (hosts and origins).
    pub fn with_mcp(mut self, config: McpConfig) -> Self {
        self.mcp = config;
        self
    }

    /// Keeps the open LiveKit sessions in `file`, and opens the ones it kept from the last run
    /// (the first read of the rooms closes those whose participant is gone).
    pub fn with_state_file(mut self, file: StateFile) -> Self {
        for kept in file.load() {
            self.worker
                .sessions
                .open(&kept.key, &kept.room, &kept.identity, rooms::LIVEKIT, true);
        }
        self.state_file = Some(file);
        self
    }

    /// Writes the open LiveKit sessions to the state file, when there is one.
    pub fn persist(&self) {
        if let Some(file) = &self.state_file {
            let kept: Vec<rooms::Kept> = self
                .worker
                .sessions
                .from_source(rooms::LIVEKIT)
                .into_iter()
                .map(|(key, room, identity)| rooms::Kept {
                    key,
                    room,
                    identity,
                })
                .collect();
            file.save(&kept);
        }
    }

    /// True when the request carries one of the agent secrets as its Bearer credential (each
    /// compared in constant time).
    pub fn agent_authorized(&self, headers: &HeaderMap) -> bool {
        bearer(headers).is_some_and(|p| {
            self.agent_secrets
                .iter()
                .fold(false, |found, known| found | matches(known, p))
        })
    }

    /// True when Vapi's secret is configured and the request carries it (`X-Vapi-Secret`, or a
    /// Bearer credential).
    pub fn vapi_authorized(&self, headers: &HeaderMap) -> bool {
        let Some(known) = &self.vapi_secret else {
            return false;
        };
        let presented = headers
            .get("x-vapi-secret")
            .and_then(|v| v.to_str().ok())
            .or_else(|| bearer(headers));
        presented.is_some_and(|p| matches(known, p))
    }

    /// True when the Vapi webhook is turned on.
    pub fn vapi_configured(&self) -> bool {
        self.vapi_secret.is_some()
    }
}
