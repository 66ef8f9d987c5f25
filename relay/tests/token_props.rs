//! Property tests of the token checks: `TokenService::verify` (the LiveKit token a tab presents
//! to bind) and `AppJwtConfig::verify` (the app's session JWT in app-jwt mode). Neither panics on
//! any input; a token minted here verifies back to what it was minted for; a token signed with
//! another secret, or altered anywhere, never verifies.

use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use jsonwebtoken::{EncodingKey, Header};
use proptest::prelude::*;
use relay::app_jwt::{AppJwtConfig, AppJwtKeys};
use relay::config::Secret;
use relay::tokens::{Subject, TokenService};
use relay_wire::is_api_key;
use serde_json::json;

const LIVEKIT_SECRET: &str = "prop-livekit-secret-0123456789abcdef";
const APP_SECRET: &str = "prop-app-session-secret-0123456789abcdef";
const ISSUER: &str = "https://app.example";
const AUDIENCE: &str = "voice-relay";

/// The relay's signing keys (its bind proofs), the same for every service of the run.
fn proofs() -> std::sync::Arc<relay::sessions::SigningKeys> {
    static KEYS: std::sync::OnceLock<std::sync::Arc<relay::sessions::SigningKeys>> =
        std::sync::OnceLock::new();
    KEYS.get_or_init(|| {
        std::sync::Arc::new(
            relay::sessions::SigningKeys::parse(&relay::sessions::SigningKeys::generate_entry())
                .unwrap(),
        )
    })
    .clone()
}

fn service(secret: &str) -> TokenService {
    TokenService::new(
        "devkey",
        &Secret::new(secret),
        "ws://127.0.0.1:7880",
        Duration::from_secs(600),
        proofs(),
    )
}

fn app_config() -> AppJwtConfig {
    assert!(relay::tokens::install_jwt_crypto());
    AppJwtConfig::new(
        AppJwtKeys::from_secret(APP_SECRET).expect("a long enough secret"),
        ISSUER,
        vec![AUDIENCE.into()],
        30,
        "room",
    )
}

/// Three dot-separated base64url segments of arbitrary bytes: the shape of a JWT, so parsing
/// gets past the first split.
fn jwt_shaped() -> impl Strategy<Value = String> {
    let segment = prop::collection::vec(any::<u8>(), 0..96).prop_map(|b| URL_SAFE_NO_PAD.encode(b));
    (segment.clone(), segment.clone(), segment).prop_map(|(h, p, s)| format!("{h}.{p}.{s}"))
}

/// A header and claims of the caller's choosing, encoded as a JWT with a made-up signature.
fn forged_json() -> impl Strategy<Value = String> {
    let algs = prop::sample::select(vec!["HS256", "none", "RS256", "EdDSA", "", "HS512"]);
    (algs, ".{0,40}", any::<i64>(), ".{0,20}").prop_map(|(alg, metadata, exp, sig)| {
        let header = URL_SAFE_NO_PAD.encode(json!({"alg": alg, "typ": "JWT"}).to_string());
        let claims = URL_SAFE_NO_PAD.encode(
            json!({"iss": "devkey", "sub": "x", "exp": exp, "metadata": metadata}).to_string(),
        );
        format!("{header}.{claims}.{}", URL_SAFE_NO_PAD.encode(sig))
    })
}

/// Any input a client could present: arbitrary text, JWT-shaped noise, or forged JSON.
fn presented() -> impl Strategy<Value = String> {
    prop_oneof![".{0,300}", jwt_shaped(), forged_json()]
}

/// Text without control characters, as the token service accepts it for names.
fn name() -> impl Strategy<Value = String> {
    "[^\\p{Cc}]{1,40}"
}

fn subject() -> impl Strategy<Value = Subject> {
    (
        prop::option::of(name()),
        prop::option::of(name()),
        prop::option::of("[A-Za-z0-9._-]{1,64}"),
    )
        .prop_map(|(identity, name, room)| Subject {
            identity,
            name,
            room,
        })
}

/// Replaces the character at `at` (modulo the length) with a different base64url character.
fn altered(token: &str, at: usize) -> String {
    let mut bytes = token.as_bytes().to_vec();
    let i = at % bytes.len();
    bytes[i] = if bytes[i] == b'A' { b'B' } else { b'A' };
    String::from_utf8(bytes).expect("ASCII")
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn livekit_verify_never_panics(input in presented()) {
        let tokens = service(LIVEKIT_SECRET);
        if let Ok(verified) = tokens.verify(&input) {
            // Nothing forged here can carry a valid signature.
            prop_assert!(false, "forged input verified to {}", verified.api_key);
        }
    }

    #[test]
    fn minted_tokens_verify_back_to_their_key(subject in subject()) {
        let tokens = service(LIVEKIT_SECRET);
        let minted = tokens.mint(&subject).expect("minted");
        prop_assert!(is_api_key(&minted.api_key));
        let verified = tokens.verify(&minted.token).expect("a minted token verifies");
        prop_assert_eq!(&verified.api_key, &minted.api_key);
        prop_assert_eq!(verified.exp, minted.expires_at);
        if let Some(room) = &subject.room {
            prop_assert_eq!(&minted.room_name, room);
        }
        if let Some(identity) = &subject.identity {
            prop_assert_eq!(&minted.identity, identity);
        }
        // Surrounding whitespace is what a copied header adds; it changes nothing.
        let padded = format!("  {}\n", minted.token);
        prop_assert_eq!(tokens.verify(&padded).expect("verifies").api_key, minted.api_key);
    }

    #[test]
    fn tokens_of_another_secret_or_altered_never_verify(subject in subject(), at in any::<usize>()) {
        let ours = service(LIVEKIT_SECRET);
        let theirs = service("another-livekit-secret-0123456789abcdef");
        let foreign = theirs.mint(&subject).expect("minted");
        prop_assert!(ours.verify(&foreign.token).is_err());
        let minted = ours.mint(&subject).expect("minted");
        let changed = altered(&minted.token, at);
        // A changed character either breaks the token or leaves the same signed content (the
        // last base64 character of a segment can carry unused bits): never another key.
        if let Ok(verified) = ours.verify(&changed) {
            prop_assert_eq!(verified.api_key, minted.api_key);
        }
    }

    #[test]
    fn app_jwt_verify_never_panics(input in presented()) {
        prop_assert!(app_config().verify(&input).is_err());
    }

    #[test]
    fn app_jwts_verify_back_to_their_claims(
        sub in "[^\\p{Cc}\\s][^\\p{Cc}]{0,60}[^\\p{Cc}\\s]",
        display in prop::option::of("[^\\p{Cc}\\s]{1,30}"),
        room in prop::option::of("[A-Za-z0-9._-]{1,64}"),
        at in any::<usize>(),
    ) {
        let now = relay::tokens::unix_now().as_secs();
        let mut claims = json!({"iss": ISSUER, "aud": AUDIENCE, "sub": sub, "exp": now + 300});
        if let Some(display) = &display {
            claims["name"] = json!(display);
        }
        if let Some(room) = &room {
            claims["room"] = json!(room);
        }
        let jwt = jsonwebtoken::encode(
            &Header::default(),
            &claims,
            &EncodingKey::from_secret(APP_SECRET.as_bytes()),
        )
        .expect("signed");
        let config = app_config();
        let verified = config.verify(&jwt).expect("a well-made session JWT verifies");
        prop_assert_eq!(verified.subject, sub.trim());
        prop_assert_eq!(verified.name, display);
        prop_assert_eq!(verified.room, room);
        let changed = altered(&jwt, at);
        if let Ok(again) = config.verify(&changed) {
            prop_assert_eq!(again, config.verify(&jwt).expect("verifies"));
        }
    }
}
