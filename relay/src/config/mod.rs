//! Relay configuration: read from the environment (flags mirror it), validated as a whole before
//! anything binds. Secrets live in [`Secret`], whose `Debug` and `Display` show a fingerprint only.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use ipnet::IpNet;

use crate::app_jwt::AppJwtConfig;
use crate::sessions::SigningKeys;
pub use redis_url::{RedisTarget, SentinelTarget};
pub use relay_wire::{Secret, fingerprint};

mod app_jwt;
mod banner;
mod credentials;
mod options;
mod redis_url;
#[cfg(test)]
mod tests;

use app_jwt::app_jwt_config;
pub use banner::announce_token_mode;
pub use options::{Cli, Command, LogFormat, Options, RuntimeKind};

/// A configuration problem, reported before anything starts.
#[derive(Debug, thiserror::Error)]
#[error("configuration error: {0}")]
pub struct ConfigError(pub String);

pub use credentials::MIN_SERVER_SECRET_LEN;
/// Shortest token-issuer secret accepted: it stands for the app's authenticated users.
pub const MIN_ISSUER_SECRET_LEN: usize = 16;
/// Longest `Idempotency-Key` window: outcomes are held in memory (or Redis) for that long.
pub const MAX_IDEMPOTENCY_WINDOW_SECS: u64 = 86_400;
/// Largest clock skew allowed on the app's JWTs: more would keep expired sessions alive.
pub const MAX_APP_JWT_LEEWAY_SECS: u64 = 300;

/// Who may get a token from `POST /token` (`RELAY_TOKEN_MODE`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenMode {
    /// The app's backend, server to server, with the issuer secret; it names room and identity.
    Issuer,
    /// A browser with the app's own session JWT; identity and room come from its claims.
    AppJwt,
    /// Anyone, always in a fresh room of its own: development and demos only.
    Open,
}

impl TokenMode {
    pub fn parse(value: &str) -> Option<TokenMode> {
        match value.trim().to_ascii_lowercase().as_str() {
            "issuer" => Some(TokenMode::Issuer),
            "app-jwt" | "app_jwt" => Some(TokenMode::AppJwt),
            "open" => Some(TokenMode::Open),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            TokenMode::Issuer => "issuer",
            TokenMode::AppJwt => "app-jwt",
            TokenMode::Open => "open",
        }
    }
}

/// The header a trusted proxy writes the client's address into (`RELAY_FORWARDED_HEADER`). One
/// of them, never both: a proxy passes the other one through as the client sent it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ForwardedHeader {
    /// `X-Forwarded-For: client, proxy1, …` (HAProxy `option forwardfor`, nginx, most ingresses).
    XForwardedFor,
    /// `Forwarded: for=client, for=proxy1` (RFC 7239).
    Forwarded,
}

/// Reads a boolean setting: true/false, 1/0, yes/no, on/off.
fn parse_bool(value: &str) -> Option<bool> {
    match value.trim().to_ascii_lowercase().as_str() {
        "true" | "1" | "yes" | "on" => Some(true),
        "false" | "0" | "no" | "off" | "" => Some(false),
        _ => None,
    }
}

/// Reads a comma-separated list of secrets, checking each one's length.
fn secret_list(problems: &mut Vec<String>, name: &str, value: &str, min: usize) -> Vec<Secret> {
    let secrets: Vec<Secret> = value
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(Secret::new)
        .collect();
    if secrets.is_empty() {
        problems.push(format!("{name} holds no secret"));
    }
    for (i, s) in secrets.iter().enumerate() {
        if s.expose().starts_with("replace-me") {
            problems.push(format!(
                "{name} entry {} is still the example's placeholder: put a secret of your own \
                 there (openssl rand -hex 32)",
                i + 1
            ));
        } else if s.expose().chars().count() < min {
            problems.push(format!(
                "{name} entry {} is shorter than {min} characters",
                i + 1
            ));
        }
    }
    secrets
}

/// Reads `RELAY_TRUSTED_PROXIES`: CIDRs, or single addresses (taken as /32 or /128).
pub fn parse_proxies(value: &str) -> Result<Vec<IpNet>, String> {
    let mut nets = Vec::new();
    for entry in value
        .split([',', ' ', '\t', '\n'])
        .map(str::trim)
        .filter(|s| !s.is_empty())
    {
        let net = entry
            .parse::<IpNet>()
            .or_else(|_| entry.parse::<std::net::IpAddr>().map(IpNet::from))
            .map_err(|_| {
                format!(
                    "RELAY_TRUSTED_PROXIES entry {entry:?} is not a CIDR (10.0.0.0/8) or an address"
                )
            })?;
        nets.push(net.trunc());
    }
    Ok(nets)
}

/// The validated configuration the relay runs on.
#[derive(Debug, Clone)]
pub struct Config {
    pub addr: SocketAddr,
    pub livekit_url: String,
    pub livekit_api_key: String,
    pub livekit_api_secret: Secret,
    /// The agent worker's credential (rotation list; the first is the current one).
    pub worker_secrets: Vec<Secret>,
    /// The operators' credential (rotation list); empty when none is configured.
    pub operator_secrets: Vec<Secret>,
    /// The keys that sign session tokens and bind proofs (always set once validated).
    pub session_keys: Arc<SigningKeys>,
    pub token_mode: TokenMode,
    /// Issuer mode: the secrets the app's backend may present (empty in the other modes).
    pub issuer_secrets: Vec<Secret>,
    /// App-JWT mode: how the app's session JWTs are verified (`None` in the other modes).
    pub app_jwt: Option<AppJwtConfig>,
    /// Whether `voice-agent:register` binds a bare key.
    pub allow_bare_keys: bool,
    /// Proxies whose forwarded client address the per-address limits believe.
    pub trusted_proxies: Vec<IpNet>,
    pub forwarded_header: ForwardedHeader,
    pub allowed_origins: Vec<String>,
    /// Several nodes on this Redis; `None` for one node in memory. May hold a password.
    pub redis_url: Option<Secret>,
    /// PEM certificates trusted for `rediss://` instead of the system's roots.
    pub redis_ca_file: Option<std::path::PathBuf>,
    pub web_dir: std::path::PathBuf,
    pub token_ttl: Duration,
    pub unbound_key_ttl: Duration,
    pub reconnect_grace: Duration,
    pub unbound_socket: Duration,
    pub default_timeout: Duration,
    pub max_timeout: Duration,
    /// How long an `Idempotency-Key` outcome is kept for retries.
    pub idempotency_window: Duration,
    pub max_body_bytes: usize,
    pub max_inflight_per_key: usize,
    /// Most binds running at once on this node, and how long a bind waits for its turn.
    pub bind_concurrency: usize,
    pub bind_wait: Duration,
    pub token_rate_per_min: u32,
    /// Calls one session may have in flight, and start per second.
    pub session_max_inflight: usize,
    pub session_rate_per_sec: u32,
    /// Longest lifetime of a session token.
    pub session_max_ttl: Duration,
    pub drain: Duration,
    pub log_format: LogFormat,
    pub runtime: RuntimeKind,
}

impl Config {
    /// Checks every option and gathers all problems into one error.
    pub fn from_options(o: Options) -> Result<Config, ConfigError> {
        let mut problems = Vec::new();
        let token_mode = TokenMode::parse(&o.token_mode);
        if token_mode.is_none() {
            problems.push(format!(
                "RELAY_TOKEN_MODE {:?} is not a mode: issuer (the default), app-jwt or open",
                o.token_mode
            ));
        }
        let app_jwt = if token_mode == Some(TokenMode::AppJwt) {
            app_jwt_config(&mut problems, &o)
        } else {
            None
        };
        let creds = credentials::credentials(&mut problems, &o);
        let mut required = |name: &str, v: Option<String>| match v.map(|s| s.trim().to_owned()) {
            Some(s) if !s.is_empty() => s,
            _ => {
                problems.push(format!("{name} is required"));
                String::new()
            }
        };
        let livekit_api_key = required("LIVEKIT_API_KEY", o.livekit_api_key);
        let livekit_api_secret = required("LIVEKIT_API_SECRET", o.livekit_api_secret);

        let issuer_secret = o
            .token_issuer_secret
            .as_deref()
            .map(|s| s.trim().to_owned())
            .filter(|s| !s.is_empty());
        let issuer_secrets = match (token_mode, &issuer_secret) {
            (Some(TokenMode::Issuer), None) => {
                problems.push(
                    "RELAY_TOKEN_ISSUER_SECRET is required: in RELAY_TOKEN_MODE=issuer (the \
                     default) the app's backend presents it to POST /token for the users it \
                     authenticated (Authorization: Bearer <secret>); for development without a \
                     backend, RELAY_TOKEN_MODE=open gives anyone a token in a fresh room"
                        .into(),
                );
                Vec::new()
            }
            (Some(TokenMode::Issuer), Some(value)) => {
                let secrets = secret_list(
                    &mut problems,
                    "RELAY_TOKEN_ISSUER_SECRET",
                    value,
                    MIN_ISSUER_SECRET_LEN,
                );
                credentials::check_issuer(&mut problems, &secrets, &creds);
                secrets
            }
            _ => Vec::new(),
        };
        let allow_bare_keys = parse_bool(&o.allow_bare_keys).unwrap_or_else(|| {
            problems.push(format!(
                "RELAY_ALLOW_BARE_KEYS {:?} is not true or false",
                o.allow_bare_keys
            ));
            false
        });
        let trusted_proxies = parse_proxies(o.trusted_proxies.as_deref().unwrap_or_default())
            .unwrap_or_else(|problem| {
                problems.push(problem);
                Vec::new()
            });
        let forwarded_header = match o.forwarded_header.trim().to_ascii_lowercase().as_str() {
            "x-forwarded-for" => ForwardedHeader::XForwardedFor,
            "forwarded" => ForwardedHeader::Forwarded,
            other => {
                problems.push(format!(
                    "RELAY_FORWARDED_HEADER {other:?} is not x-forwarded-for or forwarded"
                ));
                ForwardedHeader::XForwardedFor
            }
        };
        let redis_url = o
            .redis_url
            .map(|u| u.trim().to_owned())
            .filter(|u| !u.is_empty());
        let redis_target = redis_url.as_deref().map(RedisTarget::parse);
        if let Some(Err(problem)) = &redis_target {
            problems.push(problem.clone());
        }
        let redis_ca_file = o.redis_ca_file.filter(|p| !p.as_os_str().is_empty());
        if let Some(path) = &redis_ca_file {
            if !matches!(&redis_target, Some(Ok(t)) if t.tls()) {
                problems.push(
                    "RELAY_REDIS_CA_FILE is set but RELAY_REDIS_URL is not rediss:// or rediss+sentinel://"
                        .into(),
                );
            }
            if let Err(problem) = read_ca_file(path) {
                problems.push(problem);
            }
        }
        if !(o.livekit_url.starts_with("ws://")
            || o.livekit_url.starts_with("wss://")
            || o.livekit_url.starts_with("http://")
            || o.livekit_url.starts_with("https://"))
        {
            problems.push("LIVEKIT_URL must start with ws://, wss://, http:// or https://".into());
        }
        let allowed_origins: Vec<String> = o
            .allowed_origins
            .unwrap_or_default()
            .split(',')
            .map(|s| s.trim().trim_end_matches('/').to_owned())
            .filter(|s| !s.is_empty())
            .collect();
        for origin in &allowed_origins {
            if origin != "*" && !(origin.starts_with("http://") || origin.starts_with("https://")) {
                problems.push(format!(
                    "RELAY_ALLOWED_ORIGINS entry {origin:?} is not an http(s) origin"
                ));
            }
        }
        let positive = |problems: &mut Vec<String>, name: &str, v: u64| {
            if v == 0 {
                problems.push(format!("{name} must be greater than 0"));
            }
        };
        positive(&mut problems, "RELAY_TOKEN_TTL_SECS", o.token_ttl_secs);
        positive(
            &mut problems,
            "RELAY_UNBOUND_KEY_TTL_SECS",
            o.unbound_key_ttl_secs,
        );
        positive(
            &mut problems,
            "RELAY_DEFAULT_TIMEOUT_MS",
            o.default_timeout_ms,
        );
        positive(&mut problems, "RELAY_MAX_TIMEOUT_MS", o.max_timeout_ms);
        positive(
            &mut problems,
            "RELAY_MAX_BODY_BYTES",
            o.max_body_bytes as u64,
        );
        positive(
            &mut problems,
            "RELAY_MAX_INFLIGHT_PER_KEY",
            o.max_inflight_per_key as u64,
        );
        let session_max_inflight = o
            .session_max_inflight
            .unwrap_or((o.max_inflight_per_key / 2).max(1));
        positive(
            &mut problems,
            "RELAY_SESSION_MAX_INFLIGHT",
            session_max_inflight as u64,
        );
        positive(
            &mut problems,
            "RELAY_SESSION_RATE_PER_SEC",
            u64::from(o.session_rate_per_sec),
        );
        positive(
            &mut problems,
            "RELAY_SESSION_MAX_TTL_SECS",
            o.session_max_ttl_secs,
        );
        // One session must leave its key slots for another (a key with one slot has no room).
        if o.max_inflight_per_key > 1 && session_max_inflight >= o.max_inflight_per_key {
            problems.push(format!(
                "RELAY_SESSION_MAX_INFLIGHT ({session_max_inflight}) must be below \
                 RELAY_MAX_INFLIGHT_PER_KEY ({}): one agent session must not be able to take \
                 every slot of its key",
                o.max_inflight_per_key
            ));
        }
        positive(
            &mut problems,
            "RELAY_BIND_CONCURRENCY",
            o.bind_concurrency as u64,
        );
        positive(
            &mut problems,
            "RELAY_TOKEN_RATE_PER_MIN",
            u64::from(o.token_rate_per_min),
        );
        if o.default_timeout_ms > o.max_timeout_ms {
            problems.push("RELAY_DEFAULT_TIMEOUT_MS exceeds RELAY_MAX_TIMEOUT_MS".into());
        }
        // A retry must find the first call's outcome for as long as that call may run.
        if o.idempotency_window_secs.saturating_mul(1000) < o.max_timeout_ms
            || o.idempotency_window_secs > MAX_IDEMPOTENCY_WINDOW_SECS
        {
            problems.push(format!(
                "RELAY_IDEMPOTENCY_WINDOW_SECS must be between RELAY_MAX_TIMEOUT_MS ({} ms) and \
                 {MAX_IDEMPOTENCY_WINDOW_SECS} seconds",
                o.max_timeout_ms
            ));
        }

        let Some(session_keys) = creds.session_keys.filter(|_| problems.is_empty()) else {
            return Err(ConfigError(problems.join("; ")));
        };
        Ok(Config {
            addr: o.addr,
            livekit_url: o.livekit_url,
            livekit_api_key,
            livekit_api_secret: Secret::new(livekit_api_secret),
            worker_secrets: creds.worker,
            operator_secrets: creds.operator,
            session_keys,
            token_mode: token_mode.unwrap_or(TokenMode::Issuer),
            issuer_secrets,
            app_jwt,
            allow_bare_keys,
            trusted_proxies,
            forwarded_header,
            allowed_origins,
            redis_url: redis_url.map(Secret::new),
            redis_ca_file,
            web_dir: o.web_dir,
            token_ttl: Duration::from_secs(o.token_ttl_secs),
            unbound_key_ttl: Duration::from_secs(o.unbound_key_ttl_secs),
            reconnect_grace: Duration::from_millis(o.reconnect_grace_ms),
            unbound_socket: Duration::from_secs(o.unbound_socket_secs),
            default_timeout: Duration::from_millis(o.default_timeout_ms),
            max_timeout: Duration::from_millis(o.max_timeout_ms),
            idempotency_window: Duration::from_secs(o.idempotency_window_secs),
            max_body_bytes: o.max_body_bytes,
            max_inflight_per_key: o.max_inflight_per_key,
            bind_concurrency: o.bind_concurrency,
            bind_wait: Duration::from_millis(o.bind_wait_ms),
            token_rate_per_min: o.token_rate_per_min,
            session_max_inflight,
            session_rate_per_sec: o.session_rate_per_sec,
            session_max_ttl: Duration::from_secs(o.session_max_ttl_secs),
            drain: Duration::from_millis(o.drain_ms),
            log_format: o.log_format,
            runtime: o.runtime,
        })
    }
}

/// Reads `RELAY_REDIS_CA_FILE`: PEM text holding at least one certificate.
pub fn read_ca_file(path: &std::path::Path) -> Result<Vec<u8>, String> {
    let pem = std::fs::read(path).map_err(|e| {
        format!(
            "RELAY_REDIS_CA_FILE {}: cannot read it: {e}",
            path.display()
        )
    })?;
    if !pem
        .windows(b"-----BEGIN CERTIFICATE-----".len())
        .any(|w| w == b"-----BEGIN CERTIFICATE-----")
    {
        return Err(format!(
            "RELAY_REDIS_CA_FILE {} holds no PEM certificate",
            path.display()
        ));
    }
    Ok(pem)
}
