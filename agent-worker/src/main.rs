//! `agent-worker` binary: `call`, `serve`, `demo`, `check-config`.

use std::process::ExitCode;
use std::sync::Arc;

use agent_worker::client::{CallOptions, ClientConfig, RelayClient, ToolError};
use agent_worker::config::{Cli, Command, EXIT_CONFIG, ServeConfig, agent_secret};
use agent_worker::rooms;
use agent_worker::webhooks::{ServeState, serve};
use agent_worker::{Worker, demo, toolsets};
use clap::Parser;
use serde_json::{Value, json};
use tracing_subscriber::EnvFilter;

fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(err) => {
            eprintln!("agent-worker: cannot start the runtime: {err}");
            return ExitCode::FAILURE;
        }
    };
    runtime.block_on(dispatch(cli))
}

fn config_error(err: impl std::fmt::Display) -> ExitCode {
    eprintln!("agent-worker: {err}");
    ExitCode::from(EXIT_CONFIG)
}

fn client(cli: &Cli) -> Result<RelayClient, ExitCode> {
    let secret = agent_secret(&cli.relay).map_err(config_error)?;
    RelayClient::new(ClientConfig::new(&cli.relay.relay_url, secret)).map_err(|e| {
        eprintln!("agent-worker: {e}");
        ExitCode::FAILURE
    })
}

fn init_tracing(json_logs: bool, default: &str) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    if json_logs {
        builder.json().flatten_event(true).init();
    } else {
        builder.init();
    }
}

fn print_json(value: &Value) {
    println!("{value}");
}

async fn dispatch(cli: Cli) -> ExitCode {
    match &cli.command {
        Command::Call {
            api_key,
            tool_name,
            params,
            await_result,
            timeout_ms,
        } => {
            let client = match client(&cli) {
                Ok(c) => c,
                Err(code) => return code,
            };
            init_tracing(false, "warn");
            let params: Option<Value> = match params.as_deref().map(serde_json::from_str) {
                None => None,
                Some(Ok(v)) => Some(v),
                Some(Err(e)) => {
                    return fail(&ToolError::new(
                        "invalid_arguments",
                        format!("params are not JSON: {e}"),
                    ));
                }
            };
            // Shipped tools are checked against their schema before anything is sent.
            let registry = toolsets::registry();
            if registry.get(tool_name).is_some() {
                let args = params.clone().unwrap_or_else(|| json!({}));
                if let Err(e) = registry.validate(tool_name, &args) {
                    return fail(&e);
                }
            }
            let options = CallOptions {
                await_result: *await_result,
                timeout_ms: *timeout_ms,
                idempotency_key: None,
            };
            match client
                .call(api_key, tool_name, params.as_ref(), &options)
                .await
            {
                Ok(ok) => {
                    let mut out = json!({"ok": true, "callId": ok.call_id});
                    if let Some(result) = ok.result {
                        out["result"] = result;
                    }
                    print_json(&out);
                    ExitCode::SUCCESS
                }
                Err(e) => fail(&e),
            }
        }
        Command::Demo { api_key } => {
            let client = match client(&cli) {
                Ok(c) => c,
                Err(code) => return code,
            };
            init_tracing(false, "warn");
            let worker = Worker::new(client);
            let mut out = std::io::stdout();
            match demo::run(&worker, api_key, &mut out).await {
                Ok(_) => ExitCode::SUCCESS,
                Err(_) => ExitCode::FAILURE,
            }
        }
        Command::CheckConfig(serve_args) => match ServeConfig::from_args(&cli.relay, serve_args) {
            Ok(_) => {
                println!("agent-worker: configuration is valid");
                ExitCode::SUCCESS
            }
            Err(e) => config_error(e),
        },
        Command::Serve(serve_args) => {
            let config = match ServeConfig::from_args(&cli.relay, serve_args) {
                Ok(c) => c,
                Err(e) => return config_error(e),
            };
            // rmcp logs every session and notification at info: warnings are enough here.
            init_tracing(config.json_logs, "info,rmcp=warn");
            match run_serve(&cli, config).await {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    tracing::error!(cause = %format!("{e:#}"), "agent-worker failed");
                    ExitCode::FAILURE
                }
            }
        }
    }
}

fn fail(err: &ToolError) -> ExitCode {
    let mut out = err.to_llm_value();
    if let Some(id) = &err.call_id {
        out["callId"] = json!(id);
    }
    print_json(&out);
    ExitCode::FAILURE
}

async fn run_serve(cli: &Cli, config: ServeConfig) -> anyhow::Result<()> {
    let client = RelayClient::new(ClientConfig::new(
        &cli.relay.relay_url,
        config.agent_secret.clone(),
    ))?;
    let mut state = ServeState::new(
        Worker::new(client),
        &config.livekit_api_key,
        &config.livekit_api_secret,
        config.vapi_secret.as_ref(),
        &config.accepted_agent_secrets,
    )
    .with_mcp(config.mcp.clone());
    if let Some(path) = &config.state_file {
        state = state.with_state_file(rooms::StateFile(path.clone()));
    }
    let state = Arc::new(state);
    let listener = tokio::net::TcpListener::bind(config.addr)
        .await
        .map_err(|e| anyhow::anyhow!("cannot listen on {}: {e}", config.addr))?;
    let addr = listener.local_addr()?;
    if config.vapi_secret.is_none() {
        tracing::warn!("VAPI_SECRET is not set: the Vapi webhook answers 503");
    }
    tracing::info!(
        version = env!("CARGO_PKG_VERSION"),
        %addr,
        relay = %cli.relay.relay_url,
        mcp = %format!("http://{addr}/mcp"),
        mcp_hosts = %config.mcp.allowed_hosts.join(","),
        "agent-worker listening on http://{addr}"
    );
    let sync = match (&config.livekit_http_url, config.room_sync) {
        (Some(url), Some(every)) => {
            tracing::info!(livekit = %url, every_s = every.as_secs(), "reading LiveKit's rooms through RoomService");
            let client =
                rooms::room_client(url, &config.livekit_api_key, &config.livekit_api_secret);
            Some(tokio::spawn(rooms::keep_in_sync(
                state.clone(),
                client,
                every,
            )))
        }
        _ => {
            tracing::info!("LIVEKIT_URL is not set: sessions follow LiveKit's webhooks only");
            None
        }
    };
    serve(listener, state, signal()).await?;
    if let Some(task) = sync {
        task.abort();
    }
    tracing::info!("agent-worker stopped");
    Ok(())
}

async fn signal() {
    let term = async {
        #[cfg(unix)]
        if let Ok(mut s) = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        {
            s.recv().await;
            return;
        }
        std::future::pending::<()>().await
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term => {}
    }
    tracing::info!("stopping");
}
