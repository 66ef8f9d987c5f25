//! `App`, everything the handlers share (one per relay process): configuration, the key store
//! and this node's key records, the token service, metrics, the drain, the Socket.IO handle, and
//! the agent and issuer secrets (as digests) with the agents' call rates.

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
    /// SHA-256 of each agent secret (the store keeps each agent's call rate, same order).
    agents: Vec<[u8; 32]>,
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
        let metrics = Arc::new(match &cluster {
            Some(c) => Metrics::new().with_key_events(c.events_heard().clone()),
            None => Metrics::new(),
        });
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
        let agents: Vec<[u8; 32]> = config
            .agent_secrets
            .iter()
            .map(|s| Sha256::digest(s.expose().as_bytes()).into())
            .collect();
        let agent_rate = config.agent_rate_per_sec;
        let store = match &cluster {
            None => Store::Memory(
                MemoryStore::new(keys.clone(), config.token_rate_per_min, bound)
                    .with_agents(agents.len(), agent_rate),
            ),
            Some(c) => Store::Redis(
                RedisStore::new(c.clone(), keys.clone(), config.token_rate_per_min, bound)
                    .with_agents(&agents, agent_rate),
            ),
        };
        let tokens = TokenService::new(
            &config.livekit_api_key,
            &config.livekit_api_secret,
            &config.livekit_url,
            config.token_ttl,
        );
        let issuers = config
            .issuer_secrets
            .iter()
            .map(|s| Sha256::digest(s.expose().as_bytes()).into())
            .collect();
        let binds = BindGate::new(config.bind_concurrency);
        let origins = Origins::new(&config.allowed_origins);
        Arc::new(App {
            config,
            keys,
            store,
            tokens,
            metrics,
            drain: Drain::default(),
            binds,
            io: std::sync::OnceLock::new(),
            cluster,
            origins,
            agents,
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
        };
        let ca = match &config.redis_ca_file {
            Some(path) => Some(crate::config::read_ca_file(path).map_err(|e| anyhow::anyhow!(e))?),
            None => None,
        };
        let cluster = Cluster::connect_trusting(url.expose(), ca, settings).await?;
        tracing::info!(node = cluster.node(), "several-node mode: state in Redis");
        Ok(Some(cluster))
    }

    /// Finds which agent secret `presented` is, comparing SHA-256 digests in constant time
    /// against every configured secret (see [`find_secret`]).
    pub fn agent_index(&self, presented: &str) -> Option<usize> {
        find_secret(self.agents.iter(), presented)
    }

    /// Whether `presented` is one of the token-issuer secrets (constant time, like the agents').
    pub fn is_token_issuer(&self, presented: &str) -> bool {
        find_secret(self.issuers.iter(), presented).is_some()
    }

    /// Takes one token from `ip`'s issuance budget; false when it is spent. With several nodes
    /// the budget is shared by all of them.
    pub async fn may_issue_token(&self, ip: IpAddr) -> Result<bool, ApiError> {
        Ok(self.store.take_token(ip).await?)
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
