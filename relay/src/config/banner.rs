//! The start-up line that says who may get a token.

use super::{Config, TokenMode};

/// One start-up line saying who may get a token; a loud warning in open mode. `main` writes it
/// before the relay listens.
pub fn announce_token_mode(config: &Config) {
    match config.token_mode {
        TokenMode::Open => tracing::warn!(
            token_mode = "open",
            "RELAY_TOKEN_MODE=open: FOR DEVELOPMENT ONLY. Anyone who reaches POST /token gets a \
             LiveKit token (in a fresh room of its own) and spends this server's capacity; in \
             production set RELAY_TOKEN_MODE=issuer (the app's backend asks with \
             RELAY_TOKEN_ISSUER_SECRET) or app-jwt"
        ),
        mode => tracing::info!(
            token_mode = mode.as_str(),
            issuer_secrets = config.issuer_secrets.len(),
            bare_keys = config.allow_bare_keys,
            trusted_proxies = config.trusted_proxies.len(),
            "token service: {}",
            match mode {
                TokenMode::Issuer => "the app's backend asks with the issuer secret",
                _ => "browsers present the app's session JWT",
            }
        ),
    }
    if config.allow_bare_keys {
        tracing::info!("RELAY_ALLOW_BARE_KEYS=true: voice-agent:register binds a bare key once");
    }
}
