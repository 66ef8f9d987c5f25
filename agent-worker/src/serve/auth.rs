//! Who is calling the worker: one check for every surface. An agent presents its session token
//! (`Authorization: Bearer …`), which the worker verifies with the relay's public keys (fetched
//! from the relay, cached, fetched again for a key it does not know; it can verify a token but
//! never make one); what a token grants is cached until it expires. The key comes from
//! `X-Voice-Agent-Key`, which must name the token's key, or, without it, from the session the
//! worker follows for the token's key. Operators present `RELAY_OPERATOR_SECRET`.
//!
//! A surface takes an [`Agent`] and states what it needs of it ([`Agent::require`]): a missing,
//! forged, expired or foreign token is `401 unauthorized`; another key, a tool or a scope the
//! token lacks is `403 forbidden`, decided before anything is looked up.

use std::sync::{Arc, RwLock};
use std::time::Duration;

use axum::http::{HeaderMap, StatusCode, header};
use relay_wire::session::{
    GrantCache, Scope, SessionGrant, SessionVerifier, VerifyError, looks_like_jwt,
};
use relay_wire::{ErrorCode, Fp, Secret, headers, is_api_key};
use tokio::time::Instant;

use super::error::ApiError;
use crate::client::RelayClient;
use crate::error::Code;

/// The least time between two fetches of the relay's keys (a token naming an unknown `kid` must
/// not make the worker ask the relay at every request).
const REFETCH_AFTER: Duration = Duration::from_secs(5);

/// An agent acting on one key's session, with the session token its calls carry.
#[derive(Debug, Clone)]
pub struct Agent {
    pub key: String,
    pub token: Secret,
    pub grant: Arc<SessionGrant>,
}

impl Agent {
    /// Passes when the token holds `scope` (it names the key: checked when it was read).
    pub fn require(&self, scope: Scope) -> Result<(), ApiError> {
        self.grant
            .check(&self.key, scope)
            .map_err(|m| ApiError::new(StatusCode::FORBIDDEN, ErrorCode::Forbidden, m))
    }

    /// Passes when the token may use the tool `name`: a mode move needs the `mode` scope, any
    /// other tool `call` and, when the token lists tools, to be among them.
    pub fn require_tool(&self, name: &str, is_move: bool) -> Result<(), ApiError> {
        if is_move {
            return self.require(Scope::Mode);
        }
        self.require(Scope::Call)?;
        if self.grant.allows_tool(name) {
            Ok(())
        } else {
            Err(ApiError::new(
                StatusCode::FORBIDDEN,
                ErrorCode::Forbidden,
                "this session token may not call this tool",
            ))
        }
    }

    /// Whether the token may use `name` (to filter what is offered).
    pub fn may_use(&self, name: &str, is_move: bool) -> bool {
        self.require_tool(name, is_move).is_ok()
    }
}

/// The relay's public keys and the grants of verified tokens.
pub struct Keyring {
    client: RelayClient,
    verifier: RwLock<Option<Arc<SessionVerifier>>>,
    /// When the keys were last asked for; one fetch at a time.
    fetched: tokio::sync::Mutex<Option<Instant>>,
    grants: GrantCache,
}

/// Why a token was not accepted.
#[derive(Debug)]
pub enum Refused {
    Token(VerifyError),
    /// The relay's keys could not be fetched.
    Unavailable,
}

impl Keyring {
    pub fn new(client: RelayClient) -> Keyring {
        Keyring {
            client,
            verifier: RwLock::new(None),
            fetched: tokio::sync::Mutex::new(None),
            grants: GrantCache::default(),
        }
    }

    fn current(&self) -> Option<Arc<SessionVerifier>> {
        self.verifier
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Fetches the relay's keys, unless they were fetched less than [`REFETCH_AFTER`] ago (and
    /// are there). True when the keys are there afterwards.
    pub async fn fetch(&self) -> bool {
        let mut last = self.fetched.lock().await;
        if self.current().is_some() && last.is_some_and(|at| at.elapsed() < REFETCH_AFTER) {
            return true;
        }
        *last = Some(Instant::now());
        match self.client.session_keys().await {
            Ok(jwks) => match SessionVerifier::from_jwks(&jwks) {
                Ok(verifier) => {
                    tracing::info!(keys = ?verifier, "the relay's session keys are known");
                    *self.verifier.write().unwrap_or_else(|p| p.into_inner()) =
                        Some(Arc::new(verifier));
                    true
                }
                Err(e) => {
                    tracing::warn!(cause = %e, "the relay's session keys are not usable");
                    self.current().is_some()
                }
            },
            Err(e) => {
                tracing::warn!(cause = %e, "cannot fetch the relay's session keys");
                self.current().is_some()
            }
        }
    }

    /// What `token` grants: cached, or verified with the relay's keys (fetched again once when
    /// the token names a key not known yet).
    pub async fn verify(&self, token: &str) -> Result<Arc<SessionGrant>, Refused> {
        let now = crate::unix_now();
        if let Some(verifier) = self.current() {
            match self
                .grants
                .get_or_verify(token, now, |t| verifier.verify(t))
            {
                Err(VerifyError::UnknownKid) => {}
                other => return other.map_err(Refused::Token),
            }
        }
        if !self.fetch().await {
            return Err(Refused::Unavailable);
        }
        let verifier = self.current().ok_or(Refused::Unavailable)?;
        self.grants
            .get_or_verify(token, now, |t| verifier.verify(t))
            .map_err(Refused::Token)
    }

    /// Drops the grants that expired.
    pub fn sweep(&self) {
        self.grants.sweep(crate::unix_now());
    }
}

/// The credential of an `Authorization: Bearer …` header.
pub(super) fn bearer(headers: &HeaderMap) -> Option<&str> {
    headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(relay_wire::headers::bearer)
}

/// The key `X-Voice-Agent-Key` names, when the header is there.
fn named_key(headers: &HeaderMap) -> Result<Option<String>, ApiError> {
    let Some(value) = headers.get(headers::VOICE_AGENT_KEY) else {
        return Ok(None);
    };
    let key = value.to_str().map(str::trim).unwrap_or_default();
    // An empty header (a proxy that forwards one it has no value for) is no header.
    if value.is_empty() {
        return Ok(None);
    }
    if is_api_key(key) {
        Ok(Some(key.to_owned()))
    } else {
        Err(ApiError::invalid(
            "X-Voice-Agent-Key is not a key (va_ and 64 lowercase hex characters)",
        ))
    }
}

/// The agent a request comes from: its session token verified, its key named (or known).
/// `key_of_digest` finds the key of a session the worker follows.
pub async fn agent(
    keyring: &Keyring,
    headers: &HeaderMap,
    key_of_digest: impl FnOnce(&str) -> Option<String>,
) -> Result<Agent, ApiError> {
    let token = bearer(headers).ok_or_else(|| {
        ApiError::unauthorized(
            "Authorization: Bearer <session token> is missing (a token for the user's key: \
             POST /api/voice-agent/sessions at the relay, or the agentToken of its /token)",
        )
    })?;
    if !looks_like_jwt(token) {
        return Err(ApiError::unauthorized(
            "the credential is not a session token: the worker's agent surfaces take a session \
             token for one key, never a server's secret",
        ));
    }
    let grant = match keyring.verify(token).await {
        Ok(grant) => grant,
        Err(Refused::Token(err)) => {
            tracing::info!(token = %Fp(token), reason = %err, "session token refused");
            return Err(ApiError::unauthorized(err.message()));
        }
        Err(Refused::Unavailable) => {
            return Err(ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                Code::RelayUnreachable,
                "the relay's session keys cannot be fetched to check the token; try again",
            ));
        }
    };
    let key = match named_key(headers)? {
        Some(key) if grant.names_key(&key) => key,
        Some(_) => {
            return Err(ApiError::new(
                StatusCode::FORBIDDEN,
                ErrorCode::Forbidden,
                "this session token is for another key",
            ));
        }
        // Without the header, the key is the one of the session the worker follows for the
        // token's key; a key it follows no session of is unknown here.
        None => key_of_digest(&grant.key_digest).ok_or_else(|| {
            ApiError::new(
                StatusCode::NOT_FOUND,
                ErrorCode::UnknownKey,
                "this worker follows no session of the token's key: name the key in \
                 X-Voice-Agent-Key",
            )
        })?,
    };
    Ok(Agent {
        key,
        token: Secret::new(token),
        grant,
    })
}
