//! Session tokens: the only credential an agent holds. The relay signs them (Ed25519, `kid` in
//! the header) and serves the public keys as a JWKS; the worker verifies them with those keys
//! and cannot mint one. A token names one key by its digest (never the key), the session it
//! belongs to, what it may do ([`Scope`]) and, optionally, which tools it may call; it lives at
//! most as long as the tab's own LiveKit token.
//!
//! The verifier accepts `EdDSA` only, from a key chosen by `kid`: `alg: none`, an HMAC keyed
//! with a public key and a token signed by any other key are all refused, and so are a wrong
//! issuer or audience and an expiry (or not-before) beyond [`LEEWAY_SECS`].

use std::collections::HashMap;
use std::sync::Arc;

use dashmap::DashMap;
use sha2::{Digest, Sha256};

use jsonwebtoken::errors::ErrorKind;
use jsonwebtoken::jwk::{AlgorithmParameters, EllipticCurve, JwkSet};
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde::{Deserialize, Serialize};

/// `iss` of every session token.
pub const SESSION_ISSUER: &str = "voice-relay";
/// `aud` of every session token: the agent surfaces.
pub const SESSION_AUDIENCE: &str = "voice-agent";
/// A session id: `s_`, the key's digest (32 hex characters) and 16 random hex characters, so
/// whoever ends a session by its id names the key it belongs to as well.
pub const SESSION_ID_PREFIX: &str = "s_";
/// Clock skew allowed on `exp` and `nbf`.
pub const LEEWAY_SECS: u64 = 30;
/// Where the relay serves the public keys (a JWKS).
pub const SESSION_KEYS_PATH: &str = "/api/voice-agent/session-keys";
/// Default lifetime of a session token.
pub const DEFAULT_SESSION_TTL_SECS: u64 = 3600;
/// Most tools a token may name.
pub const MAX_TOKEN_TOOLS: usize = 64;

/// The digest a key is named by outside its tab: the first 16 bytes of its SHA-256, in hex (the
/// same digest the relay stores it and rooms its socket under).
pub fn key_digest(key: &str) -> String {
    hex::encode(&Sha256::digest(key.as_bytes())[..16])
}

/// True for a session id: `s_` + 48 lowercase hex characters ([`SESSION_ID_PREFIX`]).
pub fn is_session_id(id: &str) -> bool {
    id.len() == SESSION_ID_PREFIX.len() + 48
        && id.starts_with(SESSION_ID_PREFIX)
        && is_lower_hex(&id[SESSION_ID_PREFIX.len()..])
}

/// The digest of the key a session id belongs to; `None` when `id` is not a session id.
pub fn session_key_digest(id: &str) -> Option<&str> {
    is_session_id(id).then(|| &id[SESSION_ID_PREFIX.len()..SESSION_ID_PREFIX.len() + 32])
}

/// A new session id for the key whose digest is `digest`, with 8 random bytes of `random`.
pub fn new_session_id(digest: &str, random: [u8; 8]) -> String {
    format!("{SESSION_ID_PREFIX}{digest}{}", hex::encode(random))
}

fn is_lower_hex(s: &str) -> bool {
    s.bytes()
        .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// What a session token may do. Revoking a key is never among them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// See the session's tools (the worker's offer, MCP `tools/list`).
    List,
    /// Call a tool on the tab, and cancel such a call.
    Call,
    /// Change the session's mode.
    Mode,
    /// Read the key's status.
    Status,
}

impl Scope {
    pub const ALL: [Scope; 4] = [Scope::List, Scope::Call, Scope::Mode, Scope::Status];

    pub fn as_str(self) -> &'static str {
        match self {
            Scope::List => "list",
            Scope::Call => "call",
            Scope::Mode => "mode",
            Scope::Status => "status",
        }
    }

    pub fn parse(value: &str) -> Option<Scope> {
        Scope::ALL.into_iter().find(|s| s.as_str() == value)
    }

    fn bit(self) -> u8 {
        1 << (self as u8)
    }
}

/// A set of [`Scope`]s; on the wire, their names separated by spaces (`"list call"`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Scopes(u8);

impl Scopes {
    pub fn all() -> Scopes {
        Scopes(Scope::ALL.iter().fold(0, |bits, s| bits | s.bit()))
    }

    pub fn contains(self, scope: Scope) -> bool {
        self.0 & scope.bit() != 0
    }

    pub fn with(self, scope: Scope) -> Scopes {
        Scopes(self.0 | scope.bit())
    }

    pub fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// From names; `None` when one is not a scope (`revoke` included).
    pub fn from_names<'a>(names: impl IntoIterator<Item = &'a str>) -> Option<Scopes> {
        names.into_iter().try_fold(Scopes::default(), |set, name| {
            Some(set.with(Scope::parse(name)?))
        })
    }

    /// The names, in [`Scope::ALL`]'s order, separated by spaces.
    pub fn to_claim(self) -> String {
        Scope::ALL
            .iter()
            .filter(|s| self.contains(**s))
            .map(|s| s.as_str())
            .collect::<Vec<_>>()
            .join(" ")
    }
}

/// The claims of a session token.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionClaims {
    pub iss: String,
    pub aud: String,
    /// The key's digest ([`key_digest`]).
    pub sub: String,
    /// The session ([`is_session_id`]).
    pub sid: String,
    /// The LiveKit room of the key's tab, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub room: Option<String>,
    /// The LiveKit identity of the key's user, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub identity: Option<String>,
    /// [`Scopes`], space-separated.
    pub scope: String,
    /// The only tools it may call; absent for any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tools: Option<Vec<String>>,
    pub iat: u64,
    pub nbf: u64,
    pub exp: u64,
}

/// What a verified session token grants.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionGrant {
    /// The key's digest.
    pub key_digest: String,
    pub session_id: String,
    pub scopes: Scopes,
    pub tools: Option<Vec<String>>,
    pub room: Option<String>,
    pub identity: Option<String>,
    /// Expiry, Unix seconds.
    pub exp: u64,
}

impl SessionGrant {
    /// True when the token names `key` (compared by digest).
    pub fn names_key(&self, key: &str) -> bool {
        key_digest(key) == self.key_digest
    }

    /// True when the token may call `tool` (a token without a tool list may call any).
    pub fn allows_tool(&self, tool: &str) -> bool {
        self.tools
            .as_ref()
            .is_none_or(|tools| tools.iter().any(|t| t == tool))
    }

    /// Why this token may not do `scope` on `key` (another key, or a scope it lacks): a sentence
    /// for the 403 answer, the same whether that key exists or not.
    pub fn check(&self, key: &str, scope: Scope) -> Result<(), String> {
        if !self.names_key(key) {
            return Err("this session token is for another key".to_owned());
        }
        if !self.scopes.contains(scope) {
            return Err(format!(
                "this session token may not {} (its scope: {})",
                scope_verb(scope),
                self.scopes.to_claim()
            ));
        }
        Ok(())
    }
}

fn scope_verb(scope: Scope) -> &'static str {
    match scope {
        Scope::List => "list tools",
        Scope::Call => "call tools",
        Scope::Mode => "change the mode",
        Scope::Status => "read the key's status",
    }
}

/// Why a presented session token is refused (each is `401 unauthorized`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VerifyError {
    /// Not a JWT, or claims of the wrong shape.
    Malformed,
    /// Another algorithm than EdDSA (`none`, HS256, …).
    WrongAlgorithm,
    /// No `kid`, or one this verifier does not know.
    UnknownKid,
    BadSignature,
    Expired,
    NotYetValid,
    WrongIssuer,
    WrongAudience,
}

impl VerifyError {
    pub fn message(&self) -> &'static str {
        match self {
            VerifyError::Malformed => "the session token is not a valid token",
            VerifyError::WrongAlgorithm => "the session token is not signed with EdDSA",
            VerifyError::UnknownKid => {
                "the session token names a signing key this server does not know"
            }
            VerifyError::BadSignature => "the session token's signature does not verify",
            VerifyError::Expired => "the session token has expired",
            VerifyError::NotYetValid => "the session token is not valid yet",
            VerifyError::WrongIssuer => "the session token was not issued by this relay",
            VerifyError::WrongAudience => "the session token is not meant for the agent surfaces",
        }
    }
}

impl std::fmt::Display for VerifyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.message())
    }
}

/// True when `credential` has the shape of a JWT (three dot-separated parts): how a surface
/// tells a session token from a server's secret.
pub fn looks_like_jwt(credential: &str) -> bool {
    credential.bytes().filter(|b| *b == b'.').count() == 2
}

/// Verifies session tokens with the relay's public keys, chosen by `kid`.
#[derive(Clone)]
pub struct SessionVerifier {
    keys: HashMap<String, DecodingKey>,
    validation: Validation,
}

impl std::fmt::Debug for SessionVerifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut kids: Vec<&String> = self.keys.keys().collect();
        kids.sort();
        write!(f, "SessionVerifier({kids:?})")
    }
}

impl SessionVerifier {
    /// From `(kid, DecodingKey)` pairs (Ed25519 public keys).
    pub fn new(keys: impl IntoIterator<Item = (String, DecodingKey)>) -> SessionVerifier {
        let mut validation = Validation::new(Algorithm::EdDSA);
        validation.leeway = LEEWAY_SECS;
        validation.validate_nbf = true;
        validation.set_audience(&[SESSION_AUDIENCE]);
        validation.set_issuer(&[SESSION_ISSUER]);
        validation.set_required_spec_claims(&["exp", "nbf", "iss", "aud", "sub"]);
        SessionVerifier {
            keys: keys.into_iter().collect(),
            validation,
        }
    }

    /// From the relay's JWKS: its Ed25519 keys with a `kid` (any other key is skipped).
    pub fn from_jwks(jwks: &JwkSet) -> Result<SessionVerifier, String> {
        let mut keys = Vec::new();
        for jwk in &jwks.keys {
            let Some(kid) = jwk.common.key_id.clone() else {
                continue;
            };
            let AlgorithmParameters::OctetKeyPair(okp) = &jwk.algorithm else {
                continue;
            };
            if okp.curve != EllipticCurve::Ed25519 {
                continue;
            }
            let key = DecodingKey::from_ed_components(&okp.x)
                .map_err(|e| format!("key {kid} of the JWKS is not an Ed25519 key: {e}"))?;
            keys.push((kid, key));
        }
        if keys.is_empty() {
            return Err("the JWKS holds no Ed25519 key with a kid".to_owned());
        }
        Ok(SessionVerifier::new(keys))
    }

    pub fn knows(&self, kid: &str) -> bool {
        self.keys.contains_key(kid)
    }

    /// The `kid` a token names, without verifying anything (to know whether to fetch keys).
    pub fn kid_of(token: &str) -> Option<String> {
        jsonwebtoken::decode_header(token).ok()?.kid
    }

    /// Checks the token's algorithm, `kid`, signature, issuer, audience, expiry and not-before,
    /// and reads what it grants.
    pub fn verify(&self, token: &str) -> Result<SessionGrant, VerifyError> {
        let header = jsonwebtoken::decode_header(token).map_err(|e| match e.kind() {
            ErrorKind::InvalidAlgorithmName => VerifyError::WrongAlgorithm,
            _ => VerifyError::Malformed,
        })?;
        if header.alg != Algorithm::EdDSA {
            return Err(VerifyError::WrongAlgorithm);
        }
        let key = header
            .kid
            .as_deref()
            .and_then(|kid| self.keys.get(kid))
            .ok_or(VerifyError::UnknownKid)?;
        let data = jsonwebtoken::decode::<SessionClaims>(token, key, &self.validation).map_err(
            |e| match e.kind() {
                ErrorKind::InvalidSignature => VerifyError::BadSignature,
                ErrorKind::ExpiredSignature => VerifyError::Expired,
                ErrorKind::ImmatureSignature => VerifyError::NotYetValid,
                ErrorKind::InvalidIssuer => VerifyError::WrongIssuer,
                ErrorKind::InvalidAudience => VerifyError::WrongAudience,
                ErrorKind::InvalidAlgorithm => VerifyError::WrongAlgorithm,
                _ => VerifyError::Malformed,
            },
        )?;
        grant(data.claims)
    }
}

/// What `claims` grant, once their shape is checked.
fn grant(claims: SessionClaims) -> Result<SessionGrant, VerifyError> {
    let digest_ok = claims.sub.len() == 32
        && is_lower_hex(&claims.sub)
        && session_key_digest(&claims.sid) == Some(claims.sub.as_str());
    let scopes = Scopes::from_names(claims.scope.split(' ').filter(|s| !s.is_empty()))
        .ok_or(VerifyError::Malformed)?;
    let tools_ok = claims
        .tools
        .as_ref()
        .is_none_or(|t| t.len() <= MAX_TOKEN_TOOLS);
    if !digest_ok || scopes.is_empty() || !tools_ok {
        return Err(VerifyError::Malformed);
    }
    Ok(SessionGrant {
        key_digest: claims.sub,
        session_id: claims.sid,
        scopes,
        tools: claims.tools,
        room: claims.room,
        identity: claims.identity,
        exp: claims.exp,
    })
}

/// Most verified tokens a [`GrantCache`] keeps; beyond it a token is verified at each use.
const MAX_CACHED: usize = 100_000;

/// The grants of tokens verified once, by the SHA-256 of the whole token, each kept until it
/// expires: an Ed25519 check costs more than a whole call, a hash and a lookup far less. A
/// token that differs in any byte is another entry, verified on its own.
#[derive(Default)]
pub struct GrantCache {
    grants: DashMap<[u8; 32], Arc<SessionGrant>>,
}

impl GrantCache {
    /// The grant of `token` at Unix second `now`: cached, or from `verify` (then cached).
    pub fn get_or_verify(
        &self,
        token: &str,
        now: u64,
        verify: impl FnOnce(&str) -> Result<SessionGrant, VerifyError>,
    ) -> Result<Arc<SessionGrant>, VerifyError> {
        let id: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        if let Some(grant) = self.grants.get(&id) {
            if now <= grant.exp.saturating_add(LEEWAY_SECS) {
                return Ok(grant.clone());
            }
            drop(grant);
            self.grants.remove(&id);
            return Err(VerifyError::Expired);
        }
        let grant = Arc::new(verify(token)?);
        if self.grants.len() < MAX_CACHED {
            self.grants.insert(id, grant.clone());
        }
        Ok(grant)
    }

    /// Drops the grants that have expired.
    pub fn sweep(&self, now: u64) {
        self.grants
            .retain(|_, grant| now <= grant.exp.saturating_add(LEEWAY_SECS));
    }
}

/// A scope's name, as `POST /api/voice-agent/sessions` takes it (the document's form of
/// [`Scope`]).
#[cfg(feature = "openapi")]
#[derive(utoipa::ToSchema)]
#[schema(rename_all = "lowercase")]
pub enum ScopeName {
    List,
    Call,
    Mode,
    Status,
}

/// A tool's name, as a session's `tools` lists it.
#[cfg(feature = "openapi")]
pub struct ToolNameSchema;

#[cfg(feature = "openapi")]
impl utoipa::PartialSchema for ToolNameSchema {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        utoipa::openapi::ObjectBuilder::new()
            .schema_type(utoipa::openapi::schema::Type::String)
            .pattern(Some("^[A-Za-z][A-Za-z0-9_-]{0,63}$"))
            .into()
    }
}

#[cfg(feature = "openapi")]
impl utoipa::ToSchema for ToolNameSchema {}

/// `POST /api/voice-agent/sessions` body: a session token for one key.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SessionRequest {
    /// The tab's routing key.
    #[cfg_attr(feature = "openapi", schema(pattern = "^va_[0-9a-f]{64}$"))]
    pub api_key: String,
    /// Lifetime in seconds (default 3600, at most the relay's `RELAY_SESSION_MAX_TTL_SECS`);
    /// never beyond the tab's own token.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "crate::whole::optional"
    )]
    #[cfg_attr(feature = "openapi", schema(minimum = 1, maximum = 86400))]
    pub ttl_secs: Option<u64>,
    /// The only tools the session may call (default: any; empty: none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(
        feature = "openapi",
        schema(max_items = 64, value_type = Option<Vec<ToolNameSchema>>)
    )]
    pub tools: Option<Vec<String>>,
    /// What the session may do: `list`, `call`, `mode`, `status` (default: all four).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(
        feature = "openapi",
        schema(min_items = 1, value_type = Option<Vec<ScopeName>>)
    )]
    pub scope: Option<Vec<String>>,
    /// The LiveKit room of the key's tab, when the caller knows it (carried in the token).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(
        feature = "openapi",
        schema(max_length = 64, pattern = r"^[^\u0000-\u001F\u007F-\u009F]*$")
    )]
    pub room_name: Option<String>,
    /// The LiveKit identity of the key's user, when the caller knows it (carried in the token).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(
        feature = "openapi",
        schema(max_length = 128, pattern = r"^[^\u0000-\u001F\u007F-\u009F]*$")
    )]
    pub identity: Option<String>,
}

impl SessionRequest {
    /// A session of the default lifetime, scope and tools for `key`.
    pub fn for_key(key: &str) -> SessionRequest {
        SessionRequest {
            api_key: key.to_owned(),
            ttl_secs: None,
            tools: None,
            scope: None,
            room_name: None,
            identity: None,
        }
    }
}

/// `POST /api/voice-agent/sessions` answer.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionResponse {
    /// The session token: `Authorization: Bearer <token>` on every agent surface.
    pub token: String,
    /// The session (`s_` + 48 hex): `DELETE /api/voice-agent/sessions/{sessionId}` ends it.
    pub session_id: String,
    /// Expiry, Unix seconds.
    pub expires_at: u64,
}

/// `DELETE /api/voice-agent/sessions/{sessionId}` answer.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionEnded {
    #[cfg_attr(feature = "openapi", schema(schema_with = crate::openapi::always_true))]
    pub ok: bool,
}

#[cfg(test)]
mod tests;
