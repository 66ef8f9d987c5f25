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
    if cli.command.is_none() {
        tune_malloc();
    }
    if let Some(Command::Healthcheck { url }) = &cli.command {
        return match relay::healthcheck::probe(url, std::time::Duration::from_secs(3)) {
            Ok(()) => ExitCode::SUCCESS,
            Err(reason) => {
                eprintln!("relay healthcheck: {reason}");
                ExitCode::FAILURE
            }
        };
    }
    if let Some(Command::SessionKey) = &cli.command {
        println!("{}", relay::sessions::SigningKeys::generate_entry());
        return ExitCode::SUCCESS;
    }
    let config = match Config::from_options(cli.options) {
        Ok(c) => c,
        Err(err) => {
            eprintln!("relay: {err}");
            return ExitCode::from(EXIT_CONFIG);
        }
    };
    if let Some(Command::CheckConfig { connect }) = &cli.command {
        println!(
            "relay: configuration is valid (token mode {})",
            config.token_mode.as_str()
        );
        if *connect && config.redis_url.is_some() {
            return probe_redis(&config);
        }
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

/// `check-config --connect`: connects to Redis once and says whether it answers.
fn probe_redis(config: &Config) -> ExitCode {
    let Some(url) = &config.redis_url else {
        return ExitCode::SUCCESS;
    };
    let probed = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(anyhow::Error::from)
        .and_then(|rt| {
            rt.block_on(async {
                let ca = match &config.redis_ca_file {
                    Some(path) => {
                        Some(relay::config::read_ca_file(path).map_err(|e| anyhow::anyhow!(e))?)
                    }
                    None => None,
                };
                relay::store::redis::Cluster::probe(url.expose(), ca).await
            })
        });
    match probed {
        Ok(found) => {
            println!("relay: {found}");
            ExitCode::SUCCESS
        }
        Err(err) => {
            eprintln!("relay: {err:#}");
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
        session_kid = config.session_keys.signer().0,
        operators = !config.operator_secrets.is_empty(),
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
    // Colours only on a terminal: a log file (scripts/manage.sh's .run/relay.log) stays plain
    // text that grep finds fields in.
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stdout()));
    match format {
        LogFormat::Json => builder.json().flatten_event(true).init(),
        LogFormat::Text => builder.init(),
    }
}

/// The glibc tunable the relay runs with: allocations of 16 KiB and more (a large call's body and
/// its copies) get pages of their own, given back to the system when freed. With glibc's
/// adaptive threshold they come from the heap, which keeps them after a burst of large calls:
/// measured with 5,000 idle tabs and 100 agents at once sending one 32 KiB call to every tab,
/// 7.1 KB per tab 10 s after the burst against 5.2 KB idle; with this, 5.5 KB. CPU per small call
/// is the same (docs/benchmark.md, "Memory after a burst").
const MALLOC_TUNABLE: &str = "glibc.malloc.mmap_threshold=16384";

/// Runs the relay again, in this same process, with [`MALLOC_TUNABLE`] in `GLIBC_TUNABLES` (glibc
/// reads it only when a program starts), unless the environment already sets an mmap threshold
/// or `RELAY_MALLOC_TUNING=off`. Returns only when it does not (or cannot) re-run.
#[cfg(all(target_os = "linux", target_env = "gnu", not(feature = "mimalloc")))]
fn tune_malloc() {
    use std::os::unix::process::CommandExt;
    if std::env::var("RELAY_MALLOC_TUNING").is_ok_and(|v| v == "off") {
        return;
    }
    let current = std::env::var("GLIBC_TUNABLES").unwrap_or_default();
    if current.contains("glibc.malloc.mmap_threshold") {
        return;
    }
    let Ok(exe) = std::env::current_exe() else {
        return;
    };
    let tunables = if current.is_empty() {
        MALLOC_TUNABLE.to_owned()
    } else {
        format!("{current}:{MALLOC_TUNABLE}")
    };
    let err = std::process::Command::new(exe)
        .args(std::env::args_os().skip(1))
        .env("GLIBC_TUNABLES", tunables)
        .exec();
    eprintln!("relay: running without the malloc tuning ({err})");
}

#[cfg(not(all(target_os = "linux", target_env = "gnu", not(feature = "mimalloc"))))]
fn tune_malloc() {}

/// With `--features mimalloc`: about 8% less CPU per call (glibc's malloc consolidates its fast
/// bins on the larger allocations of every call) and 13% less memory per idle tab, for 6 MB more
/// at start and more held after bursts (see docs/benchmark.md, "Allocator").
#[cfg(feature = "mimalloc")]
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;
