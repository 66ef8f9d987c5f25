//! The voice-agent relay: a token service, a Socket.IO endpoint where browser tabs bind their
//! per-tab key, and an HTTP API through which an agent's tool calls reach exactly that tab.
//!
//! `main` parses configuration and calls [`run`] with a bound listener, so tests bind port 0 and
//! read the real address back. See `ARCHITECTURE.md` for the map.

pub mod api;
pub mod app;
pub mod app_jwt;
pub mod calls;
pub mod client_addr;
pub mod config;
pub mod delivery;
pub mod error;
pub mod healthcheck;
pub mod idempotency;
pub mod membership;
pub mod metrics;
pub mod openapi;
pub mod pubsub;
pub mod shutdown;
pub mod sockets;
pub mod store;
pub mod tabs;
pub mod tokens;

pub use app::App;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::http::{HeaderValue, header};
use socketioxide::SocketIo;
use tokio::net::TcpListener;
use tower_http::services::ServeDir;

use crate::config::{Config, TokenMode};
use crate::delivery::Io;
use crate::sockets::ClusterAdapter;
use crate::store::KeyStore;
use crate::store::redis::{self as cluster, Cluster};

/// Room for a Socket.IO packet's framing around a tab's answer (`43<ack id>[…]`, the envelope).
const TAB_PACKET_FRAMING: usize = 1024;

/// How often expired keys, idempotency outcomes and rate-limit cells are swept.
const SWEEP_EVERY: Duration = Duration::from_secs(1);

/// Builds the whole service: HTTP routes, the Socket.IO layer (on the Redis adapter when the
/// app runs on several nodes), CORS, the demo page.
pub async fn build(app: Arc<App>) -> anyhow::Result<(Router, Io)> {
    // A tab's answer may be as large as an agent's request, plus its packet's framing; nothing
    // larger is read (engineioxide would accept 64 MiB messages by default).
    let tab_message_limit = app.config.max_body_bytes + TAB_PACKET_FRAMING;
    let builder = SocketIo::builder()
        .with_state(app.clone())
        .ping_interval(Duration::from_secs(15))
        .ping_timeout(Duration::from_secs(10))
        // Tabs send small acknowledgements: each read takes 1 KiB (held only while reading; a
        // larger message gets a buffer of its own size, given back once read).
        .ws_read_buffer_size(1024)
        .ws_max_message_size(tab_message_limit)
        .ws_max_frame_size(tab_message_limit)
        .max_payload(tab_message_limit as u64);
    let (layer, io) = match &app.cluster {
        None => {
            let (layer, io) = builder.build_layer();
            tabs::attach_local(&io);
            (layer, Io::Local(io))
        }
        Some(cluster) => {
            let ctr = socketioxide_redis::RedisAdapterCtr::new_with_driver(
                cluster.pubsub(),
                socketioxide_redis::RedisAdapterConfig::new().with_prefix(cluster::ADAPTER_PREFIX),
            );
            let (layer, io) = builder.with_adapter::<ClusterAdapter>(ctr).build_layer();
            tabs::attach_cluster(&io).await?;
            return Ok(finish(app, layer, Io::Cluster(io)));
        }
    };
    Ok(finish(app, layer, io))
}

fn finish<A: socketioxide::adapter::Adapter>(
    app: Arc<App>,
    layer: socketioxide::layer::SocketIoLayer<A>,
    io: Io,
) -> (Router, Io) {
    let _ = app.io.set(io.clone());
    let mut pages = Router::new();
    let web_dir = &app.config.web_dir;
    if web_dir.join("index.html").is_file() {
        let files = ServeDir::new(web_dir);
        pages = pages.fallback(move |request| static_file(files.clone(), request));
    } else {
        pages = pages.route("/", axum::routing::get(placeholder_page));
    }
    // Socket.IO sits in front of the pages only: what no API route takes. As a layer of the
    // whole router it wrapped every API route too, a boxed service cloned and polled on every
    // agent call (about a tenth of a call's instructions).
    let socket_io = tower::ServiceBuilder::new()
        .layer(axum::middleware::map_request(detach_request_head))
        .layer(layer)
        .service(pages);
    // The document describes the API's handlers, so it is routed here, above both.
    let mut router = api::routes()
        .route("/openapi.json", axum::routing::get(openapi::openapi_json))
        .with_state(app.clone())
        .fallback_service(socket_io);
    if let Some(cors) = app.cors() {
        router = router.layer(cors);
    }
    (router, io)
}

/// The request headers a Socket.IO request keeps, the only ones read once socketioxide has it:
/// `origin` and `host` by the handshake's origin check (`tabs::check_origin`),
/// `sec-websocket-key` by engineioxide to answer a WebSocket upgrade, and `content-type` by
/// engineioxide to decode a long-polling POST. A header a Socket.IO handler starts reading must
/// be added here (`relay/tests/request_head.rs` checks the list against a real handshake).
pub const SOCKET_REQUEST_HEADERS: [header::HeaderName; 4] = [
    header::ORIGIN,
    header::HOST,
    header::SEC_WEBSOCKET_KEY,
    header::CONTENT_TYPE,
];

/// socketioxide keeps each socket's HTTP request head (headers, URI, extensions) for the
/// socket's whole life, and hyper's header values and URI are slices of the connection's read
/// buffer (8–16 KiB), as is the `OriginalUri` axum adds: one kept slice keeps that whole buffer
/// alive per tab. A browser's head also carries a user agent, `accept-*` lines and cookies
/// (0.6–3 KB) that nothing reads. So a Socket.IO request goes on with a copied URI and copies of
/// [`SOCKET_REQUEST_HEADERS`] only, in a map no larger than they need, and without
/// `OriginalUri`; the connection's buffer is freed after the upgrade.
#[doc(hidden)]
pub async fn detach_request_head(mut req: axum::extract::Request) -> axum::extract::Request {
    if !req.uri().path().starts_with("/socket.io") {
        return req;
    }
    let headers = std::mem::take(req.headers_mut());
    let kept = SOCKET_REQUEST_HEADERS
        .iter()
        .filter(|name| headers.contains_key(*name))
        .count();
    let mut owned = axum::http::HeaderMap::with_capacity(kept);
    for name in &SOCKET_REQUEST_HEADERS {
        for value in headers.get_all(name) {
            if let Ok(value) = HeaderValue::from_bytes(value.as_bytes()) {
                owned.append(name.clone(), value);
            }
        }
    }
    *req.headers_mut() = owned;
    req.extensions_mut().remove::<axum::extract::OriginalUri>();
    if let Ok(uri) = axum::http::Uri::try_from(req.uri().to_string()) {
        *req.uri_mut() = uri;
    }
    req
}

/// The demo page's files. What the request's path makes impossible to open (a segment longer
/// than the file system allows, a file used as a directory) is a 404 like any missing file,
/// never the 500 that `ServeDir` answers for such IO errors.
async fn static_file(
    mut files: ServeDir,
    request: axum::extract::Request,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    use std::io::ErrorKind;
    match files.try_call(request).await {
        // ServeDir's own 500 comes only from a redirect URI it cannot build from the request's
        // path (a directory asked for without its trailing slash).
        Ok(response) if response.status() == axum::http::StatusCode::INTERNAL_SERVER_ERROR => {
            axum::http::StatusCode::NOT_FOUND.into_response()
        }
        Ok(response) => response.map(axum::body::Body::new),
        Err(err)
            if matches!(
                err.kind(),
                ErrorKind::InvalidFilename
                    | ErrorKind::InvalidInput
                    | ErrorKind::NotADirectory
                    | ErrorKind::IsADirectory
                    | ErrorKind::NotFound
                    | ErrorKind::PermissionDenied
            ) =>
        {
            tracing::debug!(cause = %err, "static file: no such file");
            axum::http::StatusCode::NOT_FOUND.into_response()
        }
        Err(err) => {
            tracing::error!(cause = %err, "static file could not be read");
            axum::http::StatusCode::INTERNAL_SERVER_ERROR.into_response()
        }
    }
}

async fn placeholder_page() -> axum::response::Html<&'static str> {
    axum::response::Html(
        "<!doctype html><meta charset=utf-8><title>Voice-agent relay</title>\
         <p>The relay is running. The demo page is not built: run <code>scripts/manage.sh build</code>.</p>",
    )
}

/// One start-up line saying who may get a token; a loud warning in open mode. `main` writes it
/// before the relay listens.
pub fn announce_token_mode(config: &Config) {
    match config.token_mode {
        TokenMode::Open => tracing::warn!(
            token_mode = "open",
            "RELAY_TOKEN_MODE=open: FOR DEVELOPMENT ONLY. Anyone who reaches POST /token gets a \
             LiveKit token (in a fresh room of its own) and spends this server's capacity; in \
             production set RELAY_TOKEN_MODE=issuer (the app's backend asks with \
             RELAY_TOKEN_ISSUER_SECRET) or app-jwt"
        ),
        mode => tracing::info!(
            token_mode = mode.as_str(),
            issuer_secrets = config.issuer_secrets.len(),
            bare_keys = config.allow_bare_keys,
            trusted_proxies = config.trusted_proxies.len(),
            "token service: {}",
            match mode {
                TokenMode::Issuer => "the app's backend asks with the issuer secret",
                _ => "browsers present the app's session JWT",
            }
        ),
    }
    if config.allow_bare_keys {
        tracing::info!("RELAY_ALLOW_BARE_KEYS=true: voice-agent:register binds a bare key once");
    }
}

/// Runs the relay on `listener` until `shutdown` resolves, then drains (see [`shutdown`]).
pub async fn run(
    listener: TcpListener,
    config: Config,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let cluster = App::connect_cluster(&config).await?;
    run_connected(listener, config, cluster, shutdown).await
}

/// [`run`] for a caller that already connected to Redis (see [`App::connect_cluster`]).
pub async fn run_connected(
    listener: TcpListener,
    config: Config,
    cluster: Option<Arc<Cluster>>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    // Before any LiveKit token is signed or verified (livekit-api would install an HMAC-only
    // provider for the whole process; see `tokens::install_jwt_crypto`).
    if !tokens::install_jwt_crypto() && config.token_mode == TokenMode::AppJwt {
        anyhow::bail!(
            "another jsonwebtoken crypto provider was installed before the relay's own: \
             RELAY_TOKEN_MODE=app-jwt could not verify RSA or EC keys"
        );
    }
    let app = App::new(config, cluster);
    let (router, io) = build(app.clone()).await?;
    let maintainer = app
        .cluster
        .as_ref()
        .map(|c| tokio::spawn(membership::maintain(app.clone(), c.clone())));

    let sweeper = {
        let app = app.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(SWEEP_EVERY);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                app.store.expire();
            }
        })
    };

    // Small frames (acks, events) must leave at once: without TCP_NODELAY, Nagle's algorithm
    // and delayed ACKs add milliseconds to every round trip.
    let listener = axum::serve::ListenerExt::tap_io(listener, |tcp| {
        if let Err(err) = tcp.set_nodelay(true) {
            tracing::debug!(cause = %err, "cannot set TCP_NODELAY");
        }
    });
    let drain_app = app.clone();
    let served = axum::serve(
        listener,
        router.into_make_service_with_connect_info::<SocketAddr>(),
    )
    .with_graceful_shutdown(async move {
        shutdown.await;
        shutdown::drain(&drain_app.drain, drain_app.config.drain, &io).await;
    })
    .await;
    sweeper.abort();
    if let (Some(c), Some(maintainer)) = (&app.cluster, maintainer) {
        // No heartbeat may re-announce this node after it left.
        maintainer.abort();
        let _ = maintainer.await;
        c.leave().await;
    }
    served?;
    tracing::info!("relay stopped");
    Ok(())
}
