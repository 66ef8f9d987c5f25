//! The `agent-worker` commands: `call`, `demo`, `check`, `catalog export`, `check-config` and
//! `serve` ([`run`] dispatches; `main` only parses and starts the runtime).

pub mod config;
mod serve;
pub mod serve_config;

use std::process::ExitCode;

use serde_json::{Value, json};
use tracing_subscriber::EnvFilter;

use crate::Worker;
use crate::catalog::Catalog;
use crate::catalog::export::{self, Target};
use crate::client::{CallOptions, ClientConfig, RelayClient};
use crate::demo;
use crate::error::{Code, ToolError};
use config::{CatalogCommand, Cli, CliCredential, Command, EXIT_CONFIG, cli_credential};
use relay_wire::Secret;
use relay_wire::session::SessionRequest;
use serve_config::ServeConfig;

fn config_error(err: impl std::fmt::Display) -> ExitCode {
    eprintln!("agent-worker: {err}");
    ExitCode::from(EXIT_CONFIG)
}

/// The catalog the command line names (or the default one); every problem printed otherwise.
fn catalog(cli: &Cli) -> Result<Catalog, ExitCode> {
    Catalog::load_or_default(cli.catalog.path()).map_err(|problems| {
        for problem in &problems {
            eprintln!("agent-worker: {problem}");
        }
        eprintln!(
            "agent-worker: the catalog has {} problem{}",
            problems.len(),
            if problems.len() == 1 { "" } else { "s" }
        );
        ExitCode::from(EXIT_CONFIG)
    })
}

/// The relay client of `call` and `demo`, and the session token they act on `api_key` with:
/// the one given, or one the operators' credential mints for that key alone. The client holds
/// that token too, so what it reads and sets of the tab (its state, its mode) is what the token
/// may, and the operators' credential serves only to mint it.
async fn acting_on(cli: &Cli, api_key: &str) -> Result<(RelayClient, String), ExitCode> {
    let client = |credential: Secret| {
        RelayClient::new(ClientConfig::new(&cli.relay.relay_url, credential)).map_err(|e| {
            eprintln!("agent-worker: {e}");
            ExitCode::FAILURE
        })
    };
    let token = match cli_credential(&cli.relay).map_err(config_error)? {
        CliCredential::Token(token) => token,
        CliCredential::Operator(operator) => {
            match client(operator)?
                .mint_session(&SessionRequest::for_key(api_key))
                .await
            {
                Ok(session) => Secret::new(session.token),
                Err(e) => return Err(fail(&e)),
            }
        }
    };
    Ok((client(token.clone())?, token.expose().to_owned()))
}

/// rmcp logs every session, request and notification at `info`, some as whole Debug dumps of
/// its messages: capped at `warn` whatever `RUST_LOG` says, unless `RUST_LOG` names rmcp itself.
const RMCP_CAP: &str = "rmcp=warn";

fn init_tracing(json_logs: bool, default: &str) {
    let asked = std::env::var("RUST_LOG").ok();
    let mut filter = match asked.as_deref() {
        Some(asked) if !asked.trim().is_empty() => {
            EnvFilter::try_new(asked).unwrap_or_else(|_| EnvFilter::new(default))
        }
        _ => EnvFilter::new(default),
    };
    if !asked.as_deref().unwrap_or_default().contains("rmcp")
        && let Ok(cap) = RMCP_CAP.parse()
    {
        filter = filter.add_directive(cap);
    }
    // Colours only on a terminal: a log file (scripts/manage.sh's .run/worker.log) stays plain
    // text that grep finds fields in.
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
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

fn fail(err: &ToolError) -> ExitCode {
    let mut out = err.to_llm_value();
    if let Some(id) = &err.call_id {
        out["callId"] = json!(id);
    }
    print_json(&out);
    ExitCode::FAILURE
}

/// Runs the command.
pub async fn run(cli: Cli) -> ExitCode {
    match &cli.command {
        Command::Call {
            api_key,
            tool_name,
            params,
            await_result,
            timeout_ms,
        } => {
            let catalog = match catalog(&cli) {
                Ok(c) => c,
                Err(code) => return code,
            };
            init_tracing(false, "warn");
            let (client, token) = match acting_on(&cli, api_key).await {
                Ok(acting) => acting,
                Err(code) => return code,
            };
            let params: Option<Value> = match params.as_deref().map(serde_json::from_str) {
                None => None,
                Some(Ok(v)) => Some(v),
                Some(Err(e)) => {
                    return fail(&ToolError::new(
                        Code::InvalidArguments,
                        format!("params are not JSON: {e}"),
                    ));
                }
            };
            // A catalog tool is checked against its schema before anything is sent, and its
            // own settings are the defaults; any other name is sent as it is.
            let mut options = CallOptions {
                await_result: *await_result,
                timeout_ms: *timeout_ms,
                idempotency_key: None,
            };
            let known = catalog.tool(tool_name);
            match known {
                Some(tool) => {
                    let args = params.clone().unwrap_or_else(|| json!({}));
                    if let Err(e) = tool.validate(&args) {
                        return fail(&e);
                    }
                    options.await_result |= tool.spec.await_result;
                    options.timeout_ms = options.timeout_ms.or(tool.spec.timeout_ms);
                }
                None => eprintln!(
                    "agent-worker: {tool_name} is not in {}; sent without a schema check",
                    catalog.source()
                ),
            }
            match client
                .call(&token, api_key, tool_name, params.as_ref(), &options)
                .await
            {
                Ok(ok) => {
                    // The answer must have the shape the catalog promises, as on every surface.
                    if let (Some(tool), Some(result)) = (known, &ok.result)
                        && let Err(mut e) = tool.check_answer(result)
                    {
                        e.call_id = Some(ok.call_id.clone());
                        return fail(&e);
                    }
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
            let catalog = match catalog(&cli) {
                Ok(c) => c,
                Err(code) => return code,
            };
            init_tracing(false, "warn");
            let (client, token) = match acting_on(&cli, api_key).await {
                Ok(acting) => acting,
                Err(code) => return code,
            };
            // The tab's own page tools (the demo page's set_theme) are shown too: the demo runs
            // against the user's own tab.
            let worker = Worker::with_catalog(client, catalog, true);
            let mut out = std::io::stdout();
            match demo::run(&worker, api_key, &token, &mut out).await {
                Ok(_) => ExitCode::SUCCESS,
                Err(_) => ExitCode::FAILURE,
            }
        }
        Command::Check => match catalog(&cli) {
            Ok(catalog) => {
                println!("agent-worker: {} — valid", catalog.summary());
                ExitCode::SUCCESS
            }
            Err(code) => code,
        },
        Command::Catalog(CatalogCommand::Export {
            format,
            mode,
            worker_url,
        }) => {
            let catalog = match catalog(&cli) {
                Ok(c) => c,
                Err(code) => return code,
            };
            let target = Target {
                mode: mode.as_deref(),
                worker_url: worker_url.as_deref(),
            };
            match export::export(&catalog, *format, &target) {
                Ok(tools) => {
                    println!(
                        "{}",
                        serde_json::to_string_pretty(&tools).unwrap_or_default()
                    );
                    ExitCode::SUCCESS
                }
                Err(e) => config_error(e),
            }
        }
        Command::CheckConfig(serve_args) => {
            if let Err(e) = ServeConfig::from_args(&cli.relay, serve_args) {
                return config_error(e);
            }
            match catalog(&cli) {
                Ok(catalog) => {
                    println!(
                        "agent-worker: configuration is valid ({})",
                        catalog.summary()
                    );
                    ExitCode::SUCCESS
                }
                Err(code) => code,
            }
        }
        Command::Serve(serve_args) => {
            let config = match ServeConfig::from_args(&cli.relay, serve_args) {
                Ok(c) => c,
                Err(e) => return config_error(e),
            };
            let catalog = match catalog(&cli) {
                Ok(c) => c,
                Err(code) => return code,
            };
            init_tracing(config.json_logs, "info");
            match serve::run(&cli, config, catalog).await {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    tracing::error!(cause = %format!("{e:#}"), "agent-worker failed");
                    ExitCode::FAILURE
                }
            }
        }
    }
}
