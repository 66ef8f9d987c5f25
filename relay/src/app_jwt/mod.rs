//! The app's own session JWTs (`RELAY_TOKEN_MODE=app-jwt`): the browser presents the JWT its app
//! gave it, and the relay mints a LiveKit token for that user. Verification is jsonwebtoken's
//! (RustCrypto backend); this module decides which key and which algorithms apply.
//!
//! Each configured key accepts only the algorithms of its own kind (an HMAC secret only HS*, an
//! RSA key only RS*/PS*, a P-256 key only ES256, …), so a JWT can never pick how it is checked:
//! `alg: none` does not parse, and an RSA public key is never used as an HMAC secret.

use std::collections::HashMap;
use std::path::Path;

use jsonwebtoken::crypto::rust_crypto::DEFAULT_PROVIDER;
use jsonwebtoken::errors::ErrorKind;
use jsonwebtoken::jwk::{AlgorithmParameters, EllipticCurve, Jwk, PublicKeyUse};
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde_json::{Map, Value};

use relay_wire::fingerprint;

/// Shortest HMAC secret accepted: HS256 wants at least its hash's 256 bits (RFC 7518 §3.2).
pub const MIN_HMAC_SECRET_LEN: usize = 32;

const HMAC_ALGORITHMS: [Algorithm; 3] = [Algorithm::HS256, Algorithm::HS384, Algorithm::HS512];
const RSA_ALGORITHMS: [Algorithm; 6] = [
    Algorithm::RS256,
    Algorithm::RS384,
    Algorithm::RS512,
    Algorithm::PS256,
    Algorithm::PS384,
    Algorithm::PS512,
];

/// One verification key with the algorithms it may verify.
#[derive(Clone)]
struct VerifyKey {
    key: DecodingKey,
    algorithms: Vec<Algorithm>,
    /// What it is, for `Debug` and messages: `HS secret <fp>`, `RSA key`, `EC P-256 key`, ….
    label: String,
}

impl VerifyKey {
    /// Builds the key and proves that it makes a verifier for each of its algorithms, so a key
    /// that would fail at the first request fails at start-up instead.
    fn new(key: DecodingKey, algorithms: Vec<Algorithm>, label: String) -> Result<Self, String> {
        for alg in &algorithms {
            (DEFAULT_PROVIDER.verifier_factory)(alg, &key)
                .map_err(|err| format!("the {label} cannot verify {alg:?}: {err}"))?;
        }
        Ok(VerifyKey {
            key,
            algorithms,
            label,
        })
    }
}

/// Where the app's JWTs are verified: one key, or a JWKS whose keys are chosen by `kid`.
#[derive(Clone)]
pub struct AppJwtKeys(KeySet);

#[derive(Clone)]
enum KeySet {
    One(VerifyKey),
    ByKid(HashMap<String, VerifyKey>),
}

impl std::fmt::Debug for AppJwtKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.0 {
            KeySet::One(k) => write!(f, "One({})", k.label),
            KeySet::ByKid(keys) => {
                let mut kids: Vec<&String> = keys.keys().collect();
                kids.sort();
                write!(f, "ByKid({kids:?})")
            }
        }
    }
}

impl AppJwtKeys {
    /// An HMAC secret (`RELAY_APP_JWT_SECRET`): HS256, HS384 and HS512.
    pub fn from_secret(secret: &str) -> Result<AppJwtKeys, String> {
        if secret.len() < MIN_HMAC_SECRET_LEN {
            return Err(format!(
                "RELAY_APP_JWT_SECRET is shorter than {MIN_HMAC_SECRET_LEN} characters"
            ));
        }
        let label = format!("HS secret {}", fingerprint(secret));
        let key = VerifyKey::new(
            DecodingKey::from_secret(secret.as_bytes()),
            HMAC_ALGORITHMS.to_vec(),
            label,
        )?;
        Ok(AppJwtKeys(KeySet::One(key)))
    }

    /// A PEM public key (`RELAY_APP_JWT_PUBLIC_KEY_FILE`): RSA (RS*/PS*), EC P-256 (ES256),
    /// EC P-384 (ES384) or Ed25519 (EdDSA).
    pub fn from_public_key_file(path: &Path) -> Result<AppJwtKeys, String> {
        let name = "RELAY_APP_JWT_PUBLIC_KEY_FILE";
        let pem = std::fs::read(path)
            .map_err(|err| format!("{name} {}: cannot read it: {err}", path.display()))?;
        let key = public_key_from_pem(&pem)
            .map_err(|problem| format!("{name} {}: {problem}", path.display()))?;
        Ok(AppJwtKeys(KeySet::One(key)))
    }

    /// A JWKS file (`RELAY_APP_JWT_JWKS_FILE`): every signing key with a `kid`. Keys marked
    /// `"use":"enc"` are skipped; symmetric (`oct`) keys are refused (a JWKS is public).
    pub fn from_jwks_file(path: &Path) -> Result<AppJwtKeys, String> {
        let name = "RELAY_APP_JWT_JWKS_FILE";
        let text = std::fs::read_to_string(path)
            .map_err(|err| format!("{name} {}: cannot read it: {err}", path.display()))?;
        from_jwks(&text).map_err(|problem| format!("{name} {}: {problem}", path.display()))
    }

    fn choose(&self, kid: Option<&str>) -> Result<&VerifyKey, AppJwtError> {
        match &self.0 {
            KeySet::One(k) => Ok(k),
            KeySet::ByKid(keys) => {
                let kid = kid.ok_or(AppJwtError::Invalid("its header names no key (kid)"))?;
                keys.get(kid).ok_or(AppJwtError::Invalid(
                    "its key id (kid) is not in the key set",
                ))
            }
        }
    }
}

fn public_key_from_pem(pem: &[u8]) -> Result<VerifyKey, String> {
    let text = String::from_utf8_lossy(pem);
    if text.contains("PRIVATE KEY") {
        return Err("this is a private key; give the relay the public key only".into());
    }
    if let Ok(key) = DecodingKey::from_rsa_pem(pem) {
        return VerifyKey::new(key, RSA_ALGORITHMS.to_vec(), "RSA public key".into());
    }
    if let Ok(key) = DecodingKey::from_ec_pem(pem) {
        // The key is the SEC1 point: 65 bytes on P-256, 97 on P-384.
        let (alg, curve) = match key.as_bytes().len() {
            65 => (Algorithm::ES256, "P-256"),
            97 => (Algorithm::ES384, "P-384"),
            _ => return Err("an EC key on a curve other than P-256 or P-384".into()),
        };
        return VerifyKey::new(key, vec![alg], format!("EC {curve} public key"));
    }
    if let Ok(key) = DecodingKey::from_ed_pem(pem) {
        return VerifyKey::new(key, vec![Algorithm::EdDSA], "Ed25519 public key".into());
    }
    Err("not a PEM public key (RSA, EC P-256/P-384 or Ed25519)".into())
}

fn from_jwks(text: &str) -> Result<AppJwtKeys, String> {
    let set: Value = serde_json::from_str(text).map_err(|err| format!("not JSON: {err}"))?;
    let entries = set
        .get("keys")
        .and_then(Value::as_array)
        .ok_or("not a JWKS: no \"keys\" array")?;
    let mut keys = HashMap::new();
    for (i, entry) in entries.iter().enumerate() {
        let at = format!("key {}", i + 1);
        let jwk: Jwk = serde_json::from_value(entry.clone())
            .map_err(|err| format!("{at} is not a JWK this relay reads: {err}"))?;
        if matches!(jwk.common.public_key_use, Some(PublicKeyUse::Encryption)) {
            continue;
        }
        let kid = jwk
            .common
            .key_id
            .clone()
            .filter(|k| !k.is_empty())
            .ok_or_else(|| format!("{at} has no kid"))?;
        let at = format!("key {kid:?}");
        let by_type: Vec<Algorithm> = match &jwk.algorithm {
            AlgorithmParameters::RSA(_) => RSA_ALGORITHMS.to_vec(),
            AlgorithmParameters::EllipticCurve(ec) => match ec.curve {
                EllipticCurve::P256 => vec![Algorithm::ES256],
                EllipticCurve::P384 => vec![Algorithm::ES384],
                _ => return Err(format!("{at} is on a curve this relay does not verify")),
            },
            AlgorithmParameters::OctetKeyPair(_) => vec![Algorithm::EdDSA],
            AlgorithmParameters::OctetKey(_) => {
                return Err(format!(
                    "{at} is a symmetric (oct) key; a JWKS is public: use RELAY_APP_JWT_SECRET \
                     for an HMAC secret"
                ));
            }
        };
        // A key that names its algorithm accepts that one only, and it must fit the key type.
        let algorithms = match &jwk.common.key_algorithm {
            None => by_type,
            Some(named) => {
                let alg: Algorithm = named
                    .to_string()
                    .parse()
                    .map_err(|_| format!("{at} names {named}, not a signing algorithm"))?;
                if !by_type.contains(&alg) {
                    return Err(format!(
                        "{at} names {named}, which does not fit its key type"
                    ));
                }
                vec![alg]
            }
        };
        let key = DecodingKey::from_jwk(&jwk).map_err(|err| format!("{at}: {err}"))?;
        let key = VerifyKey::new(key, algorithms, format!("JWKS {at}"))?;
        if keys.insert(kid, key).is_some() {
            return Err(format!("{at} appears twice"));
        }
    }
    if keys.is_empty() {
        return Err("holds no signing key".into());
    }
    Ok(AppJwtKeys(KeySet::ByKid(keys)))
}

/// The validated app-JWT settings: keys, required issuer and audience, leeway, room claim.
#[derive(Clone)]
pub struct AppJwtConfig {
    keys: AppJwtKeys,
    issuer: String,
    audience: Vec<String>,
    leeway_secs: u64,
    room_claim: String,
}

impl std::fmt::Debug for AppJwtConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AppJwtConfig")
            .field("keys", &self.keys)
            .field("issuer", &self.issuer)
            .field("audience", &self.audience)
            .field("leeway_secs", &self.leeway_secs)
            .field("room_claim", &self.room_claim)
            .finish()
    }
}

/// What a valid app JWT says about its user.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AppClaims {
    /// `sub`: the LiveKit identity.
    pub subject: String,
    /// `name`, when present: the display name.
    pub name: Option<String>,
    /// The room claim, when present.
    pub room: Option<String>,
}

/// Why an app JWT does not get a token. Every case is a 401.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AppJwtError {
    #[error("no session token: send Authorization: Bearer <your app's session JWT>")]
    Missing,
    #[error("the session token is expired")]
    Expired,
    #[error("the session token is not valid: {0}")]
    Invalid(&'static str),
}

impl AppJwtConfig {
    pub fn new(
        keys: AppJwtKeys,
        issuer: &str,
        audience: Vec<String>,
        leeway_secs: u64,
        room_claim: &str,
    ) -> AppJwtConfig {
        AppJwtConfig {
            keys,
            issuer: issuer.to_owned(),
            audience,
            leeway_secs,
            room_claim: room_claim.to_owned(),
        }
    }

    /// Verifies `jwt`: its header's algorithm must be one its key accepts, then signature,
    /// `iss`, `aud`, `exp` (required), `nbf` (when present) and a string `sub`.
    pub fn verify(&self, jwt: &str) -> Result<AppClaims, AppJwtError> {
        let jwt = jwt.trim();
        if jwt.is_empty() {
            return Err(AppJwtError::Missing);
        }
        let header = jsonwebtoken::decode_header(jwt)
            .map_err(|_| AppJwtError::Invalid("malformed, or an algorithm that is not accepted"))?;
        let key = self.keys.choose(header.kid.as_deref())?;
        if !key.algorithms.contains(&header.alg) {
            return Err(AppJwtError::Invalid(
                "its algorithm does not match the configured key",
            ));
        }
        let mut validation = Validation::new(header.alg);
        validation.algorithms = key.algorithms.clone();
        validation.set_issuer(&[&self.issuer]);
        validation.set_audience(&self.audience);
        validation.set_required_spec_claims(&["exp", "iss", "aud", "sub"]);
        validation.leeway = self.leeway_secs;
        validation.validate_nbf = true;
        let data = jsonwebtoken::decode::<Map<String, Value>>(jwt, &key.key, &validation).map_err(
            |err| match err.kind() {
                ErrorKind::ExpiredSignature => AppJwtError::Expired,
                ErrorKind::InvalidSignature => AppJwtError::Invalid("bad signature"),
                ErrorKind::InvalidIssuer => AppJwtError::Invalid("wrong issuer"),
                ErrorKind::InvalidAudience => AppJwtError::Invalid("wrong audience"),
                ErrorKind::ImmatureSignature => AppJwtError::Invalid("not valid yet (nbf)"),
                ErrorKind::InvalidAlgorithm => {
                    AppJwtError::Invalid("its algorithm does not match the configured key")
                }
                ErrorKind::MissingRequiredClaim(_) => {
                    AppJwtError::Invalid("it lacks exp, iss, aud or sub")
                }
                _ => AppJwtError::Invalid("malformed"),
            },
        )?;
        let claims = data.claims;
        let subject = match claims.get("sub") {
            Some(Value::String(s)) if !s.trim().is_empty() => s.trim().to_owned(),
            _ => return Err(AppJwtError::Invalid("its sub is not a string")),
        };
        let name = match claims.get("name") {
            Some(Value::String(s)) if !s.trim().is_empty() => Some(s.trim().to_owned()),
            _ => None,
        };
        let room = match claims.get(&self.room_claim) {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) if s.trim().is_empty() => None,
            Some(Value::String(s)) => Some(s.trim().to_owned()),
            Some(_) => return Err(AppJwtError::Invalid("its room claim is not a string")),
        };
        Ok(AppClaims {
            subject,
            name,
            room,
        })
    }
}

#[cfg(test)]
mod tests;
