//! Secrets and their fingerprints: the only form a key, token or secret takes in a log line.

/// Short, stable, one-way name for a key, token or secret: the first 8 hex characters of its
/// SHA-256. This is the only form in which such values may reach a log line (and the form
/// `KeyStatus::fingerprint` reports).
pub fn fingerprint(value: &str) -> String {
    use sha2::{Digest, Sha256};
    let digest = Sha256::digest(value.as_bytes());
    hex::encode(&digest[..4])
}

/// A value's [`fingerprint`], computed only when formatted: log fields use `key = %Fp(&key)`, so
/// a line that the filter drops costs no hashing.
pub struct Fp<'a>(pub &'a str);

impl std::fmt::Display for Fp<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&fingerprint(self.0))
    }
}

/// A secret string (agent secret, LiveKit API secret, Vapi secret). Its `Debug` shows only the
/// fingerprint, so a secret inside a logged struct cannot leak.
#[derive(Clone)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: impl Into<String>) -> Self {
        Secret(value.into())
    }

    /// The secret itself, for the few places that must use it (signing, comparing, sending).
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Secret({})", fingerprint(&self.0))
    }
}
