//! A relay started in-process for the integration tests: `relay::run` (or the router alone, with
//! its Socket.IO handle) on port 0 with the flags a test adds to a base configuration, driven
//! with reqwest or a raw socket over loopback.

use std::net::SocketAddr;
use std::time::Duration;

use clap::Parser;
use relay::config::{Cli, Config};
use relay::delivery::Io;

/// The agent worker's credential at the test relay (it mints agents' session tokens).
pub const WORKER_SECRET: &str = "test-worker-secret-0123456789";
/// The test relay's session signing key (made by `relay session-key` for these tests only).
pub const SESSION_KEYS: &str = "k941dc25f:V87Kh8nwIPYcwCc1MCMCPRapF-Qa8M_B60pOfvRbLPc";
pub const LIVEKIT_SECRET: &str = "test-livekit-secret-0123456789abcdef";

#[allow(dead_code)] // each test crate compiles this module; not all of them use every item
pub struct Relay {
    pub addr: SocketAddr,
    pub http: reqwest::Client,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<anyhow::Result<()>>,
}

/// The configuration of a test relay: port 0 on loopback, LiveKit key `devkey`,
/// [`WORKER_SECRET`], [`SESSION_KEYS`], a 500 ms drain, then `flags`.
pub fn config(flags: &[&str]) -> Config {
    let base = [
        "relay",
        "--addr",
        "127.0.0.1:0",
        "--livekit-api-key",
        "devkey",
        "--livekit-api-secret",
        LIVEKIT_SECRET,
        "--worker-secret",
        WORKER_SECRET,
        "--session-keys",
        SESSION_KEYS,
        "--drain-ms",
        "500",
    ];
    let cli = Cli::try_parse_from(base.iter().chain(flags)).expect("flags");
    Config::from_options(cli.options).expect("valid config")
}

/// Starts a relay on a free loopback port with [`config`]`(flags)`.
#[allow(dead_code)] // each test crate compiles this module; not all of them use every item
pub async fn start(flags: &[&str]) -> Relay {
    let config = config(flags);
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

/// Builds the relay in-process and serves its router on a free loopback port; returns the
/// address and the Socket.IO handle, for tests that inspect the sockets themselves.
#[allow(dead_code)] // each test crate compiles this module; not all of them use every item
pub async fn serve_with_io(flags: &[&str]) -> (SocketAddr, Io) {
    let app = relay::App::new(config(flags), None);
    let (router, io) = relay::build(app).await.expect("build");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        axum::serve(
            listener,
            router.into_make_service_with_connect_info::<SocketAddr>(),
        )
        .await
    });
    (addr, io)
}

#[allow(dead_code)] // each test crate compiles this module; not all of them use every item
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
