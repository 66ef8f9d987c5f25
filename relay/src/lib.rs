//! The voice-agent relay: a token service, a Socket.IO endpoint where browser tabs bind their
//! per-tab key, and an HTTP API through which an agent's tool calls reach exactly that tab.
//!
//! `main` parses configuration and calls [`run`] with a bound listener, so tests bind port 0 and
//! read the real address back. See `ARCHITECTURE.md` for the map.

pub mod admission;
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
pub mod origins;
pub mod pages;
pub mod pubsub;
pub mod server;
pub mod sessions;
pub mod shutdown;
pub mod sockets;
pub mod store;
pub mod tabs;
pub mod targeted;
pub mod tokens;

pub use app::App;
pub use config::announce_token_mode;
pub use pages::{SOCKET_REQUEST_HEADERS, detach_request_head};
pub use server::{build, run, run_connected};
