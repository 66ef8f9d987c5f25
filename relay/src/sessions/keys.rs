//! The relay's signing keys (`RELAY_SESSION_KEYS`): Ed25519 keys named by `kid`, the first of
//! which signs; all of them verify, so a key is rotated by putting the new one first and
//! dropping the old one once its tokens have expired (at most a token lifetime later).
//!
//! Each key also gives the MAC key of the bind proofs ([`SigningKeys::bind_proof`]): a value only
//! a relay holding these keys can make, carried in the LiveKit tokens it issues, so that a token
//! minted elsewhere with the LiveKit secret alone binds no key.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use ed25519_dalek::SigningKey;
use ed25519_dalek::pkcs8::EncodePrivateKey;
use hmac::{Hmac, Mac};
use jsonwebtoken::{DecodingKey, EncodingKey};
use sha2::Sha256;

/// Longest `kid` accepted.
const MAX_KID_LEN: usize = 64;
/// What the bind-proof MAC key is derived for, so it differs from every other use of the seed.
const BIND_PROOF_LABEL: &[u8] = b"voice-relay bind proof v1";

/// One signing key.
struct Key {
    kid: String,
    encoding: EncodingKey,
    /// The public key, base64url (the JWK's `x`).
    x: String,
    /// The bind proofs' MAC key.
    bind_mac: [u8; 32],
}

/// Every configured key, the signing one first.
pub struct SigningKeys {
    keys: Vec<Key>,
}

impl std::fmt::Debug for SigningKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kids: Vec<&str> = self.keys.iter().map(|k| k.kid.as_str()).collect();
        write!(f, "SigningKeys({kids:?})")
    }
}

impl SigningKeys {
    /// Parses `kid:seed,kid:seed,…`, each seed 32 bytes in base64url (what `relay session-key`
    /// prints). The first key signs.
    pub fn parse(value: &str) -> Result<SigningKeys, String> {
        let mut keys: Vec<Key> = Vec::new();
        for entry in value.split(',').map(str::trim).filter(|e| !e.is_empty()) {
            let (kid, seed) = entry.split_once(':').ok_or_else(|| {
                "RELAY_SESSION_KEYS entries are kid:seed (run `relay session-key` for one)"
                    .to_owned()
            })?;
            let kid = kid.trim();
            if kid.is_empty()
                || kid.len() > MAX_KID_LEN
                || !kid
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
            {
                return Err(format!(
                    "RELAY_SESSION_KEYS kid {kid:?} must be 1 to {MAX_KID_LEN} letters, digits, '-', '_' or '.'"
                ));
            }
            if keys.iter().any(|k| k.kid == kid) {
                return Err(format!("RELAY_SESSION_KEYS names kid {kid:?} twice"));
            }
            let seed: [u8; 32] = URL_SAFE_NO_PAD
                .decode(seed.trim().trim_end_matches('='))
                .ok()
                .and_then(|bytes| bytes.try_into().ok())
                .ok_or_else(|| {
                    format!("RELAY_SESSION_KEYS key {kid:?} is not 32 bytes in base64url")
                })?;
            keys.push(Key::new(kid, &seed)?);
        }
        if keys.is_empty() {
            return Err("RELAY_SESSION_KEYS holds no key".to_owned());
        }
        Ok(SigningKeys { keys })
    }

    /// A fresh `kid:seed` entry from the operating system's randomness.
    pub fn generate_entry() -> String {
        let mut seed = [0u8; 32];
        rand::RngCore::fill_bytes(&mut rand::rng(), &mut seed);
        let mut kid = [0u8; 4];
        rand::RngCore::fill_bytes(&mut rand::rng(), &mut kid);
        format!("k{}:{}", hex::encode(kid), URL_SAFE_NO_PAD.encode(seed))
    }

    /// The signing key's `kid` and key.
    pub fn signer(&self) -> (&str, &EncodingKey) {
        let key = &self.keys[0];
        (&key.kid, &key.encoding)
    }

    /// Every key's `kid` and public key, to verify with.
    pub fn decoding_keys(&self) -> Vec<(String, DecodingKey)> {
        self.keys
            .iter()
            .filter_map(|k| Some((k.kid.clone(), DecodingKey::from_ed_components(&k.x).ok()?)))
            .collect()
    }

    /// The public keys as a JWKS (RFC 7517, OKP keys of RFC 8037).
    pub fn jwks(&self) -> serde_json::Value {
        let keys: Vec<serde_json::Value> = self
            .keys
            .iter()
            .map(|k| {
                serde_json::json!({
                    "kty": "OKP", "crv": "Ed25519", "x": k.x, "kid": k.kid,
                    "alg": "EdDSA", "use": "sig",
                })
            })
            .collect();
        serde_json::json!({ "keys": keys })
    }

    /// The bind proof for a LiveKit token carrying `key` for `identity` in `room` until `exp`:
    /// `<kid>.<base64url HMAC-SHA256>` under the signing key's proof key.
    pub fn bind_proof(&self, key: &str, identity: &str, room: &str, exp: u64) -> String {
        let signer = &self.keys[0];
        let mac = proof_mac(&signer.bind_mac, key, identity, room, exp).finalize();
        format!(
            "{}.{}",
            signer.kid,
            URL_SAFE_NO_PAD.encode(mac.into_bytes())
        )
    }

    /// True when `proof` is one of ours for exactly these values (compared in constant time).
    pub fn check_bind_proof(
        &self,
        proof: &str,
        key: &str,
        identity: &str,
        room: &str,
        exp: u64,
    ) -> bool {
        let Some((kid, mac)) = proof.split_once('.') else {
            return false;
        };
        let Some(k) = self.keys.iter().find(|k| k.kid == kid) else {
            return false;
        };
        let Ok(mac) = URL_SAFE_NO_PAD.decode(mac) else {
            return false;
        };
        proof_mac(&k.bind_mac, key, identity, room, exp)
            .verify_slice(&mac)
            .is_ok()
    }
}

fn proof_mac(mac_key: &[u8; 32], key: &str, identity: &str, room: &str, exp: u64) -> Hmac<Sha256> {
    let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(mac_key).expect("HMAC takes any key");
    // Lengths first, so no two value lists give the same bytes.
    for part in [key.as_bytes(), identity.as_bytes(), room.as_bytes()] {
        mac.update(&(part.len() as u64).to_be_bytes());
        mac.update(part);
    }
    mac.update(&exp.to_be_bytes());
    mac
}

impl Key {
    fn new(kid: &str, seed: &[u8; 32]) -> Result<Key, String> {
        let signing = SigningKey::from_bytes(seed);
        let der = signing
            .to_pkcs8_der()
            .map_err(|e| format!("RELAY_SESSION_KEYS key {kid:?}: {e}"))?;
        let mut derive = <Hmac<Sha256> as Mac>::new_from_slice(seed).expect("HMAC takes any key");
        derive.update(BIND_PROOF_LABEL);
        Ok(Key {
            kid: kid.to_owned(),
            encoding: EncodingKey::from_ed_der(der.as_bytes()),
            x: URL_SAFE_NO_PAD.encode(signing.verifying_key().as_bytes()),
            bind_mac: derive.finalize().into_bytes().into(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_rotates_and_refuses() {
        let a = SigningKeys::generate_entry();
        let b = SigningKeys::generate_entry();
        let keys = SigningKeys::parse(&format!("{a}, {b}")).unwrap();
        assert_eq!(keys.signer().0, a.split(':').next().unwrap());
        assert_eq!(keys.decoding_keys().len(), 2);
        assert_eq!(keys.jwks()["keys"].as_array().unwrap().len(), 2);
        for bad in ["", "nokid", "k1:short", "bad kid:AAAA", &format!("{a},{a}")] {
            assert!(SigningKeys::parse(bad).is_err(), "{bad:?}");
        }
        // The error never echoes a seed.
        let err = SigningKeys::parse("k1:not-a-seed-but-secret").unwrap_err();
        assert!(!err.contains("not-a-seed"), "{err}");
    }

    #[test]
    fn bind_proofs_bind_every_value_and_follow_the_key() {
        let entry = SigningKeys::generate_entry();
        let keys = SigningKeys::parse(&entry).unwrap();
        let proof = keys.bind_proof("va_k", "user", "room", 100);
        assert!(keys.check_bind_proof(&proof, "va_k", "user", "room", 100));
        assert!(!keys.check_bind_proof(&proof, "va_x", "user", "room", 100));
        assert!(!keys.check_bind_proof(&proof, "va_k", "other", "room", 100));
        assert!(!keys.check_bind_proof(&proof, "va_k", "user", "other", 100));
        assert!(!keys.check_bind_proof(&proof, "va_k", "user", "room", 101));
        assert!(!keys.check_bind_proof("k1.AAAA", "va_k", "user", "room", 100));
        // A rotated set still accepts it while the old key is listed, and not after.
        let rotated =
            SigningKeys::parse(&format!("{},{entry}", SigningKeys::generate_entry())).unwrap();
        assert!(rotated.check_bind_proof(&proof, "va_k", "user", "room", 100));
        let other = SigningKeys::parse(&SigningKeys::generate_entry()).unwrap();
        assert!(!other.check_bind_proof(&proof, "va_k", "user", "room", 100));
    }
}
