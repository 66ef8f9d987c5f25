//! `agent-worker serve` as a process: build the worker from the configuration and the
//! catalog, listen, keep sessions in line with LiveKit's rooms, reload the catalog on SIGHUP
//! (a bad one is refused and the running one kept), stop on SIGINT or SIGTERM.

use std::sync::Arc;

use std::time::Duration;

use crate::Worker;
use crate::catalog::Catalog;
use crate::client::{ClientConfig, RelayClient};
use crate::serve::dispatch::Dispatcher;
use crate::serve::kept::StateFile;
use crate::serve::{ServeState, rooms, serve};

/// How often what expires (verified tokens, MCP sessions' owners, Vapi's replay memory) is
/// swept.
const SWEEP_EVERY: Duration = Duration::from_secs(30);

use super::config::Cli;
use super::serve_config::ServeConfig;

pub async fn run(cli: &Cli, config: ServeConfig, catalog: Catalog) -> anyhow::Result<()> {
    let client = RelayClient::new(ClientConfig::new(
        &cli.relay.relay_url,
        config.worker_secret.clone(),
    ))?;
    let summary = catalog.summary();
    let mut state = ServeState::new(
        Worker::with_catalog(client.clone(), catalog, config.page_tools),
        &config.livekit_api_key,
        &config.livekit_api_secret,
        config.vapi_secret.as_ref(),
        &config.operator_secrets,
    )
    .with_mcp(config.mcp.clone());
    match (&config.agent_name, &config.livekit_http_url) {
        (Some(name), Some(url)) => {
            tracing::info!(agent = %name, "an agent is dispatched for each user who joins with a key");
            state = state.with_dispatcher(Dispatcher::new(
                name,
                url,
                &config.livekit_api_key,
                &config.livekit_api_secret,
                client,
            ));
        }
        (Some(_), None) => {
            tracing::warn!(
                "WORKER_AGENT_NAME is set but LIVEKIT_URL is not: no agent is dispatched"
            )
        }
        _ => {}
    }
    if let Some(path) = &config.state_file {
        state = state.with_state_file(StateFile(path.clone()));
    }
    let state = Arc::new(state);
    // The relay's session keys, fetched until they are (the relay may start after the worker).
    let keys = tokio::spawn({
        let state = state.clone();
        async move {
            let mut wait = Duration::from_millis(200);
            while !state.keyring.fetch().await {
                tokio::time::sleep(wait).await;
                wait = (wait * 2).min(Duration::from_secs(5));
            }
        }
    });
    let sweeper = tokio::spawn({
        let state = state.clone();
        async move {
            loop {
                tokio::time::sleep(SWEEP_EVERY).await;
                state.sweep();
            }
        }
    });
    let listener = tokio::net::TcpListener::bind(config.addr)
        .await
        .map_err(|e| anyhow::anyhow!("cannot listen on {}: {e}", config.addr))?;
    let addr = listener.local_addr()?;
    if config.vapi_secret.is_none() {
        tracing::warn!("VAPI_SECRET is not set: the Vapi webhook answers 503");
    }
    if config.page_tools {
        tracing::warn!(
            "WORKER_PAGE_TOOLS is on: tools defined by pages (their text included) are offered to agents"
        );
    }
    tracing::info!(
        version = env!("CARGO_PKG_VERSION"),
        %addr,
        relay = %cli.relay.relay_url,
        mcp = %format!("http://{addr}/mcp"),
        mcp_hosts = %config.mcp.allowed_hosts.join(","),
        catalog = %summary,
        page_tools = config.page_tools,
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
    let reloads = tokio::spawn(reload_on_hangup(state.clone(), cli.catalog.catalog.clone()));
    serve(listener, state, signal()).await?;
    reloads.abort();
    keys.abort();
    sweeper.abort();
    if let Some(task) = sync {
        task.abort();
    }
    tracing::info!("agent-worker stopped");
    Ok(())
}

/// Reads the catalog again at each SIGHUP; a catalog with problems is refused (each logged)
/// and the running one stays.
async fn reload_on_hangup(state: Arc<ServeState>, path: Option<std::path::PathBuf>) {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let Ok(mut hangups) = signal(SignalKind::hangup()) else {
            tracing::warn!("cannot listen for SIGHUP: the catalog is not reloaded");
            return;
        };
        while hangups.recv().await.is_some() {
            match Catalog::load_or_default(path.as_deref()) {
                Ok(catalog) => state.worker.reload(catalog),
                Err(problems) => {
                    for problem in &problems {
                        tracing::error!(problem = %problem, "catalog not reloaded");
                    }
                    tracing::error!(
                        problems = problems.len(),
                        kept = %state.worker.catalog.current().summary(),
                        "the new catalog has problems: the running one is kept"
                    );
                }
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = (state, path);
    }
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
