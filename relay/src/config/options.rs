//! The `relay` binary's flags and environment variables, as clap reads them.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::Parser;

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
    CheckConfig {
        /// Also connect to Redis (when RELAY_REDIS_URL is set): exit 1 with the reason when it
        /// cannot be reached or refuses the credentials or the TLS certificate.
        #[arg(long)]
        connect: bool,
    },
    /// Print a new signing key entry for RELAY_SESSION_KEYS (`kid:seed`) and exit.
    SessionKey,
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
    /// The agent worker's credential, comma-separated to allow rotation: it mints session
    /// tokens for keys, reads and sets a key's state and mode, and revokes a key when its user
    /// leaves. Never given to an agent, a platform or a browser.
    #[arg(long, env = "RELAY_WORKER_SECRET", hide_env_values = true)]
    pub worker_secret: Option<String>,
    /// The operators' credential, comma-separated to allow rotation: revoke any key, read any
    /// key's state, mint a session token (the worker's CLI). Optional.
    #[arg(long, env = "RELAY_OPERATOR_SECRET", hide_env_values = true)]
    pub operator_secret: Option<String>,
    /// The Ed25519 keys that sign session tokens and bind proofs, `kid:seed` comma-separated,
    /// the first signing (`relay session-key` prints a new one). Every node of a deployment
    /// holds the same list.
    #[arg(long, env = "RELAY_SESSION_KEYS", hide_env_values = true)]
    pub session_keys: Option<String>,
    /// The single agent secret of earlier versions: no longer accepted (start-up error).
    #[arg(long, env = "RELAY_AGENT_SECRET", hide_env_values = true, hide = true)]
    pub legacy_agent_secret: Option<String>,
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
    /// Whether `voice-agent:register` binds a bare key (once, for frontends that register the bare key); off by
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
    /// Redis for several relay nodes; unset means one node, state in memory. Forms:
    /// `redis://[user:password@]host:port[/db]`; `rediss://…` for TLS (verified; see
    /// RELAY_REDIS_CA_FILE); `redis+unix:///path.sock`;
    /// `redis+sentinel://host:port,host:port/primary-name[/db]` (or `rediss+sentinel://`):
    /// the primary found through the sentinels and followed through failovers, the credentials
    /// being the primary's.
    #[arg(long, env = "RELAY_REDIS_URL", hide_env_values = true)]
    pub redis_url: Option<String>,
    /// PEM file of the certificate authority that signed the Redis servers' TLS certificates
    /// (a private CA), trusted instead of the system's roots for `rediss://`.
    #[arg(long, env = "RELAY_REDIS_CA_FILE")]
    pub redis_ca_file: Option<std::path::PathBuf>,
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
    /// How long a tool call's outcome is kept for retries with the same `Idempotency-Key`,
    /// seconds; at least the longest call timeout.
    #[arg(long, env = "RELAY_IDEMPOTENCY_WINDOW_SECS", default_value_t = crate::idempotency::WINDOW.as_secs())]
    pub idempotency_window_secs: u64,
    /// Largest accepted request body, bytes.
    #[arg(long, env = "RELAY_MAX_BODY_BYTES", default_value_t = 64 * 1024)]
    pub max_body_bytes: usize,
    /// Tabs this node binds at once, at most: more wait their turn (see RELAY_BIND_WAIT_MS).
    /// The node binds fewer at once while it is saturated (its runtime wakes tasks late).
    #[arg(long, env = "RELAY_BIND_CONCURRENCY", default_value_t = 64)]
    pub bind_concurrency: usize,
    /// How long a tab's bind waits for its turn before the handshake is refused as
    /// `unavailable` (the browser client retries), milliseconds.
    #[arg(long, env = "RELAY_BIND_WAIT_MS", default_value_t = 4_000)]
    pub bind_wait_ms: u64,
    /// Tool calls one key may have in flight at once.
    #[arg(long, env = "RELAY_MAX_INFLIGHT_PER_KEY", default_value_t = 16)]
    pub max_inflight_per_key: usize,
    /// Tool calls one agent session may have in flight at once, below the key's limit so one
    /// session cannot take every slot of its key (default: half the key's, at least 1).
    #[arg(long, env = "RELAY_SESSION_MAX_INFLIGHT")]
    pub session_max_inflight: Option<usize>,
    /// Tool calls one agent session may start per second.
    #[arg(long, env = "RELAY_SESSION_RATE_PER_SEC", default_value_t = 50)]
    pub session_rate_per_sec: u32,
    /// Longest lifetime a session token may be minted with, seconds (default one hour; never
    /// beyond the tab's own token).
    #[arg(long, env = "RELAY_SESSION_MAX_TTL_SECS", default_value_t = 3600)]
    pub session_max_ttl_secs: u64,
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
