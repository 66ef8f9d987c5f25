//! The app-JWT mode's settings, checked together.

use super::{MAX_APP_JWT_LEEWAY_SECS, Options};
use crate::app_jwt::{AppJwtConfig, AppJwtKeys};

/// Checks the app-JWT settings and loads the verification key: exactly one key source, an
/// issuer and an audience, a sane leeway. `None` (with the problems recorded) when any is wrong.
pub(super) fn app_jwt_config(problems: &mut Vec<String>, o: &Options) -> Option<AppJwtConfig> {
    let before = problems.len();
    fn set(v: &Option<String>) -> Option<&str> {
        v.as_deref().map(str::trim).filter(|s| !s.is_empty())
    }
    let secret = set(&o.app_jwt_secret);
    let sources = [
        secret.is_some(),
        o.app_jwt_public_key_file.is_some(),
        o.app_jwt_jwks_file.is_some(),
    ];
    let keys = match sources.iter().filter(|s| **s).count() {
        0 => {
            problems.push(
                "RELAY_TOKEN_MODE=app-jwt needs the key that verifies the app's JWTs: \
                 RELAY_APP_JWT_SECRET (HS256), RELAY_APP_JWT_PUBLIC_KEY_FILE (RS256/ES256 PEM) \
                 or RELAY_APP_JWT_JWKS_FILE"
                    .into(),
            );
            None
        }
        1 => {
            let loaded = if let Some(secret) = secret {
                AppJwtKeys::from_secret(secret)
            } else if let Some(path) = &o.app_jwt_public_key_file {
                AppJwtKeys::from_public_key_file(path)
            } else if let Some(path) = &o.app_jwt_jwks_file {
                AppJwtKeys::from_jwks_file(path)
            } else {
                Err("no key source".into())
            };
            loaded.map_err(|problem| problems.push(problem)).ok()
        }
        _ => {
            problems.push(
                "set only one of RELAY_APP_JWT_SECRET, RELAY_APP_JWT_PUBLIC_KEY_FILE and \
                 RELAY_APP_JWT_JWKS_FILE"
                    .into(),
            );
            None
        }
    };
    let issuer = set(&o.app_jwt_issuer);
    if issuer.is_none() {
        problems.push(
            "RELAY_TOKEN_MODE=app-jwt needs RELAY_APP_JWT_ISSUER (the `iss` your app's JWTs carry)"
                .into(),
        );
    }
    let audience: Vec<String> = set(&o.app_jwt_audience)
        .unwrap_or_default()
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .collect();
    if audience.is_empty() {
        problems.push(
            "RELAY_TOKEN_MODE=app-jwt needs RELAY_APP_JWT_AUDIENCE (the `aud` your app's JWTs \
             carry for this relay)"
                .into(),
        );
    }
    if o.app_jwt_leeway_secs > MAX_APP_JWT_LEEWAY_SECS {
        problems.push(format!(
            "RELAY_APP_JWT_LEEWAY_SECS is above {MAX_APP_JWT_LEEWAY_SECS}"
        ));
    }
    let room_claim = o.app_jwt_room_claim.trim();
    if room_claim.is_empty() {
        problems.push("RELAY_APP_JWT_ROOM_CLAIM is empty".into());
    }
    if problems.len() > before {
        return None;
    }
    Some(AppJwtConfig::new(
        keys?,
        issuer?,
        audience,
        o.app_jwt_leeway_secs,
        room_claim,
    ))
}
