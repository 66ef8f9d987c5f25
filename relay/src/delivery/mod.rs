//! Delivery: how an emit reaches a tab. A tab on this node is reached through its own socket
//! (the [`Binding`](crate::store::keys::Binding) the store hands back holds it, see
//! [`TabSocket`](crate::sockets::TabSocket)); a call for a tab on another node goes to that node
//! on the relay's own call channels ([`hop`]), which emits it there. Nothing else in the relay
//! asks which adapter runs. Dismissing a tab that lost its key (replaced, revoked) and telling a
//! tab its mode are emits to the key's room through the Socket.IO Redis adapter
//! ([`Io::dismiss_in_room`], [`Io::emit_to_room`]): on the node Redis recorded once that node's
//! Socket.IO server is known ([`crate::targeted`]), else on every node; [`dismiss`] does it for a
//! socket of this node.

pub mod hop;

use std::sync::Arc;

use relay_wire::{RevokeReason, RevokedEvent, events};
use serde::Serialize;
use socketioxide::SocketIo;
use socketioxide::adapter::LocalAdapter;
use socketioxide_core::Uid;

use crate::sockets::{BoundKey, ClusterAdapter, RelayAdapter};
use crate::store::keys::Displaced;
use crate::targeted::to_server;
use relay_wire::Fp;

/// The room a key's socket joins, named after the key's digest: how another node's emits
/// reach it through the adapter.
pub fn room(key: &str) -> String {
    crate::store::redis::rid(key)
}

/// Tells a socket of this node it lost its key: `cancel` for each awaited call it held, then
/// `revoked`, then a server-side disconnect (which socket.io-client does not retry on its own).
pub fn dismiss(old: Displaced) {
    for call_id in &old.pending {
        old.binding.socket.cancel_call(call_id);
    }
    let socket = old.binding.socket;
    socket.extensions().remove::<BoundKey>();
    let _ = socket.emit(events::REVOKED, &RevokedEvent { reason: old.reason });
    socket.disconnect();
}

/// A room on another node could not be reached (no adapter to other nodes, or it failed).
#[derive(Debug)]
pub struct Unreachable;

/// The Socket.IO server handle, whichever adapter it runs on; on Redis, with this node's end of
/// the calls between nodes.
#[derive(Clone)]
pub enum Io {
    Local(SocketIo<LocalAdapter>),
    Cluster(SocketIo<ClusterAdapter>, Arc<hop::Hop>),
}

impl Io {
    /// Sockets connected to this node.
    pub fn local_socket_count(&self) -> usize {
        match self {
            Io::Local(io) => io.sockets().len(),
            Io::Cluster(io, _) => io.local().sockets().len(),
        }
    }

    /// Tells every tab on this node that the server is closing.
    pub async fn close(&self) {
        match self {
            Io::Local(io) => io.close().await,
            Io::Cluster(io, _) => io.close().await,
        }
    }

    /// Whether this node has a connected socket with this id.
    pub fn socket_alive(&self, sid: &str) -> bool {
        let Ok(sid) = sid.parse() else {
            return false;
        };
        match self {
            Io::Local(io) => io.get_socket(sid).is_some_and(|s| s.connected()),
            Io::Cluster(io, _) => io.get_socket(sid).is_some_and(|s| s.connected()),
        }
    }

    /// The key the socket `sid` of this node holds, once its handshake bind (if one runs) is
    /// over: at most `wait` ([`crate::sockets::settled_key`]).
    pub async fn settled_key(&self, sid: &str, wait: std::time::Duration) -> Option<Arc<str>> {
        let sid = sid.parse().ok()?;
        let tab = match self {
            Io::Local(io) => LocalAdapter::tab(&io.get_socket(sid)?),
            Io::Cluster(io, _) => ClusterAdapter::tab(&io.get_socket(sid)?),
        };
        crate::sockets::settled_key(&tab, wait).await
    }

    /// This node's end of the calls between nodes (on Redis).
    pub fn hop(&self) -> Option<&Arc<hop::Hop>> {
        match self {
            Io::Local(_) => None,
            Io::Cluster(_, hop) => Some(hop),
        }
    }

    /// This node's Socket.IO server id, which other nodes aim emits at (on Redis).
    pub fn server_id(&self) -> Option<Uid> {
        match self {
            Io::Local(_) => None,
            Io::Cluster(io, _) => Some(io.config().server_id),
        }
    }

    /// Emits to the sockets of `room` on the Socket.IO server `server` (the node Redis says
    /// holds the tab), or on every node when it is not known; expects no answer.
    pub async fn emit_to_room<T: ?Sized + Serialize>(
        &self,
        room: &str,
        server: Option<Uid>,
        event: &str,
        data: &T,
    ) -> Result<(), Unreachable> {
        let Io::Cluster(io, _) = self else {
            return Err(Unreachable);
        };
        to_server(server, io.to(room.to_owned()).emit(event, data))
            .await
            .map_err(|_| Unreachable)
    }

    /// Tells the socket in `room` on another node (on `server`, the node Redis recorded, or on
    /// every node when its server is not known) that it lost its key, then closes it. Both go
    /// through the adapter on one connection, so the remote node sees them in that order.
    /// `key` only names the key in the log.
    pub async fn dismiss_in_room(
        &self,
        room: String,
        server: Option<Uid>,
        key: &str,
        reason: RevokeReason,
    ) {
        let Io::Cluster(io, _) = self else {
            return;
        };
        let (sent, closed) = to_server(server, async {
            let sent = io
                .to(room.clone())
                .emit(events::REVOKED, &RevokedEvent { reason })
                .await;
            (sent, io.to(room).disconnect().await)
        })
        .await;
        if sent.is_err() || closed.is_err() {
            tracing::warn!(key = %Fp(key), "could not reach the node holding the old tab");
        }
    }
}
