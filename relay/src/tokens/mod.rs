//! The token service's core: who a token is for under each token mode ([`Subject::for_request`]),
//! per-tab keys and the LiveKit JWTs that carry them, and verifying such a JWT when a tab presents
//! it to bind. The claims are livekit-api's own, signed with the LiveKit secret as LiveKit's
//! server expects; beside them each token carries the relay's bind proof (`vaBind`, see
//! [`crate::sessions::keys`]), which a token minted elsewhere with the LiveKit secret alone
//! lacks: such a token joins LiveKit rooms but binds no key here.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use std::sync::Arc;

use jsonwebtoken::errors::ErrorKind;
use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation};
use livekit_api::access_token::{Claims, VideoGrants};
use rand::RngCore;
use relay_wire::{API_KEY_PREFIX, ParticipantMetadata, TokenRequest, is_api_key};
use serde::{Deserialize, Serialize};

use crate::app_jwt::AppClaims;
use crate::error::ApiError;
use crate::sessions::SigningKeys;
use relay_wire::Secret;

/// Clock skew allowed on a tab's token (as LiveKit's own verifier allows).
const LEEWAY_SECS: u64 = 60;

/// A tab's LiveKit token: LiveKit's claims, and the relay's bind proof beside them (LiveKit's
/// server ignores a claim it does not know).
#[derive(Serialize, Deserialize)]
struct TabClaims {
    #[serde(flatten)]
    livekit: Claims,
    #[serde(rename = "vaBind", default)]
    bind_proof: String,
}

/// A new tab's token and key.
pub struct Issued {
    /// The LiveKit JWT.
    pub token: String,
    pub url: String,
    pub room_name: String,
    pub identity: String,
    pub api_key: String,
    /// Token expiry, Unix seconds.
    pub expires_at: u64,
}

/// Longest accepted participant or room name, in characters.
pub const MAX_NAME_CHARS: usize = 64;
/// Longest accepted identity, in characters (an app's user ids may be longer than a name).
pub const MAX_IDENTITY_CHARS: usize = 128;

/// Installs jsonwebtoken's full RustCrypto provider (HMAC, RSA, ECDSA, EdDSA) for the whole
/// process. livekit-api installs an HMAC-only provider the first time it signs or verifies, and
/// the first install wins; so this runs at start-up before any LiveKit token exists, after which
/// livekit's install is a no-op and its HS256 tokens use this provider. True when the process's
/// provider verifies more than HMAC (installed now or before); false when an HMAC-only one got
/// there first.
pub fn install_jwt_crypto() -> bool {
    use jsonwebtoken::crypto::rust_crypto::DEFAULT_PROVIDER;
    // The error of `install_default` carries the provider passed in, not the installed one, so
    // the installed one is asked instead: an HMAC-only provider refuses EdDSA outright, a full
    // one checks (and rejects) this made-up signature.
    let _ = DEFAULT_PROVIDER.install_default();
    // RFC 8032's first test public key.
    const PROBE_ED25519_X: &str = "11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo";
    jsonwebtoken::DecodingKey::from_ed_components(PROBE_ED25519_X)
        .and_then(|key| {
            jsonwebtoken::crypto::verify("AA", b"probe", &key, jsonwebtoken::Algorithm::EdDSA)
        })
        .is_ok()
}

/// Who a token is for: decided from the caller's credential and request before minting.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Subject {
    /// The LiveKit identity; `None` for a fresh `tab-…` one.
    pub identity: Option<String>,
    /// The display name.
    pub name: Option<String>,
    /// The room; `None` for a fresh `voice-…` one.
    pub room: Option<String>,
}

/// What the caller of `POST /token` proved.
#[derive(Debug, Clone)]
pub enum Caller {
    /// The app's backend, with an issuer secret.
    Issuer,
    /// A user with a valid app session JWT.
    App(AppClaims),
    /// Nobody in particular (`RELAY_TOKEN_MODE=open`).
    Anonymous,
}

impl Subject {
    /// Applies the mode's rules: the issuer names room, identity and name as it likes; an app
    /// JWT's claims give identity, name and room, and the body may not override them; an
    /// anonymous caller always gets a fresh room and identity of its own.
    pub fn for_request(caller: &Caller, req: &TokenRequest) -> Result<Subject, ApiError> {
        let name = validate_name("participantName", req.participant_name.as_deref())?;
        // Spaces only (within the length limit) is no room, as if absent; any other value is
        // checked whole (a room name has no spaces at its ends either).
        let room = match req.room_name.as_deref() {
            Some(room) if room.len() <= MAX_NAME_CHARS && room.bytes().all(|b| b == b' ') => None,
            Some(room) => {
                check_room_chars("roomName", room)?;
                validate_name("roomName", Some(room))?
            }
            None => None,
        };
        let identity = validate_identity("identity", req.identity.as_deref())?;
        match caller {
            Caller::Issuer => Ok(Subject {
                identity: identity.map(str::to_owned),
                name: name.map(str::to_owned),
                room: room.map(str::to_owned),
            }),
            Caller::App(claims) => {
                if room.is_some() {
                    return Err(ApiError::invalid(
                        "roomName cannot be chosen here: the room comes from your session token's \
                         room claim, or is a fresh one",
                    ));
                }
                if identity.is_some() {
                    return Err(ApiError::invalid(
                        "identity cannot be chosen here: it is your session token's sub",
                    ));
                }
                let unusable = |what: &str| {
                    ApiError::new(
                        relay_wire::ErrorCode::Unauthorized,
                        format!("the session token is not usable: {what}"),
                    )
                };
                let subject = validate_identity("sub", Some(&claims.subject))
                    .map_err(|_| {
                        unusable(
                            "its sub is longer than 128 characters or holds control characters",
                        )
                    })?
                    .map(str::to_owned);
                let claimed_room = match claims.room.as_deref() {
                    None => None,
                    Some(r) => {
                        let r = validate_name("room", Some(r))
                            .ok()
                            .flatten()
                            .filter(|r| check_room_chars("room", r).is_ok())
                            .ok_or_else(|| {
                                unusable("its room claim is not a room name (letters, digits, '-', '_', '.'; at most 64)")
                            })?;
                        Some(r.to_owned())
                    }
                };
                Ok(Subject {
                    identity: subject,
                    name: claims
                        .name
                        .as_deref()
                        .map(display_name)
                        .or_else(|| name.map(str::to_owned)),
                    room: claimed_room,
                })
            }
            Caller::Anonymous => {
                if room.is_some() {
                    return Err(ApiError::invalid(
                        "roomName cannot be chosen: this relay gives every token a fresh room of \
                         its own (RELAY_TOKEN_MODE=open); an app that places users in rooms calls \
                         /token from its backend (RELAY_TOKEN_MODE=issuer)",
                    ));
                }
                if identity.is_some() {
                    return Err(ApiError::invalid(
                        "identity cannot be chosen: this relay gives every token a fresh one \
                         (RELAY_TOKEN_MODE=open)",
                    ));
                }
                Ok(Subject {
                    identity: None,
                    name: name.map(str::to_owned),
                    room: None,
                })
            }
        }
    }
}

/// A display name from the app's claims: control characters dropped, cut to the name limit
/// (the app's own data is not refused for being long).
fn display_name(name: &str) -> String {
    name.chars()
        .filter(|c| !c.is_control())
        .take(MAX_NAME_CHARS)
        .collect()
}

fn check_room_chars(field: &str, room: &str) -> Result<(), ApiError> {
    if room
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
    {
        Ok(())
    } else {
        Err(ApiError::invalid(format!(
            "{field} may hold only letters, digits, '-', '_' and '.'"
        )))
    }
}

/// A fresh routing key: `va_` + 64 lowercase hex characters from 32 bytes of the thread-local
/// CSPRNG (ChaCha, seeded from the OS).
pub fn new_api_key() -> String {
    let mut bytes = [0u8; 32];
    rand::rng().fill_bytes(&mut bytes);
    let mut key = String::with_capacity(API_KEY_PREFIX.len() + 64);
    key.push_str(API_KEY_PREFIX);
    key.push_str(&hex::encode(bytes));
    key
}

fn random_suffix(bytes: usize) -> String {
    let mut buf = vec![0u8; bytes];
    rand::rng().fill_bytes(&mut buf);
    hex::encode(buf)
}

pub fn unix_now() -> Duration {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
}

/// [`unix_now`] in milliseconds, the unit of every `…Ms` field and of the Redis state.
pub fn unix_now_ms() -> u64 {
    unix_now().as_millis() as u64
}

/// What a valid token proves: the key it carries was issued by this deployment, until `exp`.
#[derive(Debug, Clone)]
pub struct VerifiedToken {
    pub api_key: String,
    /// Token expiry, Unix seconds.
    pub exp: u64,
}

/// Why a presented token does not bind.
#[derive(Debug, Clone, thiserror::Error)]
pub enum TokenError {
    #[error("token is empty")]
    Missing,
    #[error("token is expired")]
    Expired,
    #[error("token is not valid: {0}")]
    Invalid(&'static str),
    #[error("token carries no relay key in its metadata")]
    NoKey,
    #[error("token was not issued by this relay: it carries no valid bind proof")]
    NotIssuedHere,
}

pub struct TokenService {
    api_key: String,
    encoding: EncodingKey,
    decoding: DecodingKey,
    validation: Validation,
    proofs: Arc<SigningKeys>,
    livekit_url: String,
    ttl: Duration,
}

impl TokenService {
    pub fn new(
        api_key: &str,
        api_secret: &Secret,
        livekit_url: &str,
        ttl: Duration,
        proofs: Arc<SigningKeys>,
    ) -> Self {
        install_jwt_crypto();
        let mut validation = Validation::new(Algorithm::HS256);
        validation.leeway = LEEWAY_SECS;
        validation.validate_nbf = true;
        validation.set_issuer(&[api_key]);
        validation.set_required_spec_claims(&["exp", "iss"]);
        TokenService {
            api_key: api_key.to_owned(),
            encoding: EncodingKey::from_secret(api_secret.expose().as_bytes()),
            decoding: DecodingKey::from_secret(api_secret.expose().as_bytes()),
            validation,
            proofs,
            livekit_url: livekit_url.to_owned(),
            ttl,
        }
    }

    /// Mints a new key and a LiveKit token carrying it for one tab, for `subject`.
    pub fn mint(&self, subject: &Subject) -> Result<Issued, ApiError> {
        let room_name = subject
            .room
            .clone()
            .unwrap_or_else(|| format!("voice-{}", random_suffix(16)));
        let identity = subject
            .identity
            .clone()
            .unwrap_or_else(|| format!("tab-{}", random_suffix(8)));
        let display_name = subject.name.as_deref().unwrap_or("Guest");
        let api_key = new_api_key();
        let metadata = serde_json::to_string(&ParticipantMetadata {
            api_key: api_key.clone(),
        })
        .map_err(|_| ApiError::invalid("could not encode metadata"))?;

        let now = unix_now().as_secs();
        let exp = now + self.ttl.as_secs();
        let claims = TabClaims {
            livekit: Claims {
                exp: exp as usize,
                iss: self.api_key.clone(),
                nbf: now as usize,
                sub: identity.clone(),
                name: display_name.to_owned(),
                video: VideoGrants {
                    room_join: true,
                    room: room_name.clone(),
                    can_publish: Some(true),
                    can_subscribe: Some(true),
                    can_publish_data: Some(true),
                    // Participant metadata carries the relay key: a participant must never be
                    // able to rewrite its own (or to hide that it has one).
                    can_update_own_metadata: Some(false),
                    ..Default::default()
                },
                metadata,
                ..Default::default()
            },
            bind_proof: self.proofs.bind_proof(&api_key, &identity, &room_name, exp),
        };
        let token = jsonwebtoken::encode(&Header::new(Algorithm::HS256), &claims, &self.encoding)
            .map_err(|err| {
            tracing::error!(cause = %err, "token signing failed");
            ApiError::new(relay_wire::ErrorCode::Internal, "token signing failed")
        })?;

        Ok(Issued {
            token,
            url: self.livekit_url.clone(),
            room_name,
            identity,
            api_key,
            expires_at: exp,
        })
    }

    /// Checks a token's signature (the LiveKit secret), issuer and expiry (60 s leeway, as
    /// LiveKit's verifier), reads the key from its metadata, and checks the relay's bind proof
    /// for that key, identity, room and expiry: a token the relay did not issue binds nothing.
    pub fn verify(&self, jwt: &str) -> Result<VerifiedToken, TokenError> {
        let jwt = jwt.trim();
        if jwt.is_empty() {
            return Err(TokenError::Missing);
        }
        let claims = jsonwebtoken::decode::<TabClaims>(jwt, &self.decoding, &self.validation)
            .map_err(|err| match err.kind() {
                ErrorKind::ExpiredSignature => TokenError::Expired,
                ErrorKind::InvalidSignature => TokenError::Invalid("bad signature"),
                ErrorKind::InvalidIssuer => TokenError::Invalid("wrong issuer"),
                ErrorKind::ImmatureSignature => TokenError::Invalid("not valid yet"),
                ErrorKind::InvalidAlgorithm => TokenError::Invalid("wrong algorithm"),
                _ => TokenError::Invalid("malformed"),
            })?
            .claims;
        let metadata: ParticipantMetadata =
            serde_json::from_str(&claims.livekit.metadata).map_err(|_| TokenError::NoKey)?;
        if !is_api_key(&metadata.api_key) {
            return Err(TokenError::NoKey);
        }
        let exp = claims.livekit.exp as u64;
        if !self.proofs.check_bind_proof(
            &claims.bind_proof,
            &metadata.api_key,
            &claims.livekit.sub,
            &claims.livekit.video.room,
            exp,
        ) {
            return Err(TokenError::NotIssuedHere);
        }
        Ok(VerifiedToken {
            api_key: metadata.api_key,
            exp,
        })
    }
}

fn validate_name<'a>(field: &str, value: Option<&'a str>) -> Result<Option<&'a str>, ApiError> {
    validate_text(field, value, MAX_NAME_CHARS)
}

fn validate_identity<'a>(field: &str, value: Option<&'a str>) -> Result<Option<&'a str>, ApiError> {
    validate_text(field, value, MAX_IDENTITY_CHARS)
}

fn validate_text<'a>(
    field: &str,
    value: Option<&'a str>,
    max: usize,
) -> Result<Option<&'a str>, ApiError> {
    let Some(value) = value else { return Ok(None) };
    // The value as sent, before trimming: a line break at either end is a control character
    // too, and spaces count toward the length (as the published schema says).
    if value.chars().any(char::is_control) {
        return Err(ApiError::invalid(format!(
            "{field} contains control characters"
        )));
    }
    if value.chars().count() > max {
        return Err(ApiError::invalid(format!(
            "{field} is longer than {max} characters"
        )));
    }
    let value = value.trim();
    if value.is_empty() {
        return Ok(None);
    }
    Ok(Some(value))
}

#[cfg(test)]
mod tests;
