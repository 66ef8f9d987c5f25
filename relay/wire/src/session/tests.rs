//! The verifier against the hostile cases: every forged, expired, foreign or mis-addressed
//! token is refused with its reason, and a good one grants exactly what it names.

use ed25519_dalek::SigningKey;
use ed25519_dalek::pkcs8::EncodePrivateKey;
use jsonwebtoken::{Algorithm, EncodingKey, Header};

use super::*;

const KEY: &str = "va_00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";
const OTHER: &str = "va_ffeeddccbbaa99887766554433221100ffeeddccbbaa99887766554433221100";

fn signing(seed: u8) -> SigningKey {
    SigningKey::from_bytes(&[seed; 32])
}

fn encoding(key: &SigningKey) -> EncodingKey {
    EncodingKey::from_ed_der(key.to_pkcs8_der().unwrap().as_bytes())
}

fn decoding(key: &SigningKey) -> DecodingKey {
    use base64::Engine;
    let x = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(key.verifying_key().as_bytes());
    DecodingKey::from_ed_components(&x).unwrap()
}

fn now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

fn claims(key: &str) -> SessionClaims {
    let digest = key_digest(key);
    SessionClaims {
        iss: SESSION_ISSUER.into(),
        aud: SESSION_AUDIENCE.into(),
        sid: new_session_id(&digest, [7; 8]),
        sub: digest,
        room: Some("room-1".into()),
        identity: Some("user-1".into()),
        scope: "list call mode status".into(),
        tools: None,
        iat: now(),
        nbf: now(),
        exp: now() + 600,
    }
}

fn sign(claims: &SessionClaims, key: &SigningKey, kid: Option<&str>) -> String {
    let mut header = Header::new(Algorithm::EdDSA);
    header.kid = kid.map(str::to_owned);
    jsonwebtoken::encode(&header, claims, &encoding(key)).unwrap()
}

fn verifier() -> SessionVerifier {
    crate::session::tests::install();
    SessionVerifier::new([("k1".to_owned(), decoding(&signing(1)))])
}

pub(crate) fn install() {
    let _ = jsonwebtoken::crypto::rust_crypto::DEFAULT_PROVIDER.install_default();
}

#[test]
fn a_good_token_grants_what_it_names() {
    let token = sign(&claims(KEY), &signing(1), Some("k1"));
    let grant = verifier().verify(&token).unwrap();
    assert!(grant.names_key(KEY));
    assert!(!grant.names_key(OTHER));
    assert_eq!(grant.scopes, Scopes::all());
    assert_eq!(grant.room.as_deref(), Some("room-1"));
    assert!(grant.check(KEY, Scope::Call).is_ok());
    assert!(grant.check(OTHER, Scope::Call).is_err());
}

#[test]
fn scope_and_tools_limit_it() {
    let mut c = claims(KEY);
    c.scope = "list".into();
    c.tools = Some(vec!["draw_card".into()]);
    let grant = verifier()
        .verify(&sign(&c, &signing(1), Some("k1")))
        .unwrap();
    assert!(grant.check(KEY, Scope::List).is_ok());
    assert!(
        grant
            .check(KEY, Scope::Call)
            .unwrap_err()
            .contains("may not call")
    );
    assert!(grant.allows_tool("draw_card"));
    assert!(!grant.allows_tool("show_card"));
}

#[test]
fn forged_foreign_and_stale_tokens_are_refused() {
    let v = verifier();
    let good = claims(KEY);
    // Another Ed25519 key under the known kid.
    assert_eq!(
        v.verify(&sign(&good, &signing(2), Some("k1"))),
        Err(VerifyError::BadSignature)
    );
    // A kid this verifier does not know, and none at all.
    assert_eq!(
        v.verify(&sign(&good, &signing(1), Some("k9"))),
        Err(VerifyError::UnknownKid)
    );
    assert_eq!(
        v.verify(&sign(&good, &signing(1), None)),
        Err(VerifyError::UnknownKid)
    );
    // Expired beyond the leeway; within it still good.
    let mut c = good.clone();
    c.exp = now() - LEEWAY_SECS - 5;
    assert_eq!(
        v.verify(&sign(&c, &signing(1), Some("k1"))),
        Err(VerifyError::Expired)
    );
    c.exp = now() - 2;
    assert!(v.verify(&sign(&c, &signing(1), Some("k1"))).is_ok());
    // Not valid yet.
    let mut c = good.clone();
    c.nbf = now() + LEEWAY_SECS + 60;
    assert_eq!(
        v.verify(&sign(&c, &signing(1), Some("k1"))),
        Err(VerifyError::NotYetValid)
    );
    // Wrong audience and issuer.
    let mut c = good.clone();
    c.aud = "someone-else".into();
    assert_eq!(
        v.verify(&sign(&c, &signing(1), Some("k1"))),
        Err(VerifyError::WrongAudience)
    );
    let mut c = good.clone();
    c.iss = "another-relay".into();
    assert_eq!(
        v.verify(&sign(&c, &signing(1), Some("k1"))),
        Err(VerifyError::WrongIssuer)
    );
    // A session id that belongs to another key.
    let mut c = good.clone();
    c.sid = new_session_id(&key_digest(OTHER), [1; 8]);
    assert_eq!(
        v.verify(&sign(&c, &signing(1), Some("k1"))),
        Err(VerifyError::Malformed)
    );
    // An unknown scope (revoke is never one).
    let mut c = good;
    c.scope = "call revoke".into();
    assert_eq!(
        v.verify(&sign(&c, &signing(1), Some("k1"))),
        Err(VerifyError::Malformed)
    );
}

#[test]
fn alg_none_and_hmac_with_the_public_key_are_refused() {
    use base64::Engine;
    let b64 = |v: &[u8]| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v);
    let v = verifier();
    let payload = b64(&serde_json::to_vec(&claims(KEY)).unwrap());
    // alg none, no signature.
    let none = format!(
        "{}.{payload}.",
        b64(br#"{"alg":"none","typ":"JWT","kid":"k1"}"#)
    );
    assert!(matches!(
        v.verify(&none),
        Err(VerifyError::WrongAlgorithm | VerifyError::Malformed)
    ));
    // HS256 keyed with the public key's bytes (the classic confusion).
    let public = signing(1).verifying_key().to_bytes();
    let mut header = Header::new(Algorithm::HS256);
    header.kid = Some("k1".into());
    let hs =
        jsonwebtoken::encode(&header, &claims(KEY), &EncodingKey::from_secret(&public)).unwrap();
    assert_eq!(v.verify(&hs), Err(VerifyError::WrongAlgorithm));
    let hs_b64 = jsonwebtoken::encode(
        &header,
        &claims(KEY),
        &EncodingKey::from_secret(b64(&public).as_bytes()),
    )
    .unwrap();
    assert_eq!(v.verify(&hs_b64), Err(VerifyError::WrongAlgorithm));
    // Not a JWT at all.
    assert_eq!(v.verify("va_not-a-token"), Err(VerifyError::Malformed));
}

#[test]
fn the_jwks_gives_the_same_verifier() {
    use base64::Engine;
    let x = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .encode(signing(1).verifying_key().as_bytes());
    let jwks: JwkSet = serde_json::from_value(serde_json::json!({"keys": [
        {"kty": "OKP", "crv": "Ed25519", "x": x, "kid": "k1", "alg": "EdDSA", "use": "sig"},
        {"kty": "oct", "k": "c2VjcmV0", "kid": "h1"}
    ]}))
    .unwrap();
    let v = SessionVerifier::from_jwks(&jwks).unwrap();
    assert!(v.knows("k1") && !v.knows("h1"));
    install();
    assert!(
        v.verify(&sign(&claims(KEY), &signing(1), Some("k1")))
            .is_ok()
    );
}

#[test]
fn session_ids_carry_their_key() {
    let digest = key_digest(KEY);
    let id = new_session_id(&digest, [0xab; 8]);
    assert!(is_session_id(&id));
    assert_eq!(session_key_digest(&id), Some(digest.as_str()));
    assert!(!is_session_id("s_123"));
    assert!(!is_session_id(&id.to_uppercase()));
    assert_eq!(
        Scopes::from_names(["list", "call"]).unwrap().to_claim(),
        "list call"
    );
    assert!(Scopes::from_names(["revoke"]).is_none());
}
