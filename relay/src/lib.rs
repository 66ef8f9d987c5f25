//! The voice-agent relay: a token service, a Socket.IO endpoint where browser tabs bind their
//! per-tab key, and an HTTP API through which an agent's tool calls reach exactly that tab.
//!
//! `main` parses configuration and calls [`run`] with a bound listener, so tests bind port 0 and
//! read the real address back. See `ARCHITECTURE.md` for the map.

pub mod api;
pub mod app_jwt;
pub mod calls;
pub mod client_addr;
pub mod config;
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

/// This node's key records and bindings (the in-memory store's map).
pub use store::keys;
/// The Redis store under its older name: several nodes' shared state.
pub use store::redis as cluster;

use std::net::{IpAddr, SocketAddr};
use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::http::{HeaderValue, Method, header};
use governor::{DefaultDirectRateLimiter, Quota, RateLimiter};
use sha2::{Digest, Sha256};
use socketioxide::SocketIo;
use tokio::net::TcpListener;
use tower_http::cors::{AllowOrigin, CorsLayer};
use tower_http::services::ServeDir;

use crate::cluster::Cluster;
use crate::config::{Config, TokenMode};
use crate::error::ApiError;
use crate::keys::{Keys, LifecycleConfig};
use crate::metrics::Metrics;
use crate::shutdown::Drain;
use crate::sockets::{ClusterAdapter, Io};
use crate::store::{KeyStore, MemoryStore, RedisStore, Store};
use crate::tokens::TokenService;

/// Everything the handlers share. One per relay process.
pub struct App {
    pub config: Config,
    /// This node's keys and the sockets bound to them (on several nodes, following Redis).
    pub keys: Arc<Keys>,
    /// Where the truth about keys is kept; handlers ask it, never which backend it is.
    pub store: Store,
    pub tokens: TokenService,
    pub metrics: Arc<Metrics>,
    pub drain: Drain,
    /// The Socket.IO handle, set once by [`build`].
    pub io: std::sync::OnceLock<Io>,
    /// Several nodes: the shared state in Redis. `None` on a single node.
    pub cluster: Option<Arc<Cluster>>,
    /// SHA-256 of each agent secret, and that agent's call-rate limiter (same order).
    agents: Vec<([u8; 32], DefaultDirectRateLimiter)>,
    /// SHA-256 of each token-issuer secret (issuer mode).
    issuers: Vec<[u8; 32]>,
}

/// Finds which of the `known` SHA-256 digests `presented` hashes to, in constant time: every
/// digest is compared with no early exit, so timing reveals neither content, length nor which
/// secret matched.
fn find_secret<'a>(known: impl Iterator<Item = &'a [u8; 32]>, presented: &str) -> Option<usize> {
    use subtle::{ConditionallySelectable, ConstantTimeEq};
    let digest: [u8; 32] = Sha256::digest(presented.as_bytes()).into();
    let mut found = subtle::Choice::from(0u8);
    let mut index = 0u32;
    for (i, known) in known.enumerate() {
        let eq = known.ct_eq(&digest);
        index = u32::conditional_select(&index, &(i as u32), eq);
        found |= eq;
    }
    bool::from(found).then_some(index as usize)
}

impl App {
    pub fn new(config: Config, cluster: Option<Arc<Cluster>>) -> Arc<App> {
        let metrics = Arc::new(Metrics::new());
        let keys = Arc::new(Keys::new(
            LifecycleConfig {
                unbound_ttl: config.unbound_key_ttl,
                grace: config.reconnect_grace,
                max_inflight: config.max_inflight_per_key,
            },
            metrics.clone(),
        ));
        let bound = store::claims::ReplayBound {
            max_timeout: config.max_timeout,
            drain: config.drain,
        };
        let store = match &cluster {
            None => Store::Memory(MemoryStore::new(
                keys.clone(),
                config.token_rate_per_min,
                bound,
            )),
            Some(c) => Store::Redis(RedisStore::new(
                c.clone(),
                keys.clone(),
                config.token_rate_per_min,
                bound,
            )),
        };
        let tokens = TokenService::new(
            &config.livekit_api_key,
            &config.livekit_api_secret,
            &config.livekit_url,
            config.token_ttl,
        );
        let agent_rate = NonZeroU32::new(config.agent_rate_per_sec).unwrap_or(NonZeroU32::MIN);
        let agents = config
            .agent_secrets
            .iter()
            .map(|s| {
                let digest: [u8; 32] = Sha256::digest(s.expose().as_bytes()).into();
                (digest, RateLimiter::direct(Quota::per_second(agent_rate)))
            })
            .collect();
        let issuers = config
            .issuer_secrets
            .iter()
            .map(|s| Sha256::digest(s.expose().as_bytes()).into())
            .collect();
        Arc::new(App {
            config,
            keys,
            store,
            tokens,
            metrics,
            drain: Drain::default(),
            io: std::sync::OnceLock::new(),
            cluster,
            agents,
            issuers,
        })
    }

    /// Connects to Redis when `RELAY_REDIS_URL` is set.
    pub async fn connect_cluster(config: &Config) -> anyhow::Result<Option<Arc<Cluster>>> {
        let Some(url) = &config.redis_url else {
            return Ok(None);
        };
        let settings = cluster::Settings {
            grace: config.reconnect_grace,
            unbound_ttl: config.unbound_key_ttl,
            max_inflight: config.max_inflight_per_key,
            inflight_ttl: config.max_timeout + config.drain + Duration::from_secs(10),
        };
        let cluster = Cluster::connect(url.expose(), settings).await?;
        tracing::info!(node = cluster.node(), "several-node mode: state in Redis");
        Ok(Some(cluster))
    }

    /// Finds which agent secret `presented` is, comparing SHA-256 digests in constant time
    /// against every configured secret (see [`find_secret`]).
    pub fn agent_index(&self, presented: &str) -> Option<usize> {
        find_secret(self.agents.iter().map(|(digest, _)| digest), presented)
    }

    /// Whether `presented` is one of the token-issuer secrets (constant time, like the agents').
    pub fn is_token_issuer(&self, presented: &str) -> bool {
        find_secret(self.issuers.iter(), presented).is_some()
    }

    /// Takes one call from agent `index`'s rate budget; false when it is spent. Single node
    /// only: with several nodes the shared budget is taken with the call's in-flight slot.
    pub fn agent_may_call(&self, index: usize) -> bool {
        self.agents
            .get(index)
            .is_some_and(|(_, limiter)| limiter.check().is_ok())
    }

    /// The name of agent `index`'s shared rate window (a digest prefix, never the secret).
    pub fn agent_bucket(&self, index: usize) -> String {
        let digest = self.agents.get(index).map_or(&[0u8; 32], |(d, _)| d);
        format!("a:{}", hex::encode(&digest[..8]))
    }

    /// Takes one token from `ip`'s issuance budget; false when it is spent. With several nodes
    /// the budget is shared by all of them.
    pub async fn may_issue_token(&self, ip: IpAddr) -> Result<bool, ApiError> {
        Ok(self.store.take_token(ip).await?)
    }

    /// Whether a browser `Origin` may open a socket: listed in `RELAY_ALLOWED_ORIGINS` (or `*`),
    /// or, when that is unset, the relay's own origin.
    pub fn origin_allowed(&self, origin: &str, host: Option<&HeaderValue>) -> bool {
        let origin = origin.trim_end_matches('/');
        if self.config.allowed_origins.is_empty() {
            let host = host.and_then(|h| h.to_str().ok()).unwrap_or_default();
            let bare = origin
                .strip_prefix("http://")
                .or_else(|| origin.strip_prefix("https://"))
                .unwrap_or(origin);
            return !host.is_empty() && bare.eq_ignore_ascii_case(host);
        }
        self.config
            .allowed_origins
            .iter()
            .any(|o| o == "*" || o.eq_ignore_ascii_case(origin))
    }

    fn cors(&self) -> Option<CorsLayer> {
        let origins = &self.config.allowed_origins;
        if origins.is_empty() {
            return None;
        }
        let allow = if origins.iter().any(|o| o == "*") {
            AllowOrigin::any()
        } else {
            AllowOrigin::list(origins.iter().filter_map(|o| HeaderValue::from_str(o).ok()))
        };
        Some(
            CorsLayer::new()
                .allow_origin(allow)
                .allow_methods([Method::GET, Method::POST, Method::DELETE])
                .allow_headers([
                    header::CONTENT_TYPE,
                    header::AUTHORIZATION,
                    header::HeaderName::from_static(relay_wire::headers::IDEMPOTENCY_KEY),
                ])
                .max_age(Duration::from_secs(600)),
        )
    }
}

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
    let mut router = api::routes();
    let web_dir = &app.config.web_dir;
    if web_dir.join("index.html").is_file() {
        let files = ServeDir::new(web_dir);
        router = router.fallback(move |request| static_file(files.clone(), request));
    } else {
        router = router.route("/", axum::routing::get(placeholder_page));
    }
    let mut router = router
        .with_state(app.clone())
        .layer(layer)
        .layer(axum::middleware::map_request(detach_request_head));
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
        shutdown::drain(&drain_app, &io).await;
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
