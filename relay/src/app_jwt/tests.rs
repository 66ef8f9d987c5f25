use super::*;
use jsonwebtoken::{EncodingKey, Header};
use serde_json::json;

const SECRET: &str = "an-hmac-secret-of-at-least-32-chars!";

fn fixture(name: &str) -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

fn config(keys: AppJwtKeys) -> AppJwtConfig {
    assert!(crate::tokens::install_jwt_crypto());
    AppJwtConfig::new(
        keys,
        "https://app.example",
        vec!["voice-relay".into()],
        30,
        "room",
    )
}

fn now() -> u64 {
    crate::tokens::unix_now().as_secs()
}

fn claims() -> Value {
    json!({
        "iss": "https://app.example",
        "aud": "voice-relay",
        "sub": "user-42",
        "name": "Ada",
        "room": "team-7",
        "exp": now() + 300,
    })
}

fn sign(alg: Algorithm, kid: Option<&str>, key: &EncodingKey, claims: &Value) -> String {
    let mut header = Header::new(alg);
    header.kid = kid.map(str::to_owned);
    jsonwebtoken::encode(&header, claims, key).unwrap()
}

fn rsa_key() -> EncodingKey {
    EncodingKey::from_rsa_pem(&std::fs::read(fixture("app-rsa.key")).unwrap()).unwrap()
}

fn ec_key() -> EncodingKey {
    EncodingKey::from_ec_pem(&std::fs::read(fixture("app-ec.key")).unwrap()).unwrap()
}

fn hs_key() -> EncodingKey {
    EncodingKey::from_secret(SECRET.as_bytes())
}

fn with(mut base: Value, field: &str, value: Value) -> Value {
    base[field] = value;
    base
}

fn b64(value: &Value) -> String {
    use base64::Engine;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(value.to_string())
}

#[test]
fn valid_tokens_give_their_claims() {
    let hs = config(AppJwtKeys::from_secret(SECRET).unwrap());
    let got = hs
        .verify(&sign(Algorithm::HS256, None, &hs_key(), &claims()))
        .unwrap();
    assert_eq!(
        got,
        AppClaims {
            subject: "user-42".into(),
            name: Some("Ada".into()),
            room: Some("team-7".into())
        }
    );
    let rsa = config(AppJwtKeys::from_public_key_file(&fixture("app-rsa.pub")).unwrap());
    assert!(
        rsa.verify(&sign(Algorithm::RS256, None, &rsa_key(), &claims()))
            .is_ok()
    );
    assert!(
        rsa.verify(&sign(Algorithm::PS256, None, &rsa_key(), &claims()))
            .is_ok()
    );
    let ec = config(AppJwtKeys::from_public_key_file(&fixture("app-ec.pub")).unwrap());
    let plain = json!({"iss": "https://app.example", "aud": ["other", "voice-relay"], "sub": "u", "exp": now() + 60});
    let got = ec
        .verify(&sign(Algorithm::ES256, None, &ec_key(), &plain))
        .unwrap();
    assert_eq!((got.name, got.room), (None, None));
}

#[test]
fn jwks_keys_are_chosen_by_kid() {
    let jwks = config(AppJwtKeys::from_jwks_file(&fixture("app.jwks.json")).unwrap());
    assert!(
        jwks.verify(&sign(
            Algorithm::RS256,
            Some("rsa-1"),
            &rsa_key(),
            &claims()
        ))
        .is_ok()
    );
    assert!(
        jwks.verify(&sign(Algorithm::ES256, Some("ec-1"), &ec_key(), &claims()))
            .is_ok()
    );
    let refused = [
        // The RSA key names RS256 in the set: PS256 is not accepted for it.
        sign(Algorithm::PS256, Some("rsa-1"), &rsa_key(), &claims()),
        // The EC key under the RSA key's id, and no id at all.
        sign(Algorithm::ES256, Some("rsa-1"), &ec_key(), &claims()),
        sign(Algorithm::ES256, None, &ec_key(), &claims()),
        sign(Algorithm::ES256, Some("nope"), &ec_key(), &claims()),
    ];
    for jwt in refused {
        assert!(
            matches!(jwks.verify(&jwt), Err(AppJwtError::Invalid(_))),
            "{jwt}"
        );
    }
}

#[test]
fn bad_tokens_are_refused() {
    let rsa = config(AppJwtKeys::from_public_key_file(&fixture("app-rsa.pub")).unwrap());
    let ok = |c: &Value| sign(Algorithm::RS256, None, &rsa_key(), c);
    let cases = [
        (
            "expired",
            ok(&with(claims(), "exp", json!(now() - 120))),
            "expired",
        ),
        (
            "wrong audience",
            ok(&with(claims(), "aud", json!("someone-else"))),
            "wrong audience",
        ),
        (
            "wrong issuer",
            ok(&with(claims(), "iss", json!("https://evil.example"))),
            "wrong issuer",
        ),
        (
            "not yet",
            ok(&with(claims(), "nbf", json!(now() + 600))),
            "nbf",
        ),
        (
            "room not a string",
            ok(&with(claims(), "room", json!(7))),
            "room claim",
        ),
        (
            "sub not a string",
            ok(&with(claims(), "sub", json!(7))),
            "sub",
        ),
        // Signed with the HMAC secret: an RSA key is never an HMAC secret.
        (
            "HS256",
            sign(Algorithm::HS256, None, &hs_key(), &claims()),
            "algorithm",
        ),
        (
            "ES256 by another key",
            sign(Algorithm::ES256, None, &ec_key(), &claims()),
            "algorithm",
        ),
    ];
    for (what, jwt, expected) in cases {
        let err = rsa.verify(&jwt).unwrap_err().to_string();
        assert!(err.contains(expected), "{what}: {err}");
    }
    let mut no_exp = claims();
    no_exp.as_object_mut().unwrap().remove("exp");
    assert!(rsa.verify(&ok(&no_exp)).is_err(), "exp is required");
    // Within the leeway an expired token still passes.
    assert!(
        rsa.verify(&ok(&with(claims(), "exp", json!(now() - 10))))
            .is_ok()
    );

    // A forged signature: the payload changed after signing.
    let good = ok(&claims());
    let parts: Vec<&str> = good.split('.').collect();
    let forged = format!(
        "{}.{}.{}",
        parts[0],
        b64(&with(claims(), "sub", json!("admin"))),
        parts[2]
    );
    assert_eq!(
        rsa.verify(&forged).unwrap_err(),
        AppJwtError::Invalid("bad signature")
    );
    // Signed with another RSA key.
    let other = config(AppJwtKeys::from_public_key_file(&fixture("other-rsa.pub")).unwrap());
    assert!(other.verify(&good).is_err());
    // alg: none, and garbage.
    let none = format!(
        "{}.{}.",
        b64(&json!({"alg": "none", "typ": "JWT"})),
        b64(&claims())
    );
    assert!(matches!(rsa.verify(&none), Err(AppJwtError::Invalid(_))));
    assert_eq!(rsa.verify(" "), Err(AppJwtError::Missing));
    assert!(rsa.verify("a.b.c").is_err());
}

#[test]
fn key_sources_are_checked() {
    assert!(AppJwtKeys::from_secret("short").is_err());
    let oct = r#"{"keys":[{"kty":"oct","k":"c2VjcmV0","kid":"s"}]}"#;
    assert!(from_jwks(oct).unwrap_err().contains("symmetric"));
    assert!(
        from_jwks(r#"{"keys":[]}"#)
            .unwrap_err()
            .contains("no signing key")
    );
    assert!(from_jwks(r#"{"nokeys":1}"#).is_err());
    let jwks: Value =
        serde_json::from_str(&std::fs::read_to_string(fixture("app.jwks.json")).unwrap()).unwrap();
    let mut no_kid = jwks.clone();
    no_kid["keys"][0].as_object_mut().unwrap().remove("kid");
    assert!(
        from_jwks(&no_kid.to_string())
            .unwrap_err()
            .contains("no kid")
    );
    let mut misfit = jwks.clone();
    misfit["keys"][0]["alg"] = json!("ES256");
    assert!(
        from_jwks(&misfit.to_string())
            .unwrap_err()
            .contains("does not fit")
    );
    let mut enc = jwks;
    enc["keys"][1]["use"] = json!("enc");
    assert!(
        from_jwks(&enc.to_string()).is_ok(),
        "an encryption key is skipped"
    );
}
