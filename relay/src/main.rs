//! `relay` binary: parse configuration, start logging, bind, run until a signal, drain.

use std::process::ExitCode;

use clap::Parser;
use relay::config::{Cli, Command, Config, LogFormat, RuntimeKind};
use tracing_subscriber::EnvFilter;

/// Exit status for a configuration error (EX_USAGE).
const EXIT_CONFIG: u8 = 64;

fn main() -> ExitCode {
    // First of all: jsonwebtoken's full crypto provider, before livekit-api can install its
    // HMAC-only one (see `relay::tokens::install_jwt_crypto`).
    relay::tokens::install_jwt_crypto();
    let cli = Cli::parse();
    if let Some(Command::Healthcheck { url }) = &cli.command {
        return match relay::healthcheck::probe(url, std::time::Duration::from_secs(3)) {
            Ok(()) => ExitCode::SUCCESS,
            Err(reason) => {
                eprintln!("relay healthcheck: {reason}");
                ExitCode::FAILURE
            }
        };
    }
    let config = match Config::from_options(cli.options) {
        Ok(c) => c,
        Err(err) => {
            eprintln!("relay: {err}");
            return ExitCode::from(EXIT_CONFIG);
        }
    };
    if let Some(Command::CheckConfig) = &cli.command {
        println!(
            "relay: configuration is valid (token mode {})",
            config.token_mode.as_str()
        );
        return ExitCode::SUCCESS;
    }
    init_tracing(config.log_format);
    let mut builder = match config.runtime.resolve() {
        RuntimeKind::CurrentThread => tokio::runtime::Builder::new_current_thread(),
        _ => tokio::runtime::Builder::new_multi_thread(),
    };
    let runtime = match builder.enable_all().build() {
        Ok(rt) => rt,
        Err(err) => {
            eprintln!("relay: cannot start the runtime: {err}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(serve(config)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            tracing::error!(cause = %format!("{err:#}"), "relay failed");
            ExitCode::FAILURE
        }
    }
}

async fn serve(config: Config) -> anyhow::Result<()> {
    let listener = tokio::net::TcpListener::bind(config.addr)
        .await
        .map_err(|e| anyhow::anyhow!("cannot listen on {}: {e}", config.addr))?;
    let addr = listener.local_addr()?;
    let cluster = relay::App::connect_cluster(&config).await?;
    relay::announce_token_mode(&config);
    tracing::info!(
        version = env!("CARGO_PKG_VERSION"),
        %addr,
        livekit_url = %config.livekit_url,
        agent_secrets = config.agent_secrets.len(),
        nodes = if cluster.is_some() { "several (Redis)" } else { "one (in memory)" },
        "relay listening on http://{addr}"
    );
    relay::run_connected(listener, config, cluster, relay::shutdown::signal()).await
}

/// Socket.IO and Engine.IO log whole packets below `info`, handshake tokens included, so they are
/// capped at `info` whatever `RUST_LOG` asks for: no log line may hold a whole token.
const CAPPED_TARGETS: [&str; 2] = ["socketioxide=info", "engineioxide=info"];

fn init_tracing(format: LogFormat) {
    let mut filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    for directive in CAPPED_TARGETS {
        if let Ok(d) = directive.parse() {
            filter = filter.add_directive(d);
        }
    }
    let builder = tracing_subscriber::fmt().with_env_filter(filter);
    match format {
        LogFormat::Json => builder.json().flatten_event(true).init(),
        LogFormat::Text => builder.init(),
    }
}

/// With `--features mimalloc`: about 8% less CPU per call (glibc's malloc consolidates its fast
/// bins on the larger allocations of every call) and 13% less memory per idle tab, for 6 MB more
/// at start and more held after bursts (see docs/benchmark.md, "Allocator").
#[cfg(feature = "mimalloc")]
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;
