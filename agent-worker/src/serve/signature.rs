//! Vapi's HMAC webhook credential: each message carries `x-timestamp` (Unix seconds, or
//! milliseconds) and `x-signature`, the hex HMAC-SHA256 keyed with `VAPI_SECRET` over
//! `{timestamp}.{body}`. A message is taken when its signature verifies, its timestamp is
//! within five minutes of now, and the same signed message was not taken before (a replay is
//! refused until its timestamp is out of the window anyway).

use dashmap::DashMap;
use hmac::{Hmac, Mac};
use relay_wire::Secret;
use sha2::Sha256;

/// How far a message's timestamp may be from now, in seconds, either way.
pub const WINDOW_SECS: u64 = 300;
/// Most signed messages remembered for the replay check.
const MAX_SEEN: usize = 100_000;

/// Why a Vapi message was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rejected {
    /// No `x-signature` or `x-timestamp`, or not of their form.
    Missing,
    /// The signature is not the body's under this secret.
    BadSignature,
    /// The timestamp is more than [`WINDOW_SECS`] from now.
    Stale,
    /// This signed message was taken before.
    Replayed,
    /// Too many messages to remember within the window: freshness cannot be told.
    Busy,
}

impl Rejected {
    pub fn message(self) -> &'static str {
        match self {
            Rejected::Missing => {
                "x-signature and x-timestamp are required (Vapi's HMAC credential)"
            }
            Rejected::BadSignature => "the signature does not verify",
            Rejected::Stale => "the timestamp is more than five minutes from now",
            Rejected::Replayed => "this message was already taken",
            Rejected::Busy => "too many messages to check for replays; try again",
        }
    }
}

pub struct VapiSigning {
    secret: Secret,
    /// Signatures taken, with the Unix second after which they can be forgotten.
    seen: DashMap<[u8; 32], u64>,
}

/// The signature of `body` at `timestamp` under `secret`, as Vapi sends it (hex).
pub fn sign(secret: &str, timestamp: &str, body: &[u8]) -> String {
    hex::encode(mac(secret, timestamp, body).finalize().into_bytes())
}

fn mac(secret: &str, timestamp: &str, body: &[u8]) -> Hmac<Sha256> {
    let mut mac =
        <Hmac<Sha256> as Mac>::new_from_slice(secret.as_bytes()).expect("HMAC takes any key");
    mac.update(timestamp.as_bytes());
    mac.update(b".");
    mac.update(body);
    mac
}

impl VapiSigning {
    pub fn new(secret: &Secret) -> Self {
        VapiSigning {
            secret: secret.clone(),
            seen: DashMap::new(),
        }
    }

    /// Checks one message: `signature` and `timestamp` as the headers gave them, at Unix
    /// second `now`. A message that passes is remembered (a second delivery is a replay).
    pub fn check(
        &self,
        signature: Option<&str>,
        timestamp: Option<&str>,
        body: &[u8],
        now: u64,
    ) -> Result<(), Rejected> {
        let (Some(signature), Some(timestamp)) = (signature, timestamp) else {
            return Err(Rejected::Missing);
        };
        let signature = signature.trim();
        let signature = signature.strip_prefix("sha256=").unwrap_or(signature);
        let timestamp = timestamp.trim();
        let sent: u64 = timestamp.parse().map_err(|_| Rejected::Missing)?;
        let sent = if sent > 100_000_000_000 {
            sent / 1000
        } else {
            sent
        };
        let given: [u8; 32] = hex::decode(signature)
            .ok()
            .and_then(|b| b.try_into().ok())
            .ok_or(Rejected::Missing)?;
        mac(self.secret.expose(), timestamp, body)
            .verify_slice(&given)
            .map_err(|_| Rejected::BadSignature)?;
        if sent.abs_diff(now) > WINDOW_SECS {
            return Err(Rejected::Stale);
        }
        if self.seen.len() >= MAX_SEEN {
            self.sweep(now);
            if self.seen.len() >= MAX_SEEN {
                return Err(Rejected::Busy);
            }
        }
        match self.seen.entry(given) {
            dashmap::Entry::Occupied(_) => Err(Rejected::Replayed),
            dashmap::Entry::Vacant(slot) => {
                slot.insert(sent + WINDOW_SECS);
                Ok(())
            }
        }
    }

    /// Forgets the messages whose timestamps left the window.
    pub fn sweep(&self, now: u64) {
        self.seen.retain(|_, until| *until >= now);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &str = "vapi-hmac-secret-0123456789";

    #[test]
    fn a_signed_fresh_message_passes_once() {
        let v = VapiSigning::new(&Secret::new(SECRET));
        let body = br#"{"message":{"type":"tool-calls"}}"#;
        let now = 1_800_000_000;
        let ts = now.to_string();
        let sig = sign(SECRET, &ts, body);
        assert_eq!(v.check(Some(&sig), Some(&ts), body, now), Ok(()));
        assert_eq!(
            v.check(Some(&sig), Some(&ts), body, now + 1),
            Err(Rejected::Replayed)
        );
        // Milliseconds are taken too.
        let ms = (now * 1000 + 5).to_string();
        let sig = sign(SECRET, &ms, body);
        assert_eq!(v.check(Some(&sig), Some(&ms), body, now), Ok(()));
    }

    #[test]
    fn forged_stale_and_bare_messages_are_refused() {
        let v = VapiSigning::new(&Secret::new(SECRET));
        let body = b"{}";
        let now = 1_800_000_000;
        let ts = now.to_string();
        let other = sign("another-secret-0123456789", &ts, body);
        assert_eq!(
            v.check(Some(&other), Some(&ts), body, now),
            Err(Rejected::BadSignature)
        );
        let sig = sign(SECRET, &ts, body);
        assert_eq!(
            v.check(Some(&sig), Some(&ts), b"{\"x\":1}", now),
            Err(Rejected::BadSignature),
            "another body"
        );
        let old = (now - WINDOW_SECS - 1).to_string();
        let sig_old = sign(SECRET, &old, body);
        assert_eq!(
            v.check(Some(&sig_old), Some(&old), body, now),
            Err(Rejected::Stale)
        );
        assert_eq!(v.check(None, Some(&ts), body, now), Err(Rejected::Missing));
        assert_eq!(
            v.check(Some("zz"), Some(&ts), body, now),
            Err(Rejected::Missing)
        );
        // Swept once out of the window.
        assert_eq!(v.check(Some(&sig), Some(&ts), body, now), Ok(()));
        v.sweep(now + 2 * WINDOW_SECS);
        assert!(v.seen.is_empty());
    }
}
