//! Relay configuration: read from the environment (flags mirror it), validated as a whole before
//! anything binds. Secrets live in [`Secret`], whose `Debug` and `Display` show a fingerprint only.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;
use ipnet::IpNet;

use crate::app_jwt::{AppJwtConfig, AppJwtKeys};
pub use relay_wire::{Secret, fingerprint};

/// Command-line and environment options of the `relay` binary.
#[derive(Clone, Parser)]
#[command(
    name = "relay",
    version,
    about = "Voice-agent relay: routes tool calls to browser tabs"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Option<Command>,
    #[command(flatten)]
    pub options: Options,
}

#[derive(Debug, Clone, clap::Subcommand)]
pub enum Command {
    /// Validate the configuration and exit (status 64 with the reason when it is not valid).
    CheckConfig,
    /// Probe a health URL (for container health checks without curl); exit 0 on a 2xx answer.
    Healthcheck {
        /// URL to probe, e.g. http://127.0.0.1:3001/readyz.
        #[arg(default_value = "http://127.0.0.1:3001/readyz")]
        url: String,
    },
}

/// Every setting, with its environment variable. Deliberately not `Debug`: it holds raw
/// secrets until [`Config::from_options`] wraps them.
#[derive(Clone, clap::Args)]
pub struct Options {
    /// Address to listen on (use port 0 for any free port).
    #[arg(long, env = "RELAY_ADDR", default_value = "127.0.0.1:3001")]
    pub addr: SocketAddr,
    /// LiveKit server URL handed to tabs with their token.
    #[arg(long, env = "LIVEKIT_URL", default_value = "ws://127.0.0.1:7880")]
    pub livekit_url: String,
    /// LiveKit API key (the JWT issuer).
    #[arg(long, env = "LIVEKIT_API_KEY")]
    pub livekit_api_key: Option<String>,
    /// LiveKit API secret (signs and verifies tab tokens).
    #[arg(long, env = "LIVEKIT_API_SECRET", hide_env_values = true)]
    pub livekit_api_secret: Option<String>,
    /// Agent secret(s), comma-separated to allow rotation.
    #[arg(long, env = "RELAY_AGENT_SECRET", hide_env_values = true)]
    pub agent_secret: Option<String>,
    /// Who may get a token from `POST /token`: `issuer` (the app's backend, with
    /// RELAY_TOKEN_ISSUER_SECRET), `app-jwt` (a browser with the app's own session JWT) or `open`
    /// (anyone, always in a fresh room; development and demos only).
    #[arg(long, env = "RELAY_TOKEN_MODE", default_value = "issuer")]
    pub token_mode: String,
    /// Issuer mode: the secret(s) the app's backend presents as `Authorization: Bearer`,
    /// comma-separated to allow rotation.
    #[arg(long, env = "RELAY_TOKEN_ISSUER_SECRET", hide_env_values = true)]
    pub token_issuer_secret: Option<String>,
    /// App-JWT mode: the HMAC secret that signs the app's session JWTs (HS256).
    #[arg(long, env = "RELAY_APP_JWT_SECRET", hide_env_values = true)]
    pub app_jwt_secret: Option<String>,
    /// App-JWT mode: a PEM file with the public key (RSA or EC) that verifies the app's JWTs.
    #[arg(long, env = "RELAY_APP_JWT_PUBLIC_KEY_FILE")]
    pub app_jwt_public_key_file: Option<PathBuf>,
    /// App-JWT mode: a JWKS file (`{"keys":[…]}`) whose keys are chosen by the JWT's `kid`.
    #[arg(long, env = "RELAY_APP_JWT_JWKS_FILE")]
    pub app_jwt_jwks_file: Option<PathBuf>,
    /// App-JWT mode: the required `iss` claim.
    #[arg(long, env = "RELAY_APP_JWT_ISSUER")]
    pub app_jwt_issuer: Option<String>,
    /// App-JWT mode: the required `aud` claim (comma-separated: any of them).
    #[arg(long, env = "RELAY_APP_JWT_AUDIENCE")]
    pub app_jwt_audience: Option<String>,
    /// App-JWT mode: clock skew allowed on `exp` and `nbf`, seconds.
    #[arg(long, env = "RELAY_APP_JWT_LEEWAY_SECS", default_value_t = 30)]
    pub app_jwt_leeway_secs: u64,
    /// App-JWT mode: the claim that names the room (a fresh room when the JWT has none).
    #[arg(long, env = "RELAY_APP_JWT_ROOM_CLAIM", default_value = "room")]
    pub app_jwt_room_claim: String,
    /// Whether `voice-agent:register` binds a bare key (once, for the seed's frontends); off by
    /// default: tabs then bind only with the token.
    #[arg(long, env = "RELAY_ALLOW_BARE_KEYS", default_value = "false")]
    pub allow_bare_keys: String,
    /// Proxies (CIDRs or addresses, comma-separated) whose forwarded client address is believed
    /// for the per-address limits. Unset: the connection's own address, always.
    #[arg(long, env = "RELAY_TRUSTED_PROXIES")]
    pub trusted_proxies: Option<String>,
    /// The header the trusted proxies write the client address into: `x-forwarded-for` or
    /// `forwarded` (RFC 7239).
    #[arg(
        long,
        env = "RELAY_FORWARDED_HEADER",
        default_value = "x-forwarded-for"
    )]
    pub forwarded_header: String,
    /// Origins allowed to call the HTTP API and open sockets from a browser, comma-separated.
    /// Unset: only the relay's own origin (the demo page).
    #[arg(long, env = "RELAY_ALLOWED_ORIGINS")]
    pub allowed_origins: Option<String>,
    /// Redis URL for several relay nodes; unset means one node, state in memory.
    #[arg(long, env = "RELAY_REDIS_URL")]
    pub redis_url: Option<String>,
    /// Directory of the built demo page.
    #[arg(long, env = "RELAY_WEB_DIR", default_value = "web/dist")]
    pub web_dir: std::path::PathBuf,
    /// Lifetime of minted tokens, seconds.
    #[arg(long, env = "RELAY_TOKEN_TTL_SECS", default_value_t = 6 * 3600)]
    pub token_ttl_secs: u64,
    /// How long a key minted but never bound is kept, seconds.
    #[arg(long, env = "RELAY_UNBOUND_KEY_TTL_SECS", default_value_t = 600)]
    pub unbound_key_ttl_secs: u64,
    /// How long an offline key waits for its tab to come back, milliseconds.
    #[arg(long, env = "RELAY_RECONNECT_GRACE_MS", default_value_t = 30_000)]
    pub reconnect_grace_ms: u64,
    /// How long a socket that connected without a token may stay without binding a key, seconds.
    #[arg(long, env = "RELAY_UNBOUND_SOCKET_SECS", default_value_t = 60)]
    pub unbound_socket_secs: u64,
    /// Timeout of a tool call that names none, milliseconds.
    #[arg(long, env = "RELAY_DEFAULT_TIMEOUT_MS", default_value_t = 15_000)]
    pub default_timeout_ms: u64,
    /// Largest `timeoutMs` a tool call may ask for, milliseconds.
    #[arg(long, env = "RELAY_MAX_TIMEOUT_MS", default_value_t = 120_000)]
    pub max_timeout_ms: u64,
    /// Largest accepted request body, bytes.
    #[arg(long, env = "RELAY_MAX_BODY_BYTES", default_value_t = 64 * 1024)]
    pub max_body_bytes: usize,
    /// Tool calls one key may have in flight at once.
    #[arg(long, env = "RELAY_MAX_INFLIGHT_PER_KEY", default_value_t = 16)]
    pub max_inflight_per_key: usize,
    /// Tool calls one agent (one agent secret) may start per second.
    #[arg(long, env = "RELAY_AGENT_RATE_PER_SEC", default_value_t = 10_000)]
    pub agent_rate_per_sec: u32,
    /// Tokens one client address may mint per minute.
    #[arg(long, env = "RELAY_TOKEN_RATE_PER_MIN", default_value_t = 60)]
    pub token_rate_per_min: u32,
    /// Bound on draining at shutdown, milliseconds.
    #[arg(long, env = "RELAY_DRAIN_MS", default_value_t = 10_000)]
    pub drain_ms: u64,
    /// Log format: `text` or `json`.
    #[arg(long, env = "RELAY_LOG_FORMAT", default_value = "text")]
    pub log_format: LogFormat,
    /// Runtime: `multi-thread` (a worker per CPU), `current-thread` (one thread), or `auto`
    /// (one thread when the process may use one CPU only, else a worker per CPU).
    #[arg(long, env = "RELAY_RUNTIME", default_value = "multi-thread")]
    pub runtime: RuntimeKind,
}

/// Which tokio runtime the relay runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum RuntimeKind {
    /// `current-thread` when the process may use one CPU only (`taskset`, a cgroup quota of one
    /// CPU or less), `multi-thread` otherwise.
    Auto,
    /// Everything on one thread: no hand-off between the accepting thread and a worker, no
    /// work-stealing queues. All the relay can use of one CPU.
    CurrentThread,
    /// A worker per CPU, work-stealing.
    MultiThread,
}

impl RuntimeKind {
    /// `Auto` resolved against the CPUs this process may use.
    pub fn resolve(self) -> RuntimeKind {
        match self {
            RuntimeKind::Auto => match std::thread::available_parallelism() {
                Ok(n) if n.get() == 1 => RuntimeKind::CurrentThread,
                _ => RuntimeKind::MultiThread,
            },
            kind => kind,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

/// A configuration problem, reported before anything starts.
#[derive(Debug, thiserror::Error)]
#[error("configuration error: {0}")]
pub struct ConfigError(pub String);

/// Shortest agent secret accepted: a guessable secret would open the whole API.
pub const MIN_AGENT_SECRET_LEN: usize = 16;
/// Shortest token-issuer secret accepted: it stands for the app's authenticated users.
pub const MIN_ISSUER_SECRET_LEN: usize = 16;
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
        if s.expose().chars().count() < min {
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
    pub agent_secrets: Vec<Secret>,
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
    pub web_dir: std::path::PathBuf,
    pub token_ttl: Duration,
    pub unbound_key_ttl: Duration,
    pub reconnect_grace: Duration,
    pub unbound_socket: Duration,
    pub default_timeout: Duration,
    pub max_timeout: Duration,
    pub max_body_bytes: usize,
    pub max_inflight_per_key: usize,
    pub token_rate_per_min: u32,
    pub agent_rate_per_sec: u32,
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
        let mut required = |name: &str, v: Option<String>| match v.map(|s| s.trim().to_owned()) {
            Some(s) if !s.is_empty() => s,
            _ => {
                problems.push(format!("{name} is required"));
                String::new()
            }
        };
        let livekit_api_key = required("LIVEKIT_API_KEY", o.livekit_api_key);
        let livekit_api_secret = required("LIVEKIT_API_SECRET", o.livekit_api_secret);
        let agent_secret = required("RELAY_AGENT_SECRET", o.agent_secret);

        let agent_secrets = if agent_secret.is_empty() {
            Vec::new()
        } else {
            secret_list(
                &mut problems,
                "RELAY_AGENT_SECRET",
                &agent_secret,
                MIN_AGENT_SECRET_LEN,
            )
        };

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
                if secrets
                    .iter()
                    .any(|s| agent_secrets.iter().any(|a| a.expose() == s.expose()))
                {
                    problems.push(
                        "RELAY_TOKEN_ISSUER_SECRET must differ from every RELAY_AGENT_SECRET: \
                         the app's backend should not hold the agents' secret"
                            .into(),
                    );
                }
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
        if let Some(url) = &redis_url
            && !(url.starts_with("redis://") || url.starts_with("redis+unix://"))
        {
            problems.push(
                "RELAY_REDIS_URL must start with redis:// or redis+unix:// (TLS is not built in)"
                    .into(),
            );
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
        positive(
            &mut problems,
            "RELAY_TOKEN_RATE_PER_MIN",
            u64::from(o.token_rate_per_min),
        );
        if o.default_timeout_ms > o.max_timeout_ms {
            problems.push("RELAY_DEFAULT_TIMEOUT_MS exceeds RELAY_MAX_TIMEOUT_MS".into());
        }

        if !problems.is_empty() {
            return Err(ConfigError(problems.join("; ")));
        }
        Ok(Config {
            addr: o.addr,
            livekit_url: o.livekit_url,
            livekit_api_key,
            livekit_api_secret: Secret::new(livekit_api_secret),
            agent_secrets,
            token_mode: token_mode.unwrap_or(TokenMode::Issuer),
            issuer_secrets,
            app_jwt,
            allow_bare_keys,
            trusted_proxies,
            forwarded_header,
            allowed_origins,
            redis_url: redis_url.map(Secret::new),
            web_dir: o.web_dir,
            token_ttl: Duration::from_secs(o.token_ttl_secs),
            unbound_key_ttl: Duration::from_secs(o.unbound_key_ttl_secs),
            reconnect_grace: Duration::from_millis(o.reconnect_grace_ms),
            unbound_socket: Duration::from_secs(o.unbound_socket_secs),
            default_timeout: Duration::from_millis(o.default_timeout_ms),
            max_timeout: Duration::from_millis(o.max_timeout_ms),
            max_body_bytes: o.max_body_bytes,
            max_inflight_per_key: o.max_inflight_per_key,
            token_rate_per_min: o.token_rate_per_min,
            agent_rate_per_sec: o.agent_rate_per_sec,
            drain: Duration::from_millis(o.drain_ms),
            log_format: o.log_format,
            runtime: o.runtime,
        })
    }
}

/// Checks the app-JWT settings and loads the verification key: exactly one key source, an
/// issuer and an audience, a sane leeway. `None` (with the problems recorded) when any is wrong.
fn app_jwt_config(problems: &mut Vec<String>, o: &Options) -> Option<AppJwtConfig> {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Config, ConfigError> {
        // Flags only: tests never touch the process environment.
        let mut full = vec!["relay"];
        full.extend_from_slice(args);
        let cli = Cli::try_parse_from(full).expect("flags parse");
        Config::from_options(cli.options)
    }

    const GOOD: &[&str] = &[
        "--livekit-api-key",
        "devkey",
        "--livekit-api-secret",
        "secret",
        "--agent-secret",
        "0123456789abcdef,fedcba9876543210",
        "--token-issuer-secret",
        "issuer-secret-0123456789",
    ];

    fn fixture(name: &str) -> String {
        format!("{}/tests/fixtures/{name}", env!("CARGO_MANIFEST_DIR"))
    }

    /// GOOD in app-jwt mode (without its issuer secret) plus `extra`.
    fn app_jwt(extra: &[&str]) -> Result<Config, ConfigError> {
        let mut args = GOOD[..6].to_vec();
        args.extend_from_slice(&["--token-mode", "app-jwt"]);
        args.extend_from_slice(extra);
        parse(&args)
    }

    const ISS_AUD: &[&str] = &[
        "--app-jwt-issuer",
        "https://app.example",
        "--app-jwt-audience",
        "voice-relay",
    ];

    #[test]
    fn issuer_mode_is_the_default_and_needs_its_secret() {
        let c = parse(GOOD).unwrap();
        assert_eq!(c.token_mode, TokenMode::Issuer);
        assert_eq!(c.issuer_secrets.len(), 1);
        assert!(!c.allow_bare_keys, "bare keys are off by default");
        assert!(c.trusted_proxies.is_empty());
        let err = parse(&GOOD[..6]).unwrap_err().to_string();
        assert!(
            err.contains("RELAY_TOKEN_ISSUER_SECRET is required"),
            "{err}"
        );
        assert!(err.contains("RELAY_TOKEN_MODE=open"), "{err}");
        let mut short = GOOD.to_vec();
        short[7] = "good-enough-secret-1,short";
        let err = parse(&short).unwrap_err().to_string();
        assert!(
            err.contains("RELAY_TOKEN_ISSUER_SECRET entry 2 is shorter than 16"),
            "{err}"
        );
        let mut same = GOOD.to_vec();
        same[7] = "0123456789abcdef";
        let err = parse(&same).unwrap_err().to_string();
        assert!(
            err.contains("must differ from every RELAY_AGENT_SECRET"),
            "{err}"
        );
    }

    #[test]
    fn open_mode_and_unknown_modes() {
        let mut args = GOOD[..6].to_vec();
        args.extend_from_slice(&["--token-mode", "open", "--allow-bare-keys", "true"]);
        let c = parse(&args).unwrap();
        assert_eq!(c.token_mode, TokenMode::Open);
        assert!(c.allow_bare_keys);
        let mut args = GOOD.to_vec();
        args.extend_from_slice(&["--token-mode", "public", "--allow-bare-keys", "maybe"]);
        let err = parse(&args).unwrap_err().to_string();
        assert!(
            err.contains("RELAY_TOKEN_MODE \"public\" is not a mode"),
            "{err}"
        );
        assert!(err.contains("RELAY_ALLOW_BARE_KEYS"), "{err}");
    }

    #[test]
    fn app_jwt_mode_needs_one_key_an_issuer_and_an_audience() {
        let secret = "an-hmac-secret-of-at-least-32-chars!";
        let c = app_jwt(&[&["--app-jwt-secret", secret][..], ISS_AUD].concat()).unwrap();
        assert_eq!(c.token_mode, TokenMode::AppJwt);
        assert!(c.app_jwt.is_some());
        assert!(
            !format!("{c:?}").contains(secret),
            "the HMAC secret is not printed"
        );

        let err = app_jwt(ISS_AUD).unwrap_err().to_string();
        assert!(err.contains("needs the key"), "{err}");
        let err = app_jwt(&["--app-jwt-secret", secret])
            .unwrap_err()
            .to_string();
        assert!(err.contains("RELAY_APP_JWT_ISSUER"), "{err}");
        assert!(err.contains("RELAY_APP_JWT_AUDIENCE"), "{err}");
        let rsa = fixture("app-rsa.pub");
        let two = [
            &["--app-jwt-secret", secret][..],
            &["--app-jwt-public-key-file", &rsa],
            ISS_AUD,
        ]
        .concat();
        assert!(app_jwt(&two).unwrap_err().to_string().contains("only one"));
        let short = [&["--app-jwt-secret", "too-short"][..], ISS_AUD].concat();
        assert!(
            app_jwt(&short)
                .unwrap_err()
                .to_string()
                .contains("shorter than 32")
        );
        let leeway = [
            &["--app-jwt-secret", secret, "--app-jwt-leeway-secs", "3600"][..],
            ISS_AUD,
        ]
        .concat();
        assert!(app_jwt(&leeway).unwrap_err().to_string().contains("LEEWAY"));
    }

    #[test]
    fn app_jwt_key_files_must_parse() {
        for (flag, path) in [
            ("--app-jwt-public-key-file", fixture("app-rsa.pub")),
            ("--app-jwt-public-key-file", fixture("app-ec.pub")),
            ("--app-jwt-jwks-file", fixture("app.jwks.json")),
        ] {
            let good = [flag, path.as_str()];
            let c = app_jwt(&[&good[..], ISS_AUD].concat());
            assert!(c.is_ok(), "{good:?}: {:?}", c.err());
        }
        let cases = [
            (
                "--app-jwt-public-key-file",
                fixture("app-rsa.key"),
                "private key",
            ),
            (
                "--app-jwt-public-key-file",
                fixture("README.md"),
                "not a PEM public key",
            ),
            (
                "--app-jwt-public-key-file",
                fixture("missing.pem"),
                "cannot read",
            ),
            ("--app-jwt-jwks-file", fixture("app-rsa.pub"), "not JSON"),
            (
                "--app-jwt-jwks-file",
                fixture("missing.json"),
                "cannot read",
            ),
        ];
        for (flag, path, expected) in cases {
            let err = app_jwt(&[&[flag, path.as_str()][..], ISS_AUD].concat())
                .unwrap_err()
                .to_string();
            assert!(err.contains(expected), "{path}: {err}");
        }
    }

    #[test]
    fn proxies_and_forwarded_header() {
        let mut args = GOOD.to_vec();
        args.extend_from_slice(&["--trusted-proxies", "10.0.0.0/8, 127.0.0.1"]);
        let c = parse(&args).unwrap();
        assert_eq!(c.trusted_proxies.len(), 2);
        assert_eq!(c.forwarded_header, ForwardedHeader::XForwardedFor);
        let mut args = GOOD.to_vec();
        args.extend_from_slice(&[
            "--trusted-proxies",
            "10.0.0.0/40",
            "--forwarded-header",
            "x-real-ip",
        ]);
        let err = parse(&args).unwrap_err().to_string();
        assert!(
            err.contains("RELAY_TRUSTED_PROXIES entry \"10.0.0.0/40\""),
            "{err}"
        );
        assert!(err.contains("RELAY_FORWARDED_HEADER"), "{err}");
    }

    #[test]
    fn valid_config_with_rotation() {
        let c = parse(GOOD).unwrap();
        assert_eq!(c.agent_secrets.len(), 2);
        assert_eq!(c.addr.to_string(), "127.0.0.1:3001");
        assert_eq!(c.reconnect_grace, Duration::from_secs(30));
        assert_eq!(c.max_body_bytes, 65536);
    }

    #[test]
    fn missing_secrets_are_all_reported() {
        let err = parse(&[]).unwrap_err().to_string();
        assert!(err.contains("LIVEKIT_API_KEY is required"), "{err}");
        assert!(err.contains("LIVEKIT_API_SECRET is required"), "{err}");
        assert!(err.contains("RELAY_AGENT_SECRET is required"), "{err}");
    }

    #[test]
    fn short_agent_secret_and_bad_values_are_refused() {
        let mut args = GOOD.to_vec();
        args[5] = "short";
        args.extend_from_slice(&["--allowed-origins", "ftp://x", "--max-body-bytes", "0"]);
        let err = parse(&args).unwrap_err().to_string();
        assert!(err.contains("shorter than 16"), "{err}");
        assert!(err.contains("ftp://x"), "{err}");
        assert!(err.contains("RELAY_MAX_BODY_BYTES"), "{err}");
        assert!(
            !err.contains("short\""),
            "the secret itself is not echoed: {err}"
        );
    }

    #[test]
    fn secrets_debug_as_fingerprints() {
        let s = Secret::new("super-secret-value");
        let shown = format!("{s:?}");
        assert!(!shown.contains("super-secret-value"));
        assert_eq!(
            shown,
            format!("Secret({})", fingerprint("super-secret-value"))
        );
        assert_eq!(fingerprint("x").len(), 8);
    }
}
