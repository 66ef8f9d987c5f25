//! Who may reach `/mcp`: the hosts and browser origins accepted.

/// Who may reach `/mcp` from where: the `Host` headers accepted (rmcp refuses others with 403,
/// against DNS rebinding) and the browser origins accepted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct McpConfig {
    /// Hosts (`name` or `name:port`) accepted in `Host`; empty accepts any.
    pub allowed_hosts: Vec<String>,
    /// Origins (`scheme://host[:port]`, `:*` for any port) accepted when a request carries
    /// `Origin`; `None` accepts any. `Some(vec![])` refuses every request that carries one.
    /// The voice platforms call from servers, which send no `Origin`; by default only pages
    /// served from this machine's loopback addresses may call.
    pub allowed_origins: Option<Vec<String>>,
}

/// The loopback names, as hosts and as the origins of pages served from them.
const LOOPBACK: [&str; 3] = ["localhost", "127.0.0.1", "[::1]"];

impl Default for McpConfig {
    fn default() -> Self {
        McpConfig {
            allowed_hosts: LOOPBACK
                .iter()
                .map(|h| h.trim_matches(['[', ']']).to_owned())
                .collect(),
            allowed_origins: Some(
                LOOPBACK
                    .iter()
                    .flat_map(|h| [format!("http://{h}:*"), format!("https://{h}:*")])
                    .collect(),
            ),
        }
    }
}
