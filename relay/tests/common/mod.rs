//! A relay started in-process for the HTTP tests: `relay::run` on port 0 with the flags a test
//! adds to a base configuration, driven with reqwest over loopback.

use std::net::SocketAddr;
use std::time::Duration;

use clap::Parser;
use relay::config::{Cli, Config};

pub const AGENT_SECRET: &str = "test-agent-secret-0123456789";
pub const LIVEKIT_SECRET: &str = "test-livekit-secret-0123456789abcdef";

pub struct Relay {
    pub addr: SocketAddr,
    pub http: reqwest::Client,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<anyhow::Result<()>>,
}

/// Starts a relay on a free loopback port: LiveKit key `devkey`, [`AGENT_SECRET`], a 500 ms
/// drain, then `flags`.
pub async fn start(flags: &[&str]) -> Relay {
    let base = [
        "relay",
        "--addr",
        "127.0.0.1:0",
        "--livekit-api-key",
        "devkey",
        "--livekit-api-secret",
        LIVEKIT_SECRET,
        "--agent-secret",
        AGENT_SECRET,
        "--drain-ms",
        "500",
    ];
    let cli = Cli::try_parse_from(base.iter().chain(flags)).expect("flags");
    let config = Config::from_options(cli.options).expect("valid config");
    let listener = tokio::net::TcpListener::bind(config.addr).await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(relay::run(listener, config, async {
        let _ = rx.await;
    }));
    Relay {
        addr,
        http: reqwest::Client::builder()
            .timeout(Duration::from_secs(10))
            .build()
            .unwrap(),
        stop: Some(tx),
        task,
    }
}

impl Relay {
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// Stops the relay and waits for it to drain.
    pub async fn shutdown(mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        tokio::time::timeout(Duration::from_secs(10), self.task)
            .await
            .expect("relay stops within its drain bound")
            .unwrap()
            .unwrap();
    }
}
