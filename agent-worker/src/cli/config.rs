//! Worker configuration: the command line, with every option mirrored by its environment
//! variable. Validated before anything starts (the catalog included); secrets are wrapped in
//! [`Secret`].

use std::net::SocketAddr;

use clap::{Args, Parser, Subcommand};
use relay_wire::Secret;

use crate::catalog::export::Format;

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

/// How to reach the relay, and with what. Not `Debug`: it holds raw secrets.
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
    /// The worker's credential (`serve`): it mints session tokens for the users whose rooms it
    /// follows, reads their keys' state, tells their modes and revokes a key when its user
    /// leaves. The first of a comma-separated list is sent.
    #[arg(
        long,
        env = "RELAY_WORKER_SECRET",
        hide_env_values = true,
        global = true
    )]
    pub worker_secret: Option<String>,
    /// The operators' credential: `/sessions` and `/debug` of `serve` take it, and `call` and
    /// `demo` mint a session token for the key with it when none is given.
    #[arg(
        long,
        env = "RELAY_OPERATOR_SECRET",
        hide_env_values = true,
        global = true
    )]
    pub operator_secret: Option<String>,
    /// A session token for the key (`call`, `demo`): used as it is, nothing minted.
    #[arg(long, env = "VOICE_AGENT_TOKEN", hide_env_values = true, global = true)]
    pub token: Option<String>,
    /// The single agent secret of earlier versions: no longer read (a configuration error).
    #[arg(
        long,
        env = "RELAY_AGENT_SECRET",
        hide_env_values = true,
        hide = true,
        global = true
    )]
    pub legacy_agent_secret: Option<String>,
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
    /// The secret of the Vapi webhook's HMAC credential: each message is signed over its
    /// timestamp and body (`x-signature`, `x-timestamp`); unset disables the Vapi webhook.
    #[arg(long, env = "VAPI_SECRET", hide_env_values = true)]
    pub vapi_secret: Option<String>,
    /// The LiveKit agent name to dispatch for each user who joins a room with a key (explicit
    /// dispatch, with the user's session token in the dispatch's metadata); unset dispatches
    /// none (an agent on another platform, or one dispatched by the app).
    #[arg(long, env = "WORKER_AGENT_NAME")]
    pub agent_name: Option<String>,
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
pub(super) const MIN_SECRET_LEN: usize = 16;

pub(super) fn present(v: &Option<String>) -> Option<String> {
    v.as_deref()
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
}

/// A comma-separated list of secrets named `name`, each at least [`MIN_SECRET_LEN`] long.
fn secret_list(name: &str, raw: &str) -> Result<Vec<Secret>, ConfigError> {
    let all: Vec<&str> = raw
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .collect();
    if all.iter().any(|s| s.starts_with("replace-me")) {
        return Err(ConfigError(format!(
            "{name} is still the example's placeholder: put the secret there"
        )));
    }
    if all.is_empty() || all.iter().any(|s| s.len() < MIN_SECRET_LEN) {
        return Err(ConfigError(format!(
            "{name} is shorter than {MIN_SECRET_LEN} characters"
        )));
    }
    Ok(all.into_iter().map(Secret::new).collect())
}

/// The relay's URL, and no secret of earlier versions; the reason otherwise.
fn check_relay(relay: &RelayArgs) -> Result<(), ConfigError> {
    if present(&relay.legacy_agent_secret).is_some() {
        return Err(ConfigError(
            "RELAY_AGENT_SECRET is no longer read: the worker holds RELAY_WORKER_SECRET, operators \
             RELAY_OPERATOR_SECRET, and agents a session token for one key each \
             (docs/security.md)"
                .into(),
        ));
    }
    if !(relay.relay_url.starts_with("http://") || relay.relay_url.starts_with("https://")) {
        return Err(ConfigError(
            "RELAY_URL must start with http:// or https://".into(),
        ));
    }
    Ok(())
}

/// Every secret of the worker's credential (rotation), the one the worker sends first; or the
/// reason they are missing.
pub fn worker_secrets(relay: &RelayArgs) -> Result<Vec<Secret>, ConfigError> {
    check_relay(relay)?;
    let raw = present(&relay.worker_secret).ok_or_else(|| {
        ConfigError("RELAY_WORKER_SECRET is required: the worker's credential at the relay".into())
    })?;
    secret_list("RELAY_WORKER_SECRET", &raw)
}

/// Every secret of the operators' credential (empty when none is configured).
pub fn operator_secrets(relay: &RelayArgs) -> Result<Vec<Secret>, ConfigError> {
    match present(&relay.operator_secret) {
        Some(raw) => secret_list("RELAY_OPERATOR_SECRET", &raw),
        None => Ok(Vec::new()),
    }
}

/// What `call` and `demo` act with: a session token given as it is, or the operators'
/// credential, which mints one (and reads the tab).
pub enum CliCredential {
    Token(Secret),
    Operator(Secret),
}

/// [`CliCredential`] from the command line and environment, or the reason there is none.
pub fn cli_credential(relay: &RelayArgs) -> Result<CliCredential, ConfigError> {
    check_relay(relay)?;
    if let Some(token) = present(&relay.token) {
        return Ok(CliCredential::Token(Secret::new(token)));
    }
    match operator_secrets(relay)?.into_iter().next() {
        Some(operator) => Ok(CliCredential::Operator(operator)),
        None => Err(ConfigError(
            "a session token for the key (VOICE_AGENT_TOKEN or --token) or the operators' \
             credential to mint one (RELAY_OPERATOR_SECRET) is required"
                .into(),
        )),
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
    fn the_examples_placeholder_is_refused() {
        let cli = parse(&[
            "--worker-secret",
            "replace-me-with-the-relays-worker-secret",
            "demo",
            "k",
        ]);
        let err = worker_secrets(&cli.relay).err().unwrap().to_string();
        assert!(
            err.contains("RELAY_WORKER_SECRET is still the example's placeholder"),
            "{err}"
        );
    }

    #[test]
    fn first_of_several_worker_secrets_is_used() {
        let cli = parse(&[
            "--worker-secret",
            " aaaaaaaaaaaaaaaaaaaa , bbbbbbbbbbbbbbbbbbbb",
            "demo",
            "k",
        ]);
        assert_eq!(
            worker_secrets(&cli.relay).unwrap()[0].expose(),
            "aaaaaaaaaaaaaaaaaaaa"
        );
    }

    #[test]
    fn the_cli_acts_with_a_token_or_the_operators_credential() {
        let cli = parse(&["demo", "k"]);
        let err = cli_credential(&cli.relay).err().unwrap().to_string();
        assert!(err.contains("VOICE_AGENT_TOKEN"), "{err}");
        let cli = parse(&["--operator-secret", "cccccccccccccccccccc", "demo", "k"]);
        assert!(matches!(
            cli_credential(&cli.relay),
            Ok(CliCredential::Operator(_))
        ));
        let cli = parse(&[
            "--token",
            "a.b.c",
            "--operator-secret",
            "cccccccccccccccccccc",
            "demo",
            "k",
        ]);
        assert!(matches!(
            cli_credential(&cli.relay),
            Ok(CliCredential::Token(_))
        ));
        let cli = parse(&["--legacy-agent-secret", "dddddddddddddddddddd", "demo", "k"]);
        let err = cli_credential(&cli.relay).err().unwrap().to_string();
        assert!(
            err.contains("RELAY_AGENT_SECRET is no longer read"),
            "{err}"
        );
    }
}
