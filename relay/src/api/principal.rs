//! Who is calling the agent API: one check for every route. The Bearer credential is either an
//! agent's session token (verified, its grant cached until it expires) or one of the servers'
//! secrets (the worker's, the operators', the app backend's issuer secret); each route then says
//! what it needs of it ([`Principal::require`]), so no route can forget the check.
//!
//! A missing, forged, expired or foreign credential is `401 unauthorized`; a valid one that does
//! not reach what was asked (another key, a tool or scope its token lacks, a server's secret
//! where an agent's token is needed) is `403 forbidden`, decided before anything is looked up,
//! so the answer is the same whether that key exists or not.

use std::sync::Arc;

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::http::{HeaderMap, header};
use relay_wire::Fp;
use relay_wire::session::{Scope, SessionGrant, looks_like_jwt};

use crate::app::{App, ServerRole};
use crate::error::ApiError;
use crate::store::KeyStore;

/// The caller of an agent-API request.
#[derive(Debug, Clone)]
pub(crate) enum Principal {
    /// An agent, with a session token for one key.
    Session(Arc<SessionGrant>),
    /// A server holding one of the relay's secrets.
    Server(ServerRole),
}

impl Principal {
    /// Reads and checks the `Authorization: Bearer …` credential.
    pub(crate) fn of(app: &App, headers: &HeaderMap) -> Result<Principal, ApiError> {
        let presented = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(relay_wire::headers::bearer)
            .ok_or_else(ApiError::unauthorized)?;
        if looks_like_jwt(presented) {
            let now = crate::tokens::unix_now().as_secs();
            return app
                .sessions
                .verify(presented, now)
                .map(Principal::Session)
                .map_err(|err| {
                    tracing::info!(token = %Fp(presented), reason = %err, "session token refused");
                    ApiError::new(relay_wire::ErrorCode::Unauthorized, err.message())
                });
        }
        app.server_role(presented)
            .map(Principal::Server)
            .ok_or_else(ApiError::unauthorized)
    }

    /// Passes a session token for `key` that holds `scope`, or a server credential among
    /// `servers`; anything else is `forbidden`.
    pub(crate) fn require(
        &self,
        key: &str,
        scope: Scope,
        servers: &[ServerRole],
    ) -> Result<(), ApiError> {
        match self {
            Principal::Session(grant) => grant.check(key, scope).map_err(ApiError::forbidden),
            Principal::Server(role) if servers.contains(role) => Ok(()),
            Principal::Server(role) => Err(ApiError::forbidden(format!(
                "the {} credential cannot do this; {}",
                role.name(),
                if servers.is_empty() {
                    "present the agent's session token"
                } else {
                    "present a session token for this key"
                }
            ))),
        }
    }

    /// Passes a server credential among `servers` only (never a session token).
    pub(crate) fn require_server(&self, servers: &[ServerRole]) -> Result<ServerRole, ApiError> {
        match self {
            Principal::Server(role) if servers.contains(role) => Ok(*role),
            Principal::Server(role) => Err(ApiError::forbidden(format!(
                "the {} credential cannot do this",
                role.name()
            ))),
            Principal::Session(_) => Err(ApiError::forbidden(
                "a session token cannot do this: it reaches one key's tab, for listing, calling, \
                 its mode and its status only",
            )),
        }
    }

    /// The caller's session token: a server's credential cannot act on a tab itself.
    pub(crate) fn require_session(&self) -> Result<&Arc<SessionGrant>, ApiError> {
        match self {
            Principal::Session(grant) => Ok(grant),
            Principal::Server(role) => Err(ApiError::forbidden(format!(
                "the {} credential cannot call tools: present the agent's session token \
                 (POST /api/voice-agent/sessions mints one)",
                role.name()
            ))),
        }
    }

    /// The session token's grant, when the caller is an agent.
    pub(crate) fn session(&self) -> Option<&Arc<SessionGrant>> {
        match self {
            Principal::Session(grant) => Some(grant),
            Principal::Server(_) => None,
        }
    }

    /// For a session token, refuses one whose session was ended (a call checks this with its
    /// admission instead).
    pub(crate) async fn still_open(&self, app: &App) -> Result<(), ApiError> {
        if let Principal::Session(grant) = self
            && app.store.session_ended(&grant.session_id).await?
        {
            return Err(ApiError::session_ended());
        }
        Ok(())
    }
}

impl FromRequestParts<Arc<App>> for Principal {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, app: &Arc<App>) -> Result<Self, ApiError> {
        Principal::of(app, &parts.headers)
    }
}
