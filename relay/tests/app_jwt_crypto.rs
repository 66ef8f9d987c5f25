//! jsonwebtoken 10 resolves its crypto through one process-wide provider, and livekit-api installs
//! an HMAC-only one the first time it signs or verifies a LiveKit token. The relay installs the
//! full RustCrypto provider first; this checks, in a process of its own (one test, so nothing
//! runs before it), that LiveKit tokens still sign and verify and that the app's RS256 and ES256
//! session JWTs verify after LiveKit tokens were minted.

use std::path::Path;
use std::time::Duration;

use jsonwebtoken::{Algorithm, EncodingKey, Header};
use livekit_api::access_token::TokenVerifier;
use relay::app_jwt::{AppJwtConfig, AppJwtKeys};
use relay::config::Secret;
use relay::tokens::{Subject, TokenService};
use serde_json::json;

const LIVEKIT_SECRET: &str = "test-livekit-secret-0123456789abcdef";

fn fixture(name: &str) -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

#[test]
fn rsa_and_ec_session_tokens_verify_after_livekit_tokens_were_minted() {
    // What `main` does first of all.
    assert!(relay::tokens::install_jwt_crypto());

    let service = TokenService::new(
        "devkey",
        &Secret::new(LIVEKIT_SECRET),
        "ws://127.0.0.1:7880",
        Duration::from_secs(600),
        std::sync::Arc::new(
            relay::sessions::SigningKeys::parse(&relay::sessions::SigningKeys::generate_entry())
                .unwrap(),
        ),
    );
    let subject = Subject {
        identity: Some("user-1".into()),
        name: None,
        room: Some("room-1".into()),
    };
    let minted = service.mint(&subject).expect("LiveKit token");
    let claims = TokenVerifier::with_api_key("devkey", LIVEKIT_SECRET)
        .verify(&minted.token)
        .expect("LiveKit's own verifier accepts it");
    assert_eq!(claims.sub, "user-1");
    assert!(service.verify(&minted.token).is_ok());
    // livekit-api tried to install its own provider by now; the full one is still in place.
    assert!(relay::tokens::install_jwt_crypto());

    let exp = relay::tokens::unix_now().as_secs() + 300;
    let body =
        json!({"iss": "https://app.example", "aud": "voice-relay", "sub": "user-1", "exp": exp});
    for (public, private, alg) in [
        ("app-rsa.pub", "app-rsa.key", Algorithm::RS256),
        ("app-ec.pub", "app-ec.key", Algorithm::ES256),
    ] {
        let pem = std::fs::read(fixture(private)).unwrap();
        let key = match alg {
            Algorithm::RS256 => EncodingKey::from_rsa_pem(&pem).unwrap(),
            _ => EncodingKey::from_ec_pem(&pem).unwrap(),
        };
        let jwt = jsonwebtoken::encode(&Header::new(alg), &body, &key).expect("signs");
        let verifier = AppJwtConfig::new(
            AppJwtKeys::from_public_key_file(&fixture(public)).unwrap(),
            "https://app.example",
            vec!["voice-relay".into()],
            30,
            "room",
        );
        let claims = verifier
            .verify(&jwt)
            .unwrap_or_else(|e| panic!("{alg:?}: {e}"));
        assert_eq!(claims.subject, "user-1");
    }
}
