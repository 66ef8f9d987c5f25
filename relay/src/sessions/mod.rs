//! Session tokens on the relay: minting them (for the tab's own `/token` answer and for
//! `POST /api/voice-agent/sessions`), verifying the ones agents present, with each verified
//! token's grant cached until its expiry (an Ed25519 check costs more than a whole call), and
//! the bind proofs of the LiveKit tokens the relay issues ([`keys`]).
//!
//! Ending one session is the store's (it must hold on every node); revoking the key ends every
//! session of it at once, as every call first finds the key.

pub mod keys;

use std::sync::Arc;
use std::time::Duration;

use relay_wire::session::{
    DEFAULT_SESSION_TTL_SECS, GrantCache, SESSION_AUDIENCE, SESSION_ISSUER, Scopes, SessionClaims,
    SessionGrant, SessionVerifier, VerifyError, key_digest, new_session_id,
};

pub use keys::SigningKeys;

/// What a new session token names.
#[derive(Debug, Clone, Default)]
pub struct Mint {
    /// Lifetime; `None` for the default hour.
    pub ttl: Option<Duration>,
    pub scopes: Option<Scopes>,
    pub tools: Option<Vec<String>>,
    pub room: Option<String>,
    pub identity: Option<String>,
}

/// A minted token.
pub struct Minted {
    pub token: String,
    pub session_id: String,
    pub expires_at: u64,
}

pub struct Sessions {
    keys: Arc<SigningKeys>,
    verifier: SessionVerifier,
    cache: GrantCache,
}

impl Sessions {
    pub fn new(keys: &Arc<SigningKeys>) -> Sessions {
        let verifier = SessionVerifier::new(keys.decoding_keys());
        Sessions {
            keys: keys.clone(),
            verifier,
            cache: GrantCache::default(),
        }
    }

    pub fn keys(&self) -> &SigningKeys {
        &self.keys
    }

    /// Signs a session token for `key`, expiring after its lifetime or at `not_after` (the
    /// tab's own token), whichever is first.
    pub fn mint(&self, key: &str, mint: Mint, now: u64, not_after: u64) -> Result<Minted, String> {
        let ttl = mint
            .ttl
            .map_or(DEFAULT_SESSION_TTL_SECS, |t| t.as_secs().max(1));
        let exp = now.saturating_add(ttl).min(not_after);
        let digest = key_digest(key);
        let mut random = [0u8; 8];
        rand::RngCore::fill_bytes(&mut rand::rng(), &mut random);
        let session_id = new_session_id(&digest, random);
        let claims = SessionClaims {
            iss: SESSION_ISSUER.to_owned(),
            aud: SESSION_AUDIENCE.to_owned(),
            sub: digest,
            sid: session_id.clone(),
            room: mint.room,
            identity: mint.identity,
            scope: mint.scopes.unwrap_or_else(Scopes::all).to_claim(),
            tools: mint.tools,
            iat: now,
            nbf: now,
            exp,
        };
        let (kid, key) = self.keys.signer();
        let mut header = jsonwebtoken::Header::new(jsonwebtoken::Algorithm::EdDSA);
        header.kid = Some(kid.to_owned());
        let token = jsonwebtoken::encode(&header, &claims, key).map_err(|e| e.to_string())?;
        Ok(Minted {
            token,
            session_id,
            expires_at: exp,
        })
    }

    /// The grant of a presented session token: from the cache while it has not expired,
    /// otherwise verified (algorithm, `kid`, signature, issuer, audience, times) and cached.
    pub fn verify(&self, token: &str, now: u64) -> Result<Arc<SessionGrant>, VerifyError> {
        self.cache
            .get_or_verify(token, now, |t| self.verifier.verify(t))
    }

    /// Drops the cached grants that have expired.
    pub fn sweep(&self, now: u64) {
        self.cache.sweep(now);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use relay_wire::session::{LEEWAY_SECS, Scope};

    const KEY: &str = "va_00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";

    fn now_secs() -> u64 {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs()
    }

    fn sessions() -> Sessions {
        // The process installs this provider at start (`tokens::install_jwt_crypto`).
        let _ = jsonwebtoken::crypto::rust_crypto::DEFAULT_PROVIDER.install_default();
        Sessions::new(&Arc::new(
            SigningKeys::parse(&SigningKeys::generate_entry()).unwrap(),
        ))
    }

    #[test]
    fn minted_tokens_verify_and_never_outlive_the_tab() {
        let s = sessions();
        let now = now_secs();
        let m = s.mint(KEY, Mint::default(), now, now + 60).unwrap();
        assert_eq!(m.expires_at, now + 60);
        let grant = s.verify(&m.token, now).unwrap();
        assert!(grant.names_key(KEY));
        assert_eq!(grant.session_id, m.session_id);
        assert!(grant.scopes.contains(Scope::Status));
        // Cached: the same grant, until its expiry (plus leeway) passes.
        assert!(Arc::ptr_eq(&grant, &s.verify(&m.token, now).unwrap()));
        assert_eq!(
            s.verify(&m.token, now + 60 + LEEWAY_SECS + 1).unwrap_err(),
            VerifyError::Expired
        );
        // Narrowed.
        let narrow = Mint {
            scopes: Scopes::from_names(["list"]),
            tools: Some(vec!["draw_card".into()]),
            ttl: Some(Duration::from_secs(10)),
            ..Mint::default()
        };
        let m = s.mint(KEY, narrow, now, now + 3600).unwrap();
        assert_eq!(m.expires_at, now + 10);
        let grant = s.verify(&m.token, now).unwrap();
        assert!(!grant.scopes.contains(Scope::Call));
        assert!(!grant.allows_tool("show_card"));
    }

    #[test]
    fn another_relays_tokens_are_refused_even_after_a_sweep() {
        let ours = sessions();
        let theirs = sessions();
        let now = now_secs();
        let m = theirs.mint(KEY, Mint::default(), now, now + 60).unwrap();
        assert_eq!(
            ours.verify(&m.token, now).unwrap_err(),
            VerifyError::UnknownKid
        );
        ours.sweep(now);
        assert_eq!(
            ours.verify(&m.token, now).unwrap_err(),
            VerifyError::UnknownKid
        );
    }
}
