//! The token service's core: mints per-tab keys and the LiveKit JWTs that carry them, and verifies
//! such a JWT when a tab presents it to bind. Signing and verification are livekit-api's own.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use livekit_api::access_token::{AccessToken, TokenVerifier, VideoGrants};
use rand::RngCore;
use relay_wire::{API_KEY_PREFIX, ParticipantMetadata, TokenRequest, TokenResponse, is_api_key};

use crate::config::Secret;
use crate::error::ApiError;

/// Longest accepted participant or room name, in characters.
pub const MAX_NAME_CHARS: usize = 64;

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
}

pub struct TokenService {
    api_key: String,
    api_secret: Secret,
    verifier: TokenVerifier,
    livekit_url: String,
    ttl: Duration,
}

impl TokenService {
    pub fn new(api_key: &str, api_secret: &Secret, livekit_url: &str, ttl: Duration) -> Self {
        TokenService {
            api_key: api_key.to_owned(),
            api_secret: api_secret.clone(),
            verifier: TokenVerifier::with_api_key(api_key, api_secret.expose()),
            livekit_url: livekit_url.to_owned(),
            ttl,
        }
    }

    /// Mints a new key and a LiveKit token carrying it for one tab.
    pub fn mint(&self, request: &TokenRequest) -> Result<TokenResponse, ApiError> {
        let name = validate_name("participantName", request.participant_name.as_deref())?;
        let room = validate_name("roomName", request.room_name.as_deref())?;
        if let Some(room) = room
            && !room
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        {
            return Err(ApiError::invalid(
                "roomName may hold only letters, digits, '-', '_' and '.'",
            ));
        }
        let room_name = room.map_or_else(|| format!("voice-{}", random_suffix(6)), str::to_owned);
        let identity = format!("tab-{}", random_suffix(8));
        let display_name = name.unwrap_or("Guest");
        let api_key = new_api_key();
        let metadata = serde_json::to_string(&ParticipantMetadata {
            api_key: api_key.clone(),
        })
        .map_err(|_| ApiError::invalid("could not encode metadata"))?;

        let exp = unix_now().as_secs() + self.ttl.as_secs();
        let token = AccessToken::with_api_key(&self.api_key, self.api_secret.expose())
            .with_identity(&identity)
            .with_name(display_name)
            .with_metadata(&metadata)
            .with_ttl(self.ttl)
            .with_grants(VideoGrants {
                room_join: true,
                room: room_name.clone(),
                can_publish: Some(true),
                can_subscribe: Some(true),
                can_publish_data: Some(true),
                ..Default::default()
            })
            .to_jwt()
            .map_err(|err| {
                tracing::error!(cause = %err, "token signing failed");
                ApiError::new(relay_wire::ErrorCode::Internal, "token signing failed")
            })?;

        Ok(TokenResponse {
            token,
            url: self.livekit_url.clone(),
            room_name,
            identity,
            api_key,
            expires_at: exp,
        })
    }

    /// Checks a token's signature, issuer and expiry (livekit-api's verifier, 60 s leeway) and
    /// reads the key from its metadata.
    pub fn verify(&self, jwt: &str) -> Result<VerifiedToken, TokenError> {
        let jwt = jwt.trim();
        if jwt.is_empty() {
            return Err(TokenError::Missing);
        }
        let claims = self.verifier.verify(jwt).map_err(|err| {
            let text = err.to_string().to_ascii_lowercase();
            if text.contains("expired") {
                TokenError::Expired
            } else if text.contains("signature") {
                TokenError::Invalid("bad signature")
            } else if text.contains("issuer") {
                TokenError::Invalid("wrong issuer")
            } else {
                TokenError::Invalid("malformed")
            }
        })?;
        let metadata: ParticipantMetadata =
            serde_json::from_str(&claims.metadata).map_err(|_| TokenError::NoKey)?;
        if !is_api_key(&metadata.api_key) {
            return Err(TokenError::NoKey);
        }
        Ok(VerifiedToken {
            api_key: metadata.api_key,
            exp: claims.exp as u64,
        })
    }
}

fn validate_name<'a>(field: &str, value: Option<&'a str>) -> Result<Option<&'a str>, ApiError> {
    let Some(value) = value else { return Ok(None) };
    let value = value.trim();
    if value.is_empty() {
        return Ok(None);
    }
    if value.chars().count() > MAX_NAME_CHARS {
        return Err(ApiError::invalid(format!(
            "{field} is longer than {MAX_NAME_CHARS} characters"
        )));
    }
    if value.chars().any(char::is_control) {
        return Err(ApiError::invalid(format!(
            "{field} contains control characters"
        )));
    }
    Ok(Some(value))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn service() -> TokenService {
        TokenService::new(
            "devkey",
            &Secret::new("secret-secret-secret-secret-1234"),
            "ws://127.0.0.1:7880",
            Duration::from_secs(600),
        )
    }

    #[test]
    fn keys_are_fresh_and_well_formed() {
        let a = new_api_key();
        let b = new_api_key();
        assert!(is_api_key(&a) && is_api_key(&b));
        assert_ne!(a, b);
    }

    #[test]
    fn minted_token_verifies_and_carries_the_key() {
        let s = service();
        let minted = s
            .mint(&TokenRequest {
                participant_name: Some("Ada".into()),
                room_name: Some("room-1".into()),
            })
            .unwrap();
        assert_eq!(minted.room_name, "room-1");
        let v = s.verify(&minted.token).unwrap();
        assert_eq!(v.api_key, minted.api_key);
        assert_eq!(v.exp, minted.expires_at);
        let claims = TokenVerifier::with_api_key("devkey", "secret-secret-secret-secret-1234")
            .verify(&minted.token)
            .unwrap();
        assert_eq!(claims.sub, minted.identity);
        assert_eq!(claims.name, "Ada");
        assert!(claims.video.room_join && claims.video.can_publish_data());
    }

    #[test]
    fn foreign_and_broken_tokens_are_refused() {
        let s = service();
        let other = TokenService::new(
            "devkey",
            &Secret::new("another-secret-another-secret-12"),
            "ws://x",
            Duration::from_secs(600),
        );
        let forged = other.mint(&TokenRequest::default()).unwrap().token;
        assert!(matches!(s.verify(&forged), Err(TokenError::Invalid(_))));
        assert!(matches!(s.verify(""), Err(TokenError::Missing)));
        assert!(matches!(s.verify("a.b.c"), Err(TokenError::Invalid(_))));
        // A valid signature without our metadata does not bind.
        let bare = AccessToken::with_api_key("devkey", "secret-secret-secret-secret-1234")
            .with_identity("x")
            .to_jwt()
            .unwrap();
        assert!(matches!(s.verify(&bare), Err(TokenError::NoKey)));
    }

    #[test]
    fn names_are_bounded() {
        let s = service();
        let long = "x".repeat(65);
        assert!(
            s.mint(&TokenRequest {
                participant_name: Some(long),
                room_name: None
            })
            .is_err()
        );
        assert!(
            s.mint(&TokenRequest {
                participant_name: None,
                room_name: Some("a b".into())
            })
            .is_err()
        );
    }
}
