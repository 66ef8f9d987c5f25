//! The Socket.IO adapter of a relay on Redis: socketioxide-redis's, able to send an emit to the
//! one node that holds its room instead of to every node.
//!
//! socketioxide-redis publishes a request on the global request channel, which every node
//! subscribes; for an emit awaiting acknowledgements it first asks Redis how many nodes listen
//! (`PUBSUB NUMSUB`) and then waits for each of them to say how many sockets it reached. Given a
//! node's server id (`BroadcastOptions::server_id`) it publishes on that node's own request channel
//! instead and waits for that one node. socketioxide's operators (`io.to(room).emit(…)`) do not
//! let the caller set it, so this adapter wraps socketioxide-redis's and sets it for the emits run
//! inside [`to_server`]: a delivery that knows from Redis which node holds the tab (the call
//! path, the dismissal of a replaced or revoked tab) runs its emit there. Everything else is
//! passed through unchanged.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use socketioxide::adapter::Emitter;
use socketioxide_core::Uid;
use socketioxide_core::adapter::errors::BroadcastError;
use socketioxide_core::adapter::{
    BroadcastOptions, CoreAdapter, CoreLocalAdapter, DefinedAdapter, RemoteSocketData, Room,
    RoomParam,
};
use socketioxide_core::packet::Packet;
use socketioxide_redis::{CustomRedisAdapter, InitRes, RedisAdapterCtr};

use crate::pubsub::PubSub;

type Inner = CustomRedisAdapter<Emitter, PubSub>;

tokio::task_local! {
    /// The Socket.IO server the emits of the current scope are sent to.
    static TARGET: Uid;
}

/// Runs `fut` with the room emits it makes sent only to the Socket.IO server `server` (see the
/// module's text); without a server, as broadcasts to every node.
pub async fn to_server<F: Future>(server: Option<Uid>, fut: F) -> F::Output {
    match server {
        Some(uid) => TARGET.scope(uid, fut).await,
        None => fut.await,
    }
}

/// The server the current scope's emits go to, if one was named.
fn target() -> Option<Uid> {
    TARGET.try_with(|uid| *uid).ok()
}

/// Names the target server in `opts` when the scope has one and the emit names none.
fn aim(mut opts: BroadcastOptions) -> BroadcastOptions {
    if opts.server_id.is_none() {
        opts.server_id = target();
    }
    opts
}

/// socketioxide-redis's adapter over the relay's pub/sub driver, aiming the emits made inside
/// [`to_server`] at one server.
pub struct TargetedAdapter(Arc<Inner>);

impl DefinedAdapter for TargetedAdapter {}

impl CoreAdapter<Emitter> for TargetedAdapter {
    type Error = <Inner as CoreAdapter<Emitter>>::Error;
    type State = RedisAdapterCtr<PubSub>;
    type AckStream = <Inner as CoreAdapter<Emitter>>::AckStream;
    type InitRes = InitRes<PubSub>;

    fn new(state: &Self::State, local: CoreLocalAdapter<Emitter>) -> Self {
        TargetedAdapter(Arc::new(Inner::new(state, local)))
    }

    fn init(self: Arc<Self>, on_success: impl FnOnce() + Send + 'static) -> Self::InitRes {
        self.0.clone().init(on_success)
    }

    async fn close(&self) -> Result<(), Self::Error> {
        self.0.close().await
    }

    async fn server_count(&self) -> Result<u16, Self::Error> {
        self.0.server_count().await
    }

    async fn broadcast(
        &self,
        packet: Packet,
        opts: BroadcastOptions,
    ) -> Result<(), BroadcastError> {
        self.0.broadcast(packet, aim(opts)).await
    }

    async fn broadcast_with_ack(
        &self,
        packet: Packet,
        opts: BroadcastOptions,
        timeout: Option<Duration>,
    ) -> Result<Self::AckStream, Self::Error> {
        self.0.broadcast_with_ack(packet, aim(opts), timeout).await
    }

    async fn add_sockets(
        &self,
        opts: BroadcastOptions,
        rooms: impl RoomParam,
    ) -> Result<(), Self::Error> {
        self.0.add_sockets(opts, rooms).await
    }

    async fn del_sockets(
        &self,
        opts: BroadcastOptions,
        rooms: impl RoomParam,
    ) -> Result<(), Self::Error> {
        self.0.del_sockets(opts, rooms).await
    }

    async fn disconnect_socket(&self, opts: BroadcastOptions) -> Result<(), BroadcastError> {
        self.0.disconnect_socket(aim(opts)).await
    }

    async fn rooms(&self, opts: BroadcastOptions) -> Result<Vec<Room>, Self::Error> {
        self.0.rooms(opts).await
    }

    async fn fetch_sockets(
        &self,
        opts: BroadcastOptions,
    ) -> Result<Vec<RemoteSocketData>, Self::Error> {
        self.0.fetch_sockets(opts).await
    }

    fn get_local(&self) -> &CoreLocalAdapter<Emitter> {
        self.0.get_local()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn only_emits_inside_the_scope_are_aimed() {
        let uid = Uid::new();
        assert_eq!(aim(BroadcastOptions::default()).server_id, None);
        let inside = to_server(Some(uid), async { aim(BroadcastOptions::default()) }).await;
        assert_eq!(inside.server_id, Some(uid));
        let unnamed = to_server(None, async { aim(BroadcastOptions::default()) }).await;
        assert_eq!(unnamed.server_id, None);
        // An emit that already names a server keeps it.
        let other = Uid::new();
        let mut named = BroadcastOptions::default();
        named.server_id = Some(other);
        let kept = to_server(Some(uid), async { aim(named) }).await;
        assert_eq!(kept.server_id, Some(other));
    }
}
