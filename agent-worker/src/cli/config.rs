//! Worker configuration: the command line, with every option mirrored by its environment
//! variable. Validated before anything starts (the catalog included); secrets are wrapped in
//! [`Secret`].

use std::net::SocketAddr;

use clap::{Args, Parser, Subcommand};
use relay_wire::Secret;

use crate::catalog::export::Format;
use crate::serve::mcp::McpConfig;

/// Exit status for a configuration error (EX_USAGE).
pub const EXIT_CONFIG: u8 = 64;

#[derive(Parser)]
#[command(
    name = "agent-worker",
    version,
    about = "The agent side's gateway to the voice-agent relay"
)]
pub struct Cli {
    #[command(flatten)]
    pub relay: RelayArgs,
    #[command(flatten)]
    pub catalog: CatalogArgs,
    #[command(subcommand)]
    pub command: Command,
}

/// How to reach the relay. Not `Debug`: it holds the raw secret.
#[derive(Args, Clone)]
pub struct RelayArgs {
    /// The relay's base URL.
    #[arg(
        long,
        env = "RELAY_URL",
        default_value = "http://127.0.0.1:3001",
        global = true
    )]
    pub relay_url: String,
    /// The agent secret (the first one when a comma-separated list is given).
    #[arg(
        long,
        env = "RELAY_AGENT_SECRET",
        hide_env_values = true,
        global = true
    )]
    pub agent_secret: Option<String>,
}

/// The catalog a command uses.
#[derive(Args, Clone, Debug)]
pub struct CatalogArgs {
    /// The tool catalog (JSON): the app's UI tools and modes. The default catalog (the
    /// product's own tools) when unset.
    #[arg(long = "catalog", env = "WORKER_CATALOG", global = true)]
    pub catalog: Option<std::path::PathBuf>,
}

impl CatalogArgs {
    /// The catalog file named, if any (an empty value names none).
    pub fn path(&self) -> Option<&std::path::Path> {
        self.catalog
            .as_deref()
            .filter(|p| !p.as_os_str().is_empty())
    }
}

#[derive(Subcommand)]
pub enum Command {
    /// Send one tool call and print the outcome as JSON (exit status 1 on failure). A tool of
    /// the catalog has its arguments checked first, and waits for the tab's answer when the
    /// catalog says so.
    Call {
        /// The tab's key (va_…).
        api_key: String,
        /// The tool's name.
        tool_name: String,
        /// Parameters as JSON (an object for the catalog's tools).
        params: Option<String>,
        /// Wait for the tab's answer (the catalog's setting for its tools otherwise).
        #[arg(long = "await")]
        await_result: bool,
        /// The relay's timeout for this call, in milliseconds.
        #[arg(long)]
        timeout_ms: Option<u64>,
    },
    /// Serve LiveKit and Vapi webhooks.
    Serve(ServeArgs),
    /// Walk a live tab through the product's tools (a scripted demo, not an AI), moving along
    /// the catalog's modes as an agent would.
    Demo {
        /// The tab's key (va_…).
        api_key: String,
    },
    /// Check a tool catalog without starting anything (status 64 with every problem, each at
    /// its place in the file).
    Check,
    /// The catalog in other forms.
    #[command(subcommand)]
    Catalog(CatalogCommand),
    /// Validate the configuration for `serve` (the catalog included) and exit (status 64 with
    /// the reason on failure).
    CheckConfig(ServeArgs),
}

#[derive(Subcommand)]
pub enum CatalogCommand {
    /// Print the catalog's tools as the tool definitions of a platform that keeps tools in its
    /// own dashboard.
    Export {
        /// The platform's format.
        #[arg(long, value_enum)]
        format: Format,
        /// Only the tools of this mode.
        #[arg(long)]
        mode: Option<String>,
        /// The worker's public base URL, for formats that call it back (Vapi, ElevenLabs).
        #[arg(long)]
        worker_url: Option<String>,
    },
}

/// Settings of `serve`. Not `Debug`: it holds raw secrets.
#[derive(Args, Clone)]
pub struct ServeArgs {
    /// Address the webhooks listen on (port 0 for any free port).
    #[arg(long, env = "WORKER_ADDR", default_value = "127.0.0.1:3002")]
    pub addr: SocketAddr,
    /// LiveKit API key (webhooks are signed with it).
    #[arg(long, env = "LIVEKIT_API_KEY")]
    pub livekit_api_key: Option<String>,
    /// LiveKit API secret.
    #[arg(long, env = "LIVEKIT_API_SECRET", hide_env_values = true)]
    pub livekit_api_secret: Option<String>,
    /// Shared secret Vapi sends in `X-Vapi-Secret`; unset disables the Vapi webhook.
    #[arg(long, env = "VAPI_SECRET", hide_env_values = true)]
    pub vapi_secret: Option<String>,
    /// Log format: `text` or `json`.
    #[arg(long, env = "WORKER_LOG_FORMAT", default_value = "text")]
    pub log_format: String,
    /// The LiveKit server whose rooms the worker reads through RoomService (sessions survive a
    /// worker restart or a lost webhook); unset turns that off.
    #[arg(long, env = "LIVEKIT_URL")]
    pub livekit_url: Option<String>,
    /// Seconds between two reads of the LiveKit server's rooms (0 turns them off).
    #[arg(long, env = "WORKER_ROOM_SYNC_SECS", default_value_t = 10)]
    pub room_sync_secs: u64,
    /// A file where the keys of open LiveKit sessions are kept between runs (mode 600), so a
    /// participant that left while the worker was down has its key revoked; unset keeps none.
    #[arg(long, env = "WORKER_STATE_FILE")]
    pub state_file: Option<std::path::PathBuf>,
    /// Host headers the MCP endpoint accepts, comma-separated (`name` or `name:port`; `*` for
    /// any). Default: localhost, 127.0.0.1, ::1.
    #[arg(long, env = "WORKER_MCP_ALLOWED_HOSTS")]
    pub mcp_allowed_hosts: Option<String>,
    /// Browser origins the MCP endpoint accepts, comma-separated (`https://host[:port]`, `:*`
    /// for any port; `*` for any origin). Default: pages on localhost, 127.0.0.1 and [::1];
    /// requests without `Origin` (servers) always pass.
    #[arg(long, env = "WORKER_MCP_ALLOWED_ORIGINS")]
    pub mcp_allowed_origins: Option<String>,
    /// Offer the tools a page defines with its handlers (their descriptions and schemas then
    /// reach the agent's model). Off unless set to true.
    #[arg(long, env = "WORKER_PAGE_TOOLS", default_value_t = false, action = clap::ArgAction::Set)]
    pub page_tools: bool,
}

impl Cli {
    /// The command line, with a variable set to nothing (`WORKER_CATALOG=` in an env file)
    /// taken as unset: clap would refuse it as a missing value, before any option is read.
    pub fn parse_args() -> Cli {
        use clap::{CommandFactory, FromArgMatches};
        let matches = without_empty_env(Cli::command()).get_matches();
        Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit())
    }
}

/// `command` and its subcommands without the environment variables of the arguments whose
/// variable is set but empty.
fn without_empty_env(mut command: clap::Command) -> clap::Command {
    let empty: Vec<clap::Id> = command
        .get_arguments()
        .filter(|a| {
            a.get_env()
                .and_then(std::env::var_os)
                .is_some_and(|v| v.to_string_lossy().trim().is_empty())
        })
        .map(|a| a.get_id().clone())
        .collect();
    for id in empty {
        command = command.mut_arg(id, |a| a.env(None));
    }
    let subcommands: Vec<String> = command
        .get_subcommands()
        .map(|c| c.get_name().to_owned())
        .collect();
    for name in subcommands {
        command = command.mut_subcommand(name, without_empty_env);
    }
    command
}

#[derive(Debug, thiserror::Error)]
#[error("configuration error: {0}")]
pub struct ConfigError(pub String);

/// Shortest secret accepted, as for the relay.
const MIN_SECRET_LEN: usize = 16;

fn present(v: &Option<String>) -> Option<String> {
    v.as_deref()
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
}

/// The agent secret the worker sends (the first of the list), or the reason it is missing.
pub fn agent_secret(relay: &RelayArgs) -> Result<Secret, ConfigError> {
    Ok(agent_secrets(relay)?.remove(0))
}

/// Every agent secret of the list (rotation: callers of the worker may present any), the one
/// the worker sends first; or the reason they are missing.
pub fn agent_secrets(relay: &RelayArgs) -> Result<Vec<Secret>, ConfigError> {
    let raw = present(&relay.agent_secret)
        .ok_or_else(|| ConfigError("RELAY_AGENT_SECRET is required".into()))?;
    let all: Vec<&str> = raw
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .collect();
    if all.is_empty() || all.iter().any(|s| s.len() < MIN_SECRET_LEN) {
        return Err(ConfigError(format!(
            "RELAY_AGENT_SECRET is shorter than {MIN_SECRET_LEN} characters"
        )));
    }
    if !(relay.relay_url.starts_with("http://") || relay.relay_url.starts_with("https://")) {
        return Err(ConfigError(
            "RELAY_URL must start with http:// or https://".into(),
        ));
    }
    Ok(all.into_iter().map(Secret::new).collect())
}

/// Validated settings of `serve`.
#[derive(Debug, Clone)]
pub struct ServeConfig {
    pub addr: SocketAddr,
    pub livekit_api_key: String,
    pub livekit_api_secret: Secret,
    pub vapi_secret: Option<Secret>,
    pub agent_secret: Secret,
    /// Every secret a caller of the worker may present (the list, for rotation).
    pub accepted_agent_secrets: Vec<Secret>,
    pub json_logs: bool,
    /// LiveKit's HTTP(S) base URL for RoomService, when rooms are read.
    pub livekit_http_url: Option<String>,
    pub room_sync: Option<std::time::Duration>,
    pub state_file: Option<std::path::PathBuf>,
    pub mcp: McpConfig,
    pub page_tools: bool,
}

/// A comma-separated list, trimmed, without empty items.
fn list(raw: &str) -> Vec<String> {
    raw.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .collect()
}

/// The MCP endpoint's hosts and origins, or the reason they are wrong.
fn mcp_config(serve: &ServeArgs) -> Result<McpConfig, String> {
    let mut config = McpConfig::default();
    if let Some(raw) = present(&serve.mcp_allowed_hosts) {
        let hosts = list(&raw);
        config.allowed_hosts = if hosts.iter().any(|h| h == "*") {
            Vec::new()
        } else {
            hosts
        };
        if let Some(bad) = config
            .allowed_hosts
            .iter()
            .find(|h| h.contains('/') || h.contains(char::is_whitespace))
        {
            return Err(format!(
                "WORKER_MCP_ALLOWED_HOSTS takes host names or host:port, not {bad:?}"
            ));
        }
    }
    if let Some(raw) = present(&serve.mcp_allowed_origins) {
        let origins = list(&raw);
        if origins.iter().any(|o| o == "*") {
            config.allowed_origins = None;
        } else {
            if let Some(bad) = origins
                .iter()
                .find(|o| *o != "null" && !(o.starts_with("http://") || o.starts_with("https://")))
            {
                return Err(format!(
                    "WORKER_MCP_ALLOWED_ORIGINS takes origins such as https://app.example.com:443, not {bad:?}"
                ));
            }
            config.allowed_origins = Some(origins);
        }
    }
    Ok(config)
}

impl ServeConfig {
    pub fn from_args(relay: &RelayArgs, serve: &ServeArgs) -> Result<Self, ConfigError> {
        let mut problems = Vec::new();
        let agents = agent_secrets(relay).map_err(|e| problems.push(e.0)).ok();
        let livekit_http_url = match present(&serve.livekit_url) {
            None => None,
            Some(url) => match livekit_http_url(&url) {
                Some(http) => Some(http),
                None => {
                    problems.push(format!(
                        "LIVEKIT_URL must start with ws://, wss://, http:// or https://, not {url:?}"
                    ));
                    None
                }
            },
        };
        let room_sync = (serve.room_sync_secs > 0 && livekit_http_url.is_some())
            .then(|| std::time::Duration::from_secs(serve.room_sync_secs));
        let key = present(&serve.livekit_api_key);
        if key.is_none() {
            problems.push("LIVEKIT_API_KEY is required to verify LiveKit webhooks".into());
        }
        let secret = present(&serve.livekit_api_secret);
        if secret.is_none() {
            problems.push("LIVEKIT_API_SECRET is required to verify LiveKit webhooks".into());
        }
        let vapi = present(&serve.vapi_secret);
        if vapi.as_ref().is_some_and(|v| v.len() < MIN_SECRET_LEN) {
            problems.push(format!(
                "VAPI_SECRET is shorter than {MIN_SECRET_LEN} characters"
            ));
        }
        let mcp = mcp_config(serve).map_err(|e| problems.push(e)).ok();
        let json_logs = match serve.log_format.as_str() {
            "json" => true,
            "text" => false,
            other => {
                problems.push(format!(
                    "WORKER_LOG_FORMAT must be text or json, not {other:?}"
                ));
                false
            }
        };
        match (agents, key, secret, mcp) {
            (Some(agents), Some(livekit_api_key), Some(secret), Some(mcp))
                if problems.is_empty() =>
            {
                Ok(ServeConfig {
                    addr: serve.addr,
                    livekit_api_key,
                    livekit_api_secret: Secret::new(secret),
                    vapi_secret: vapi.map(Secret::new),
                    agent_secret: agents[0].clone(),
                    accepted_agent_secrets: agents,
                    json_logs,
                    livekit_http_url,
                    room_sync,
                    state_file: serve.state_file.clone(),
                    mcp,
                    page_tools: serve.page_tools,
                })
            }
            _ => Err(ConfigError(problems.join("; "))),
        }
    }
}

/// The HTTP base URL of a LiveKit server given as LiveKit's clients take it (`ws://`, `wss://`),
/// or already as HTTP.
pub fn livekit_http_url(url: &str) -> Option<String> {
    let url = url.trim().trim_end_matches('/');
    if let Some(rest) = url.strip_prefix("ws://") {
        Some(format!("http://{rest}"))
    } else if let Some(rest) = url.strip_prefix("wss://") {
        Some(format!("https://{rest}"))
    } else if url.starts_with("http://") || url.starts_with("https://") {
        Some(url.to_owned())
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Cli {
        let mut all = vec!["agent-worker"];
        all.extend_from_slice(args);
        Cli::try_parse_from(all).unwrap()
    }

    #[test]
    fn serve_needs_its_secrets() {
        let cli = parse(&["check-config"]);
        let Command::CheckConfig(serve) = &cli.command else {
            panic!()
        };
        let err = ServeConfig::from_args(&cli.relay, serve)
            .unwrap_err()
            .to_string();
        assert!(err.contains("RELAY_AGENT_SECRET is required"), "{err}");
        assert!(err.contains("LIVEKIT_API_KEY"), "{err}");
        let cli = parse(&[
            "--agent-secret",
            "0123456789abcdef0",
            "check-config",
            "--livekit-api-key",
            "devkey",
            "--livekit-api-secret",
            "secret",
            "--vapi-secret",
            "short",
        ]);
        let Command::CheckConfig(serve) = &cli.command else {
            panic!()
        };
        let err = ServeConfig::from_args(&cli.relay, serve)
            .unwrap_err()
            .to_string();
        assert!(err.contains("VAPI_SECRET is shorter"), "{err}");
        assert!(!err.contains("short\""), "{err}");
    }

    #[test]
    fn mcp_hosts_and_origins() {
        let base = [
            "--agent-secret",
            "0123456789abcdef0",
            "check-config",
            "--livekit-api-key",
            "devkey",
            "--livekit-api-secret",
            "secret",
        ];
        let config = |extra: &[&str]| {
            let mut args = base.to_vec();
            args.extend_from_slice(extra);
            let cli = parse(&args);
            let Command::CheckConfig(serve) = &cli.command else {
                panic!()
            };
            ServeConfig::from_args(&cli.relay, serve).map(|c| c.mcp)
        };
        assert_eq!(config(&[]).unwrap(), McpConfig::default());
        let custom = config(&[
            "--mcp-allowed-hosts",
            "worker, worker:3002",
            "--mcp-allowed-origins",
            "https://app.example.com:443",
        ])
        .unwrap();
        assert_eq!(custom.allowed_hosts, ["worker", "worker:3002"]);
        assert_eq!(
            custom.allowed_origins,
            Some(vec!["https://app.example.com:443".to_owned()])
        );
        let open = config(&["--mcp-allowed-hosts", "*", "--mcp-allowed-origins", "*"]).unwrap();
        assert!(open.allowed_hosts.is_empty());
        assert_eq!(open.allowed_origins, None);
        let err = config(&["--mcp-allowed-origins", "app.example.com"])
            .unwrap_err()
            .to_string();
        assert!(err.contains("WORKER_MCP_ALLOWED_ORIGINS"), "{err}");
        assert!(config(&["--mcp-allowed-hosts", "http://x"]).is_err());
    }

    #[test]
    fn first_of_several_agent_secrets_is_used() {
        let cli = parse(&[
            "--agent-secret",
            " aaaaaaaaaaaaaaaaaaaa , bbbbbbbbbbbbbbbbbbbb",
            "demo",
            "k",
        ]);
        assert_eq!(
            agent_secret(&cli.relay).unwrap().expose(),
            "aaaaaaaaaaaaaaaaaaaa"
        );
    }
}
