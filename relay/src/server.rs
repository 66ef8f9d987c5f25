//! The server's assembly and its life: the HTTP routes and the Socket.IO layer (on the Redis
//! adapter when the relay runs on several nodes) put together in front of the pages, then
//! served with the sweeper and, on several nodes, the node's membership, until the drain.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use socketioxide::SocketIo;
use tokio::net::TcpListener;
use tower_http::services::ServeDir;

use crate::app::App;
use crate::config::{Config, TokenMode};
use crate::delivery::Io;
use crate::delivery::hop::Hop;
use crate::pages;
use crate::sockets::ClusterAdapter;
use crate::store::KeyStore;
use crate::store::redis::{self as cluster, Cluster};
use crate::{api, calls, membership, openapi, shutdown, tabs, tokens};

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
            // Calls between nodes: this node's channel is subscribed since it connected, so
            // before any tab binds here and any other node sends it a call.
            let hop = Hop::start(cluster.clone())?;
            return Ok(finish(app, layer, Io::Cluster(io, hop)));
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
    let mut files_router = Router::new();
    let web_dir = &app.config.web_dir;
    if web_dir.join("index.html").is_file() {
        let files = ServeDir::new(web_dir);
        files_router =
            files_router.fallback(move |request| pages::static_file(files.clone(), request));
    } else {
        files_router = files_router.route("/", axum::routing::get(pages::placeholder_page));
    }
    // Socket.IO sits in front of the pages only: what no API route takes. As a layer of the
    // whole router it wrapped every API route too, a boxed service cloned and polled on every
    // agent call (about a tenth of a call's instructions).
    let socket_io = tower::ServiceBuilder::new()
        .layer(axum::middleware::map_request(pages::detach_request_head))
        .layer(layer)
        .service(files_router);
    // The document describes the API's handlers, so it is routed here, above both.
    let mut router = api::routes()
        .route("/openapi.json", axum::routing::get(openapi::openapi_json))
        .with_state(app.clone())
        .fallback_service(socket_io);
    if let Some(cors) = app.cors() {
        router = router.layer(cors);
    }
    // A page on a refused origin is told nothing by the browser but "failed to fetch": the
    // relay's log says which origin it was (a synchronous look at one header, no boxing).
    let noted = app.clone();
    router = router.layer(tower::util::MapRequestLayer::new(
        move |request: axum::extract::Request| {
            if request.headers().contains_key(axum::http::header::ORIGIN)
                && !pages::is_public(request.uri().path())
            {
                let what = format!("{} {}", request.method(), request.uri().path());
                noted.origins.note(request.headers(), &what);
            }
            request
        },
    ));
    (router, io)
}

/// Runs the relay on `listener` until `shutdown` resolves, then drains (see [`crate::shutdown`]).
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
    app.binds.spawn_probe(app.metrics.runtime_lateness.clone());
    let (router, io) = build(app.clone()).await?;
    let maintainer = app
        .cluster
        .as_ref()
        .map(|c| tokio::spawn(membership::maintain(app.clone(), c.clone())));
    // The calls other nodes send for this node's tabs.
    let held = io
        .hop()
        .map(|hop| tokio::spawn(calls::serve_held(app.clone(), hop.clone())));

    let sweeper = {
        let app = app.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(SWEEP_EVERY);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                app.store.expire();
                app.sessions.sweep(crate::tokens::unix_now().as_secs());
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
    if let Some(held) = held {
        held.abort();
    }
    if let (Some(c), Some(maintainer)) = (&app.cluster, maintainer) {
        // No heartbeat may re-announce this node after it left.
        maintainer.abort();
        let _ = maintainer.await;
        c.leave().await;
        c.withdraw_server().await;
    }
    served?;
    tracing::info!("relay stopped");
    Ok(())
}
