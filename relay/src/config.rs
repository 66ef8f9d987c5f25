//! Relay configuration: read from the environment (flags mirror it), validated as a whole before
//! anything binds. Secrets live in [`Secret`], whose `Debug` and `Display` show a fingerprint only.

use std::net::SocketAddr;
use std::time::Duration;

use clap::Parser;

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

/// The validated configuration the relay runs on.
#[derive(Debug, Clone)]
pub struct Config {
    pub addr: SocketAddr,
    pub livekit_url: String,
    pub livekit_api_key: String,
    pub livekit_api_secret: Secret,
    pub agent_secrets: Vec<Secret>,
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
}

impl Config {
    /// Checks every option and gathers all problems into one error.
    pub fn from_options(o: Options) -> Result<Config, ConfigError> {
        let mut problems = Vec::new();
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

        let agent_secrets: Vec<Secret> = agent_secret
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(Secret::new)
            .collect();
        if !agent_secret.is_empty() {
            if agent_secrets.is_empty() {
                problems.push("RELAY_AGENT_SECRET holds no secret".into());
            }
            for (i, s) in agent_secrets.iter().enumerate() {
                if s.expose().len() < MIN_AGENT_SECRET_LEN {
                    problems.push(format!(
                        "RELAY_AGENT_SECRET entry {} is shorter than {MIN_AGENT_SECRET_LEN} characters",
                        i + 1
                    ));
                }
            }
        }
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
        })
    }
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
    ];

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
