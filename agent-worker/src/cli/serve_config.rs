//! The validated settings of `serve` (and `check-config`): every problem found at once.

use std::net::SocketAddr;

use relay_wire::Secret;

use super::config::{
    ConfigError, MIN_SECRET_LEN, RelayArgs, ServeArgs, operator_secrets, present, worker_secrets,
};
use super::observe::ObserveConfig;
use crate::serve::mcp::McpConfig;

/// Validated settings of `serve`.
#[derive(Debug, Clone)]
pub struct ServeConfig {
    pub addr: SocketAddr,
    pub livekit_api_key: String,
    pub livekit_api_secret: Secret,
    pub vapi_secret: Option<Secret>,
    /// The worker's credential at the relay (the first of the list).
    pub worker_secret: Secret,
    /// The operators' credential (rotation list), for `/sessions` and `/debug`; empty: none.
    pub operator_secrets: Vec<Secret>,
    /// The LiveKit agent dispatched for each user, when set.
    pub agent_name: Option<String>,
    pub json_logs: bool,
    /// LiveKit's HTTP(S) base URL for RoomService, when rooms are read.
    pub livekit_http_url: Option<String>,
    pub room_sync: Option<std::time::Duration>,
    pub state_file: Option<std::path::PathBuf>,
    pub mcp: McpConfig,
    pub page_tools: bool,
    /// Timelines, the debug page, spans.
    pub observe: ObserveConfig,
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
        let workers = worker_secrets(relay).map_err(|e| problems.push(e.0)).ok();
        let operators = operator_secrets(relay)
            .map_err(|e| problems.push(e.0))
            .unwrap_or_default();
        let agent_name = present(&serve.agent_name);
        if agent_name.as_ref().is_some_and(|n| {
            n.len() > 128
                || !n
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
        }) {
            problems
                .push("WORKER_AGENT_NAME must be 1 to 128 letters, digits, '-', '_' or '.'".into());
        }
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
        let observe = ObserveConfig::from_args(&serve.observe, &mut problems);
        match (workers, key, secret, mcp) {
            (Some(workers), Some(livekit_api_key), Some(secret), Some(mcp))
                if problems.is_empty() =>
            {
                Ok(ServeConfig {
                    addr: serve.addr,
                    livekit_api_key,
                    livekit_api_secret: Secret::new(secret),
                    vapi_secret: vapi.map(Secret::new),
                    worker_secret: workers[0].clone(),
                    operator_secrets: operators,
                    agent_name,
                    json_logs,
                    livekit_http_url,
                    room_sync,
                    state_file: serve.state_file.clone(),
                    mcp,
                    page_tools: serve.page_tools,
                    observe,
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
    use clap::Parser;

    use super::super::config::{Cli, Command};
    use super::*;

    /// `agent-worker <args>`, which must be `check-config` with its options, as the worker
    /// would read it.
    fn checked(args: &[&str]) -> Result<ServeConfig, ConfigError> {
        let cli = Cli::try_parse_from(std::iter::once("agent-worker").chain(args.iter().copied()))
            .unwrap();
        let Command::CheckConfig(serve) = &cli.command else {
            panic!("not check-config: {args:?}")
        };
        ServeConfig::from_args(&cli.relay, serve)
    }

    #[test]
    fn serve_needs_its_secrets() {
        let err = checked(&["check-config"]).unwrap_err().to_string();
        assert!(err.contains("RELAY_WORKER_SECRET is required"), "{err}");
        assert!(err.contains("LIVEKIT_API_KEY"), "{err}");
        let err = checked(&[
            "--worker-secret",
            "0123456789abcdef0",
            "check-config",
            "--livekit-api-key",
            "devkey",
            "--livekit-api-secret",
            "secret",
            "--vapi-secret",
            "short",
        ])
        .unwrap_err()
        .to_string();
        assert!(err.contains("VAPI_SECRET is shorter"), "{err}");
        assert!(!err.contains("short\""), "{err}");
    }

    #[test]
    fn mcp_hosts_and_origins() {
        let base = [
            "--worker-secret",
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
            checked(&args).map(|c| c.mcp)
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
}
