//! `App`, everything the handlers share (one per relay process): configuration, the key store
//! and this node's key records, the token service, metrics, the drain, the Socket.IO handle, and
//! the session tokens, and the servers' and issuer's secrets (as digests).

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::http::{HeaderValue, Method, header};
use sha2::{Digest, Sha256};
use tower_http::cors::{AllowOrigin, CorsLayer};

use crate::admission::BindGate;
use crate::config::Config;
use crate::delivery::Io;
use crate::error::ApiError;
use crate::metrics::Metrics;
use crate::origins::Origins;
use crate::sessions::Sessions;
use crate::shutdown::Drain;
use crate::store::keys::{Keys, LifecycleConfig};
use crate::store::redis::{self as cluster, Cluster};
use crate::store::{self, KeyStore, MemoryStore, RedisStore, Store};
use crate::tokens::TokenService;

/// Everything the handlers share. One per relay process.
pub struct App {
    pub config: Config,
    /// This node's keys and the sockets bound to them (on several nodes, following Redis).
    pub keys: Arc<Keys>,
    /// Where the truth about keys is kept; handlers ask it, never which backend it is.
    pub store: Store,
    pub tokens: TokenService,
    /// Agents' session tokens: minting, and the cached grants of the ones presented.
    pub sessions: Sessions,
    pub metrics: Arc<Metrics>,
    pub drain: Drain,
    /// How many tabs this node binds at once ([`crate::admission`]).
    pub binds: Arc<BindGate>,
    /// The Socket.IO handle, set once by [`build`](crate::build).
    pub io: std::sync::OnceLock<Io>,
    /// Several nodes: the shared state in Redis. `None` on a single node.
    pub cluster: Option<Arc<Cluster>>,
    /// The browser origins allowed, and the log of refused ones.
    pub origins: Origins,
    /// SHA-256 of each secret of the worker's credential.
    workers: Vec<[u8; 32]>,
    /// SHA-256 of each secret of the operators' credential.
    operators: Vec<[u8; 32]>,
    /// SHA-256 of each token-issuer secret (issuer mode).
    issuers: Vec<[u8; 32]>,
}

/// Which server credential a Bearer secret is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServerRole {
    /// The agent worker (`RELAY_WORKER_SECRET`).
    Worker,
    /// An operator (`RELAY_OPERATOR_SECRET`).
    Operator,
    /// The app's backend (`RELAY_TOKEN_ISSUER_SECRET`).
    Issuer,
}

impl ServerRole {
    /// How a message names it.
    pub fn name(self) -> &'static str {
        match self {
            ServerRole::Worker => "worker's",
            ServerRole::Operator => "operators'",
            ServerRole::Issuer => "token issuer's",
        }
    }
}

fn digests(secrets: &[relay_wire::Secret]) -> Vec<[u8; 32]> {
    secrets
        .iter()
        .map(|s| Sha256::digest(s.expose().as_bytes()).into())
        .collect()
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
        let metrics = Arc::new(match &cluster {
            Some(c) => Metrics::new().with_key_events(c.events_heard().clone()),
            None => Metrics::new(),
        });
        if let Some(cluster) = &cluster {
            cluster.meter(&metrics);
        }
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
            window: config.idempotency_window,
        };
        let limits = store::SessionLimits {
            max_inflight: config.session_max_inflight,
            rate_per_sec: config.session_rate_per_sec,
        };
        let store = match &cluster {
            None => Store::Memory(
                MemoryStore::new(keys.clone(), config.token_rate_per_min, bound)
                    .with_sessions(limits),
            ),
            Some(c) => Store::Redis(
                RedisStore::new(c.clone(), keys.clone(), config.token_rate_per_min, bound)
                    .with_sessions(limits),
            ),
        };
        let tokens = TokenService::new(
            &config.livekit_api_key,
            &config.livekit_api_secret,
            &config.livekit_url,
            config.token_ttl,
            config.session_keys.clone(),
        );
        let issuers = digests(&config.issuer_secrets);
        let workers = digests(&config.worker_secrets);
        let operators = digests(&config.operator_secrets);
        let sessions = Sessions::new(&config.session_keys);
        let binds = BindGate::new(config.bind_concurrency);
        let origins = Origins::new(&config.allowed_origins);
        Arc::new(App {
            config,
            keys,
            store,
            tokens,
            sessions,
            metrics,
            drain: Drain::default(),
            binds,
            io: std::sync::OnceLock::new(),
            cluster,
            origins,
            workers,
            operators,
            issuers,
        })
    }

    /// The Socket.IO server of relay node `node`, when known: emits for its tabs go there only
    /// ([`crate::targeted`]).
    pub fn server_of(&self, node: &str) -> Option<socketioxide_core::Uid> {
        self.cluster.as_ref().and_then(|c| c.server_of(node))
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
            fold_within: cluster::FOLD_WITHIN,
        };
        let ca = match &config.redis_ca_file {
            Some(path) => Some(crate::config::read_ca_file(path).map_err(|e| anyhow::anyhow!(e))?),
            None => None,
        };
        let cluster = Cluster::connect_trusting(url.expose(), ca, settings).await?;
        tracing::info!(node = cluster.node(), "several-node mode: state in Redis");
        Ok(Some(cluster))
    }

    /// Which server credential `presented` is, comparing SHA-256 digests in constant time
    /// against every configured secret of every role (see [`find_secret`]): timing tells
    /// neither whether nor which one matched.
    pub fn server_role(&self, presented: &str) -> Option<ServerRole> {
        let worker = find_secret(self.workers.iter(), presented);
        let operator = find_secret(self.operators.iter(), presented);
        let issuer = find_secret(self.issuers.iter(), presented);
        match (worker, operator, issuer) {
            (Some(_), _, _) => Some(ServerRole::Worker),
            (_, Some(_), _) => Some(ServerRole::Operator),
            (_, _, Some(_)) => Some(ServerRole::Issuer),
            _ => None,
        }
    }

    /// Whether `presented` is one of the token-issuer secrets (constant time).
    pub fn is_token_issuer(&self, presented: &str) -> bool {
        find_secret(self.issuers.iter(), presented).is_some()
    }

    /// Takes one token from `ip`'s issuance budget (an IPv6 address's /64 shares one); false
    /// when it is spent. With several nodes the budget is shared by all of them.
    pub async fn may_issue_token(&self, ip: IpAddr) -> Result<bool, ApiError> {
        let bucket = crate::client_addr::limit_bucket(ip);
        Ok(self.store.take_token(bucket).await?)
    }

    /// Whether a browser `Origin` may open a socket: the relay's own origin, or one listed in
    /// `RELAY_ALLOWED_ORIGINS` (or `*`); see [`Origins`].
    pub fn origin_allowed(&self, origin: &str, host: Option<&HeaderValue>) -> bool {
        self.origins.allowed(origin, host)
    }

    pub(crate) fn cors(&self) -> Option<CorsLayer> {
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
