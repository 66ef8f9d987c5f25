//! One socket type for both deployments. Socket.IO sockets are typed by their adapter: the
//! in-memory one for a single node, the Redis one for several. Handlers are generic over the
//! adapter; what the rest of the relay keeps of a socket (the binding of a key) is a `TabSocket`.

use std::time::Duration;

use serde::Serialize;
use serde::de::DeserializeOwned;
use socketioxide::SendError;
use socketioxide::ack::AckStream;
use socketioxide::adapter::{Adapter, LocalAdapter};
use socketioxide::extensions::Extensions;
use socketioxide::extract::SocketRef;
use socketioxide::socket::Sid;

/// The key a socket holds, kept in the socket's extensions while it holds it.
#[derive(Clone)]
pub struct BoundKey(pub std::sync::Arc<str>);

/// Set while the key of a handshake token is being bound: socketioxide sends CONNECT before the
/// connect handler binds, and the bind is told to other nodes before it is recorded here, so a
/// tab may declare its tools, and a call from another node may arrive, before its key is bound
/// here; both wait for the bind ([`settled_key`]). Notified when the bind is over.
#[derive(Clone)]
pub struct HandshakeBind(pub std::sync::Arc<tokio::sync::Notify>);

/// The longest a declaration, or a call from another node, waits for its socket's handshake bind.
pub const BIND_WAIT: Duration = Duration::from_secs(5);

/// The key `s` holds, once its handshake bind (if one runs) is over, waiting at most `wait`.
pub async fn settled_key(s: &TabSocket, wait: Duration) -> Option<std::sync::Arc<str>> {
    if let Some(BoundKey(key)) = s.extensions().get::<BoundKey>() {
        return Some(key);
    }
    let HandshakeBind(done) = s.extensions().get::<HandshakeBind>()?;
    let finished = done.notified();
    tokio::pin!(finished);
    finished.as_mut().enable();
    // Read again after registering for the wake-up: a bind that ended in between is not missed.
    if s.extensions().get::<HandshakeBind>().is_some() {
        let _ = tokio::time::timeout(wait, finished).await;
    }
    s.extensions().get::<BoundKey>().map(|BoundKey(key)| key)
}

/// The tools a socket last declared it handles (`voice-agent:handles`), comma-joined, kept in
/// its extensions: a fire-and-forget call to a tool outside them is answered `no_handler`
/// instead of being sent where nothing runs it. A socket that never declared handles every tool.
#[derive(Clone)]
pub struct DeclaredTools(pub std::sync::Arc<str>);

impl DeclaredTools {
    /// Whether `tool` is among the declared tools.
    pub fn handles(&self, tool: &str) -> bool {
        handles(&self.0, tool)
    }
}

/// Whether a comma-joined declaration names `tool`.
pub fn handles(joined: &str, tool: &str) -> bool {
    joined.split(',').any(|name| name == tool)
}

/// The Socket.IO adapter of a relay running on Redis (socketioxide-redis's, able to aim an emit
/// at one node: [`crate::targeted`]).
pub type ClusterAdapter = crate::targeted::TargetedAdapter;

/// A connected tab's socket, whichever adapter it came through.
#[derive(Clone)]
pub enum TabSocket {
    Local(SocketRef<LocalAdapter>),
    Cluster(SocketRef<ClusterAdapter>),
}

macro_rules! each {
    ($socket:expr, $s:ident => $body:expr) => {
        match $socket {
            TabSocket::Local($s) => $body,
            TabSocket::Cluster($s) => $body,
        }
    };
}

impl TabSocket {
    pub fn id(&self) -> Sid {
        each!(self, s => s.id)
    }

    pub fn connected(&self) -> bool {
        each!(self, s => s.connected())
    }

    pub fn extensions(&self) -> &Extensions {
        each!(self, s => &s.extensions)
    }

    pub fn emit<T: ?Sized + Serialize>(&self, event: &str, data: &T) -> Result<(), SendError> {
        each!(self, s => s.emit(event, data))
    }

    /// Emits with an acknowledgement expected within `timeout`.
    pub fn emit_with_ack<T: ?Sized + Serialize, V: DeserializeOwned>(
        &self,
        timeout: Duration,
        event: &str,
        data: &T,
    ) -> Result<AckStream<V>, SendError> {
        each!(self, s => s.timeout(timeout).emit_with_ack(event, data))
    }

    pub fn join(&self, room: String) {
        each!(self, s => s.join(room))
    }

    pub fn leave(&self, room: String) {
        each!(self, s => s.leave(room))
    }

    /// Tells the tab an awaited call ended without its answer. Best effort: the tab may be gone.
    pub fn cancel_call(&self, call_id: &str) {
        let _ = self.emit(
            relay_wire::events::CANCEL,
            &relay_wire::CancelEvent {
                call_id: call_id.to_owned(),
            },
        );
    }

    /// Closes the socket from the server side (socket.io-client does not reconnect on its own).
    pub fn disconnect(&self) {
        let _ = each!(self.clone(), s => s.disconnect());
    }
}

/// The adapters the relay runs on.
pub trait RelayAdapter: Adapter {
    fn tab(socket: &SocketRef<Self>) -> TabSocket;
}

impl RelayAdapter for LocalAdapter {
    fn tab(socket: &SocketRef<Self>) -> TabSocket {
        TabSocket::Local(socket.clone())
    }
}

impl RelayAdapter for ClusterAdapter {
    fn tab(socket: &SocketRef<Self>) -> TabSocket {
        TabSocket::Cluster(socket.clone())
    }
}
