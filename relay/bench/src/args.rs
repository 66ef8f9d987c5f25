//! The generator's command line.

use clap::Parser;

#[derive(Parser, Clone)]
#[command(name = "loadgen", about = "Load generator for the voice-agent relay")]
pub struct Args {
    /// Server base URL.
    #[arg(long, default_value = "http://127.0.0.1:3001")]
    pub url: String,
    /// Label for the report.
    #[arg(long, default_value = "relay")]
    pub label: String,
    /// Tabs to open.
    #[arg(long, default_value_t = 100)]
    pub tabs: usize,
    /// Concurrent agents (HTTP connections); 0 only opens tabs (idle measurement).
    #[arg(long, default_value_t = 32)]
    pub agents: usize,
    /// Await each call's answer.
    #[arg(long)]
    pub awaited: bool,
    /// Measured seconds (after the warm-up).
    #[arg(long, default_value_t = 10.0)]
    pub duration_secs: f64,
    /// Seconds of calls before the measured ones.
    #[arg(long, default_value_t = 1.0)]
    pub warmup_secs: f64,
    /// Calls per second across all agents; unset means closed loop.
    #[arg(long)]
    pub rate: Option<f64>,
    /// How tabs bind: `token` (handshake auth) or `register` (bare key event).
    #[arg(long, default_value = "token")]
    pub bind: String,
    /// Server process to measure (RSS, CPU).
    #[arg(long)]
    pub server_pid: Option<u32>,
    /// Seconds to hold idle tabs before measuring memory.
    #[arg(long, default_value_t = 2.0)]
    pub settle_secs: f64,
    /// Where agents post their calls, when not to `--url` (tabs on one relay node, calls to
    /// another: the several-node path).
    #[arg(long)]
    pub call_url: Option<String>,
    /// Say on stderr when the measured calls begin (`loadgen: measuring`) and end (`loadgen:
    /// measured`), for a driver that measures other processes over the same window.
    #[arg(long)]
    pub marks: bool,
    /// Tabs connecting at once.
    #[arg(long, default_value_t = 200)]
    pub connect_concurrency: usize,
    /// Request headers of each tab's handshake: `browser` (what Chromium sends, with a 200-byte
    /// cookie) or `plain` (host and the upgrade headers only).
    #[arg(long, default_value = "browser")]
    pub headers: String,
    /// After binding, send every tab one fire-and-forget call with this many bytes of params
    /// and measure the server's memory again once all arrived (0: no such call).
    #[arg(long, default_value_t = 0)]
    pub big_emit_bytes: usize,
    /// Agents (connections) sending those calls at once.
    #[arg(long, default_value_t = 32)]
    pub big_emit_agents: usize,
    /// Measure the server's memory again this many seconds after the first measurement that
    /// follows the large calls (0: not again): whether it gives back what they made it grow.
    #[arg(long, default_value_t = 0.0)]
    pub after_emit_secs: f64,
    /// After binding, each tab declares it handles this many tools (`voice-agent:handles`),
    /// as the browser client does (0: tabs never declare).
    #[arg(long, default_value_t = 0)]
    pub handles: usize,
    /// Several-node mode, driven by commands on stdin (`bind`, `calls SECS RATE`, `roam SECS`,
    /// `exit`), one JSON line on stdout after each (`scripts/bench/scale.mjs` drives it): tabs
    /// on the nodes of `--nodes`, calls from the rate-limited caller, tabs that reconnect.
    #[arg(long)]
    pub control: bool,
    /// With `--control`: the nodes and how many tabs bind on each, `http://host:port=count,…`
    /// (tokens are minted on the node the tab binds on).
    #[arg(long, value_delimiter = ',')]
    pub nodes: Vec<String>,
    /// With `--control`: where calls go, one node after the other (`http://host:port,…`;
    /// default: the nodes of `--nodes`).
    #[arg(long, value_delimiter = ',')]
    pub call_nodes: Vec<String>,
    /// With `--control`: where a tab whose connection ended reconnects, a node picked at random
    /// for each attempt (default: the nodes of `--nodes`).
    #[arg(long, value_delimiter = ',')]
    pub reconnect_nodes: Vec<String>,
    /// Loopback source address of the tabs (each source and destination pair has ~28k ports).
    #[arg(long)]
    pub source_ip: Option<std::net::IpAddr>,
    /// With `--control`: calls in flight at most (each holds a connection).
    #[arg(long, default_value_t = 1500)]
    pub max_in_flight: usize,
    /// With `--control`: the relay's timeout for each call (`timeoutMs`).
    #[arg(long, default_value_t = 10_000)]
    pub call_timeout_ms: u64,
}

/// Tabs per loopback source address: each (source, destination) pair has ~28k ephemeral ports.
pub const TABS_PER_SOURCE_IP: usize = 20_000;
