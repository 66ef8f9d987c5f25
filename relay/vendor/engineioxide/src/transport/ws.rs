//! The ws transport module is responsible for handling websocket connections
//! The only public function is [`new_req`] which is used to upgrade a http request to a websocket connection
//!
//! Other functions are used internally to handle the websocket connection and to handle upgrade
//! from polling to ws.
//!
//! Patched: one task per connection reads from the websocket, writes the socket's send queue to
//! it and, for a session opened over websocket, runs the heartbeat (upstream 0.17.9 runs a
//! reader task, a writer task and a heartbeat task per connection).

use std::{
    future::{Future, poll_fn},
    pin::Pin,
    sync::Arc,
    task::Poll,
    time::Duration,
};

use futures_util::{Sink, SinkExt, StreamExt};
use http::{HeaderValue, Request, Response, StatusCode, request::Parts};
use smallvec::smallvec;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::time::Instant;
use tokio_tungstenite::{
    WebSocketStream,
    tungstenite::{
        self, Message,
        handshake::derive_accept_key,
        protocol::{Role, WebSocketConfig},
    },
};
use tokio_util::future::FutureExt as _;

use engineioxide_core::{Packet, ProtocolVersion, Sid, Str, TransportType};

use crate::{
    DisconnectReason, Socket, body::ResponseBody, config::EngineIoConfig, engine::EngineIo,
    errors::Error, handler::EngineIoHandler, transport::make_open_packet,
};

/// Create a response for websocket upgrade
fn ws_response<B>(ws_key: &HeaderValue) -> Response<ResponseBody<B>> {
    let derived = derive_accept_key(ws_key.as_bytes());
    let sec = derived.parse::<HeaderValue>().unwrap();
    Response::builder()
        .status(StatusCode::SWITCHING_PROTOCOLS)
        .header(http::header::UPGRADE, HeaderValue::from_static("websocket"))
        .header(
            http::header::CONNECTION,
            HeaderValue::from_static("Upgrade"),
        )
        .header(http::header::SEC_WEBSOCKET_ACCEPT, sec)
        .body(ResponseBody::empty_response())
        .unwrap() // we are only using constants
}

/// Upgrade a websocket request to create a websocket connection.
///
/// If a sid is provided in the query it means that is is upgraded from an existing HTTP polling request.
/// In this case the http polling request is closed and the SID is kept for the websocket
pub fn new_req<R: Send + 'static, B, H: EngineIoHandler>(
    engine: Arc<EngineIo<H>>,
    protocol: ProtocolVersion,
    sid: Option<Sid>,
    mut req: Request<R>,
) -> Result<Response<ResponseBody<B>>, Error> {
    let ws_key = req
        .headers()
        .get("Sec-WebSocket-Key")
        .ok_or(Error::InvalidWebSocketKey)?
        .clone();
    // Patched: the upgrade is taken out of the request, whose head then goes to the session
    // without a copy (and without the upgrade).
    let on_upgrade = hyper::upgrade::on(&mut req);
    let (parts, _) = req.into_parts();

    let setup = Box::pin({
        let engine = engine.clone();
        async move {
            match on_upgrade.await {
                Ok(conn) => {
                    let conn = hyper_util::rt::TokioIo::new(conn);
                    init(engine, conn, protocol, sid, parts).await.map(Some)
                }
                Err(_e) => {
                    #[cfg(feature = "tracing")]
                    tracing::debug!("ws upgrade error: {}", _e);
                    Ok(None)
                }
            }
        }
    });
    tokio::spawn(async move {
        // The connection's future takes the set-up connection: nothing else is kept beside it.
        let run = match setup.await {
            Ok(Some(conn)) => run_connection(engine, conn),
            Ok(None) | Err(Error::MultipleWebsocketRequests) => return,
            Err(_e) => {
                #[cfg(feature = "tracing")]
                tracing::debug!(?sid, "ws closed with error: {_e}");
                if let Some(sid) = sid {
                    engine.close_session(sid, DisconnectReason::TransportError);
                }
                return;
            }
        };
        run.await;
        #[cfg(feature = "tracing")]
        tracing::debug!(?sid, "ws closed")
    });

    Ok(ws_response(&ws_key))
}

/// Handle a websocket connection upgrade
///
/// Sends an open packet if it is not an upgrade from a polling request
///
/// Read packets from the websocket and handle them, it will block until the connection is closed
pub fn on_init<H: EngineIoHandler, S>(
    engine: Arc<EngineIo<H>>,
    conn: S,
    protocol: ProtocolVersion,
    sid: Option<Sid>,
    req_data: Parts,
) -> impl Future<Output = Result<(), Error>> + Send
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    // Patched: the setup runs boxed, so that once it is done the task holds only what the
    // connection needs (not the request head, nor the upgrade and handshake futures).
    let setup = Box::pin(init(engine.clone(), conn, protocol, sid, req_data));
    async move {
        let run = run_connection(engine, setup.await?);
        run.await;
        Ok(())
    }
}

/// A websocket connection ready to run: its session, its stream, and its heartbeat when the
/// connection task runs it.
struct Connection<D: Default + Send + Sync + 'static, S> {
    socket: Arc<Socket<D>>,
    ws: WebSocketStream<S>,
    heartbeat: Option<Heartbeat>,
}

/// Sets a websocket connection up: opens its session (sending the open packet), or upgrades a
/// polling session to it.
#[cfg_attr(
    feature = "tracing",
    tracing::instrument(level = "trace", name = "init_websocket", skip(engine, conn, req_data))
)]
async fn init<H: EngineIoHandler, S>(
    engine: Arc<EngineIo<H>>,
    conn: S,
    protocol: ProtocolVersion,
    sid: Option<Sid>,
    req_data: Parts,
) -> Result<Connection<H::Data, S>, Error>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let ws_config = WebSocketConfig::default()
        .read_buffer_size(engine.config.ws_read_buffer_size)
        .max_message_size(Some(engine.config.ws_max_message_size))
        .max_frame_size(Some(engine.config.ws_max_frame_size));

    let ws_init = move || WebSocketStream::from_raw_socket(conn, Role::Server, Some(ws_config));
    let (socket, ws, heartbeat) = if let Some(sid) = sid {
        // Patched: the request of an upgrade is not kept while the connection lives.
        drop(req_data);
        match engine.get_socket(sid) {
            None => return Err(Error::UnknownSessionID(sid)),
            Some(socket) if socket.is_ws() => return Err(Error::MultipleWebsocketRequests),
            Some(socket) => {
                let mut ws = ws_init().await;

                let upgrade_fut = upgrade_handshake::<H, S>(&socket, &mut ws);
                match tokio::time::timeout(engine.config.upgrade_timeout, upgrade_fut)
                    .with_cancellation_token(&socket.cancellation_token)
                    .await
                {
                    Some(Ok(res)) => res?,
                    Some(Err(_)) => {
                        #[cfg(feature = "tracing")]
                        tracing::debug!(?sid, "ws upgrade timed out, closing session");
                        engine.close_session(socket.id, DisconnectReason::TransportError);
                        return Err(Error::Upgrade);
                    }
                    None => {
                        #[cfg(feature = "tracing")]
                        tracing::debug!(?sid, "socket is being closed");
                        return Err(Error::Upgrade);
                    }
                }
                // The heartbeat job of the polling session goes on.
                (socket, ws, None)
            }
        }
    } else {
        let socket = engine.create_session(protocol, TransportType::Websocket, req_data, false);

        #[cfg(feature = "tracing")]
        tracing::debug!("new websocket connection");

        let mut ws = ws_init().await;
        init_handshake(socket.id, &mut ws, &engine.config).await?;
        // Patched: a v4 session opened over websocket runs its heartbeat in the connection task.
        let heartbeat = if socket.protocol == ProtocolVersion::V4 {
            Some(Heartbeat::new(
                engine.config.ping_interval,
                engine.config.ping_timeout,
            ))
        } else {
            socket
                .clone()
                .spawn_heartbeat(engine.config.ping_interval, engine.config.ping_timeout);
            None
        };
        (socket, ws, heartbeat)
    };

    Ok(Connection {
        socket,
        ws,
        heartbeat,
    })
}

/// The heartbeat of a v4 session opened over websocket, run by its connection task (patched:
/// same timing as [`Socket::spawn_heartbeat`]'s task, which upstream runs for every session).
///
/// A ping is sent when the session starts and then every `interval` (counted from the session's
/// start, like a [`tokio::time::Interval`]); the client must answer each within `timeout`.
struct Heartbeat {
    interval: Duration,
    timeout: Duration,
    /// When the next ping is due.
    next_ping: Instant,
    /// A ping was sent and its pong has not arrived yet.
    waiting_pong: bool,
}

impl Heartbeat {
    fn new(interval: Duration, timeout: Duration) -> Self {
        Self {
            interval,
            timeout,
            // Like upstream's job, whose interval ticks at once: the first ping goes right away.
            next_ping: Instant::now(),
            waiting_pong: false,
        }
    }

    /// The timer fired: sends a ping, or fails if the last one was not answered. Returns the
    /// next deadline.
    fn on_timer<D>(&mut self, socket: &Socket<D>) -> Result<Instant, Error>
    where
        D: Default + Send + Sync + 'static,
    {
        if self.waiting_pong {
            return Err(Error::HeartbeatTimeout);
        }
        #[cfg(feature = "tracing")]
        tracing::trace!(sid = ?socket.id, "emitting ping");
        socket
            .internal_tx
            .try_send(smallvec![Packet::Ping])
            .map_err(|_| Error::HeartbeatTimeout)?;
        self.waiting_pong = true;
        self.next_ping += self.interval;
        Ok(Instant::now() + self.timeout)
    }

    /// A pong arrived: returns the next deadline if it answered a ping. A pong that answers
    /// nothing (some clients send one first) is ignored.
    fn on_pong(&mut self) -> Option<Instant> {
        if !self.waiting_pong {
            return None;
        }
        self.waiting_pong = false;
        Some(self.next_ping)
    }
}

/// What woke the connection task.
enum Event<G> {
    /// The session is being closed.
    Cancelled,
    /// The lock of the send queue was taken: this task is now its consumer.
    Locked(G),
    /// Packets to write (`None`: the queue was closed).
    Packets(Option<engineioxide_core::PacketBuf>),
    /// A message from the client (`None`: the stream ended).
    Read(Option<Result<Message, tungstenite::Error>>),
    /// The heartbeat timer fired.
    Timer,
}

/// Runs a websocket connection until its session closes: reads messages and hands them to the
/// handler, writes the socket's send queue (flushing once it is drained), and runs the heartbeat
/// when `heartbeat` is set, all from one task. Reading and writing never wait for each other: a
/// client that does not read can not stop this task from reading (and from timing its
/// heartbeat out).
fn run_connection<H: EngineIoHandler, S>(
    engine: Arc<EngineIo<H>>,
    mut conn: Connection<H::Data, S>,
) -> impl Future<Output = ()> + Send
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    // An async block rather than an async fn, and fields rather than destructured locals: an
    // async fn copies its arguments into locals and keeps both (a websocket takes 300 bytes).
    async move {
        let engine = &engine;
        let socket = &conn.socket;
        let ws = &mut conn.ws;
        let heartbeat = &mut conn.heartbeat;
        // The futures the loop polls are dropped with this block, before the closing flush.
        let locked = {
            let cancelled = socket.cancellation_token.cancelled();
            // A polling request that was in progress during the upgrade may still hold the lock;
            // waiting for it takes a 120-byte future, boxed as it is rare.
            let mut locked = socket.internal_rx.try_lock().ok();
            let mut lock = locked
                .is_none()
                .then(|| Box::pin(socket.internal_rx.lock()));
            let timer = tokio::time::sleep_until(
                heartbeat
                    .as_ref()
                    .map_or_else(Instant::now, |h| h.next_ping),
            );
            tokio::pin!(cancelled, timer);
            let mut need_flush = false;
            // Reads and writes take turns at being polled first, so neither can starve the other.
            let mut read_first = false;

            loop {
                read_first = !read_first;
                let event = poll_fn(|cx| {
                    if cancelled.as_mut().poll(cx).is_ready() {
                        return Poll::Ready(Event::Cancelled);
                    }
                    if let Some(Poll::Ready(guard)) = lock.as_mut().map(|l| l.as_mut().poll(cx)) {
                        return Poll::Ready(Event::Locked(guard));
                    }
                    for read in [read_first, !read_first] {
                        if read {
                            if let Poll::Ready(msg) = ws.poll_next_unpin(cx) {
                                return Poll::Ready(Event::Read(msg));
                            }
                        } else if locked.is_some() {
                            if need_flush {
                                if let Poll::Ready(_res) = Pin::new(&mut *ws).poll_flush(cx) {
                                    #[cfg(feature = "tracing")]
                                    if let Err(e) = _res {
                                        tracing::debug!(
                                            "[sid={}] error flushing: {}",
                                            socket.id,
                                            e
                                        );
                                    }
                                    need_flush = false;
                                }
                            }
                            if !need_flush && Pin::new(&mut *ws).poll_ready(cx).is_ready() {
                                if let Poll::Ready(packets) = socket.internal_tx.poll_recv(cx) {
                                    return Poll::Ready(Event::Packets(packets));
                                }
                            }
                        }
                    }
                    if heartbeat.is_some() && timer.as_mut().poll(cx).is_ready() {
                        return Poll::Ready(Event::Timer);
                    }
                    Poll::Pending
                })
                .await;

                let closed = |reason| {
                    #[cfg(feature = "tracing")]
                    tracing::debug!(sid = %socket.id, ?reason, "ws transport was closed");
                    engine.close_session(socket.id, reason);
                };
                match event {
                    Event::Cancelled | Event::Packets(None) => {
                        #[cfg(feature = "tracing")]
                        tracing::debug!(sid = %socket.id, "socket is closing");
                        break;
                    }
                    Event::Locked(guard) => {
                        locked = Some(guard);
                        lock = None;
                    }
                    Event::Packets(Some(packets)) => {
                        write_packets(socket, ws, packets);
                        while let Some(packets) = socket.internal_tx.try_recv() {
                            write_packets(socket, ws, packets);
                        }
                        #[cfg(feature = "tracing")]
                        tracing::trace!(sid = %socket.id, "ws flush");
                        need_flush = true;
                    }
                    Event::Read(None) => {
                        closed(DisconnectReason::TransportClose);
                        break;
                    }
                    Event::Read(Some(msg)) => {
                        let pong = match msg
                            .map_err(Error::from)
                            .and_then(|msg| on_message(engine, socket, msg))
                        {
                            Ok(Some(pong)) => pong,
                            // The client closed the session, which is closed already.
                            Ok(None) => break,
                            Err(e) => {
                                #[cfg(feature = "tracing")]
                                tracing::debug!("error when handling packet: {:?}", e);
                                closed(
                                    Option::<DisconnectReason>::from(&e)
                                        .unwrap_or(DisconnectReason::TransportError),
                                );
                                break;
                            }
                        };
                        if pong {
                            match heartbeat.as_mut() {
                                Some(h) => {
                                    if let Some(next) = h.on_pong() {
                                        #[cfg(feature = "tracing")]
                                        tracing::trace!(sid = ?socket.id, "pong received");
                                        timer.as_mut().reset(next);
                                    }
                                }
                                // A signal already waiting means that the client is already known to be alive.
                                None => socket.heartbeat.notify_one(),
                            }
                        }
                    }
                    Event::Timer => match heartbeat.as_mut().map(|h| h.on_timer(socket)) {
                        Some(Ok(next)) => timer.as_mut().reset(next),
                        Some(Err(_e)) => {
                            #[cfg(feature = "tracing")]
                            tracing::debug!(id = ?socket.id, "heartbeat error: {_e}");
                            // Queues a close packet, then closes the session: written below.
                            socket.close(DisconnectReason::HeartbeatTimeout);
                        }
                        None => {}
                    },
                }
            }
            locked
        };

        // The packets queued before the session closed (a close packet) still go out, unless the
        // client does not read them within the ping timeout.
        if locked.is_some() {
            while let Some(packets) = socket.internal_tx.try_recv() {
                write_packets(socket, ws, packets);
            }
            #[cfg(feature = "tracing")]
            tracing::trace!(sid = %socket.id, "ws closing flush");
            let closing = async {
                ws.flush().await.ok();
                ws.close(None).await.ok();
            };
            // Boxed: run once, it would otherwise take room in the task for its whole life.
            Box::pin(tokio::time::timeout(engine.config.ping_timeout, closing))
                .await
                .ok();
        }
    }
}

/// Hands a message from the client to the handler. Returns whether it was a heartbeat
/// packet, or `None` when the client closed the session.
fn on_message<H: EngineIoHandler>(
    engine: &Arc<EngineIo<H>>,
    socket: &Arc<Socket<H::Data>>,
    msg: Message,
) -> Result<Option<bool>, Error> {
    match msg {
        Message::Text(msg) => match Packet::parse(socket.protocol, ws_bytes_to_str(msg))? {
            Packet::Close => {
                #[cfg(feature = "tracing")]
                tracing::debug!("[sid={}] closing session", socket.id);
                engine.close_session(socket.id, DisconnectReason::TransportClose);
                return Ok(None);
            }
            Packet::Pong | Packet::Ping => return Ok(Some(true)),
            Packet::Message(msg) => engine.handler.on_message(msg, socket.clone()),
            p => return Err(Error::BadPacket(p)),
        },
        Message::Binary(mut data) => {
            if socket.protocol == ProtocolVersion::V3 && !data.is_empty() {
                // The first byte is the message type, which we don't need.
                data = data.split_off(1);
            }
            engine.handler.on_binary(data, socket.clone());
        }
        Message::Close(_) => {
            #[cfg(feature = "tracing")]
            tracing::debug!("websocket closed, closing session");
            engine.close_session(socket.id, DisconnectReason::TransportClose);
            return Ok(None);
        }
        _ => {
            #[cfg(feature = "tracing")]
            tracing::debug!(sid = ?socket.id, "unexpected ws message");
        }
    }
    Ok(Some(false))
}

/// Writes packets to the websocket's write buffer (flushed by the caller).
fn write_packets<D, S>(
    socket: &Socket<D>,
    ws: &mut WebSocketStream<S>,
    packets: engineioxide_core::PacketBuf,
) where
    D: Default + Send + Sync + 'static,
    S: AsyncRead + AsyncWrite + Unpin,
{
    for packet in packets {
        let msg = match packet {
            Packet::Binary(bin) | Packet::BinaryV3(bin) => {
                if socket.protocol == ProtocolVersion::V3 {
                    // v3 protocol requires packet type as the first byte.
                    // This requires a new buffer. This is OK as it is only for the V3 protocol.
                    let mut buff = Vec::with_capacity(bin.len() + 1);
                    buff.push(0x04);
                    buff.extend(bin);
                    Message::Binary(buff.into())
                } else {
                    Message::Binary(bin)
                }
            }
            // A Noop Packet maybe sent by the server to upgrade from a polling connection
            // In the case that the packet was not poll in time it will remain in the buffer and therefore
            // it should be discarded here
            Packet::Noop => continue,
            packet => {
                let packet: String = packet.try_into().unwrap();
                Message::Text(packet.into())
            }
        };
        // The websocket buffers the frame (writing it out if its write buffer is full); an
        // error means the connection is broken, which the read side reports.
        if let Err(_e) = Pin::new(&mut *ws).start_send(msg) {
            #[cfg(feature = "tracing")]
            tracing::debug!("[sid={}] error sending packet: {}", socket.id, _e);
        }
    }
}

/// Send a Engine.IO [`OpenPacket`] to initiate a websocket connection
async fn init_handshake<S>(
    sid: Sid,
    ws: &mut WebSocketStream<S>,
    config: &EngineIoConfig,
) -> Result<(), Error>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let packet = Packet::Open(make_open_packet(TransportType::Websocket, sid, config));
    let packet: String = packet.into();
    ws.send(Message::Text(packet.into())).await?;
    Ok(())
}

/// Upgrade a session from a polling request to a websocket request.
///
/// Before upgrading the session the server should send a NOOP packet to any pending polling request.
///
/// ## Handshake :
/// ```text
/// CLIENT                                                 SERVER
///│                                                      │
///│   GET /engine.io/?EIO=4&transport=websocket&sid=...  │
///│ ───────────────────────────────────────────────────► │
///│  ◄─────────────────────────────────────────────────┘ │
///│            HTTP 101 (WebSocket handshake)            │
///│                                                      │
///│            -----  WebSocket frames -----             │
///│  ─────────────────────────────────────────────────►  │
///│                         2probe                       │ (ping packet)
///│  ◄─────────────────────────────────────────────────  │
///│                         3probe                       │ (pong packet)
///│  ─────────────────────────────────────────────────►  │
///│                         5                            │ (upgrade packet)
///│                                                      │
///│            -----  WebSocket frames -----             │
/// ```
#[cfg_attr(
    feature = "tracing",
    tracing::instrument(level = "trace", skip(socket, ws))
)]
async fn upgrade_handshake<H: EngineIoHandler, S>(
    socket: &Arc<Socket<H::Data>>,
    ws: &mut WebSocketStream<S>,
) -> Result<(), Error>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    #[cfg(feature = "tracing")]
    tracing::debug!("starting websocket connection upgrade");

    // The socket is upgrading, from now on all polling
    // request will return a `Packet::Noop`
    socket.start_upgrade();

    // We send a last Noop request to close a potential waiting polling request.
    socket
        .internal_tx
        .send(smallvec![Packet::Noop])
        .await
        .map_err(|_| Error::Upgrade)?;

    // wait for any current polling connection to finish by waiting for the socket to be unlocked
    // All other polling connection will be immediately closed with a NOOP packet.
    let _lock = socket.internal_rx.lock().await;

    // Fetch the next packet from the ws stream, it should be a PingUpgrade packet
    let msg = match ws.next().await {
        Some(Ok(Message::Text(d))) => d,
        _ => Err(Error::Upgrade)?,
    };
    match Packet::parse(socket.protocol, ws_bytes_to_str(msg))? {
        Packet::PingUpgrade => {
            #[cfg(feature = "tracing")]
            tracing::debug!("received first ping upgrade");
            // Respond with a PongUpgrade packet
            ws.send(Message::Text(String::from(Packet::PongUpgrade).into()))
                .await?;
        }
        p => Err(Error::BadPacket(p))?,
    };

    // Fetch the next packet from the ws stream, it should be an Upgrade packet
    let msg = match ws.next().await {
        Some(Ok(Message::Text(d))) => d,
        Some(Ok(Message::Close(_))) => {
            #[cfg(feature = "tracing")]
            tracing::debug!("ws stream closed before upgrade");
            Err(Error::Upgrade)?
        }
        _ => {
            #[cfg(feature = "tracing")]
            tracing::debug!("unexpected ws message before upgrade");
            Err(Error::Upgrade)?
        }
    };
    match Packet::parse(socket.protocol, ws_bytes_to_str(msg))? {
        Packet::Upgrade => {
            #[cfg(feature = "tracing")]
            tracing::debug!("ws upgraded successfully")
        }
        p => Err(Error::BadPacket(p))?,
    };

    socket.upgrade_to_websocket();
    Ok(())
}

fn ws_bytes_to_str(bytes: tungstenite::Utf8Bytes) -> Str {
    // SAFETY: the bytes are guaranteed to be valid UTF-8 by the tungstenite parser
    unsafe { Str::from_bytes_unchecked(bytes.into()) }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use bytes::Bytes;
    use futures_util::StreamExt;
    use http::Request;
    use tokio::io::DuplexStream;

    use super::*;

    const TIMEOUT: Duration = Duration::from_secs(1);

    #[derive(Debug)]
    struct StubHandler;
    impl EngineIoHandler for StubHandler {
        type Data = ();
        fn on_connect(self: Arc<Self>, _: Arc<Socket<()>>) {}
        fn on_disconnect(&self, _: Arc<Socket<()>>, _: DisconnectReason) {}
        fn on_message(self: &Arc<Self>, _: Str, _: Arc<Socket<()>>) {}
        fn on_binary(self: &Arc<Self>, _: Bytes, _: Arc<Socket<()>>) {}
    }

    fn socket() -> Arc<Socket<()>> {
        Arc::new(Socket::new(
            ProtocolVersion::V4,
            TransportType::Websocket,
            &EngineIoConfig::default(),
            Request::<()>::default().into_parts().0,
            Box::new(|_, _| ()),
            false,
        ))
    }

    async fn ws_pair() -> (WebSocketStream<DuplexStream>, WebSocketStream<DuplexStream>) {
        let (server, client) = tokio::io::duplex(1024);
        (
            WebSocketStream::from_raw_socket(server, Role::Server, None).await,
            WebSocketStream::from_raw_socket(client, Role::Client, None).await,
        )
    }

    fn engine() -> Arc<EngineIo<StubHandler>> {
        Arc::new(EngineIo::new(
            Arc::new(StubHandler),
            EngineIoConfig::default(),
        ))
    }

    /// A polling request can still hold the lock at the end of an upgrade.
    #[tokio::test]
    async fn writer_waits_for_the_lock_of_a_polling_request() {
        let socket = socket();
        let (server, mut client) = ws_pair().await;

        let polling = socket.internal_rx.lock().await;
        let writer = tokio::spawn({
            let socket = socket.clone();
            async move {
                let conn = Connection {
                    socket,
                    ws: server,
                    heartbeat: None,
                };
                run_connection(engine(), conn).await
            }
        });
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!writer.is_finished(), "the writer should wait for the lock");

        drop(polling);
        socket.emit(Str::from("hello")).unwrap();
        let msg = tokio::time::timeout(TIMEOUT, client.next())
            .await
            .expect("the writer should send the packet")
            .unwrap()
            .unwrap();
        assert_eq!(msg, Message::text("4hello"));
    }

    #[tokio::test]
    async fn writer_waiting_for_the_lock_stops_with_the_session() {
        let socket = socket();
        let (server, _client) = ws_pair().await;

        let _polling = socket.internal_rx.lock().await;
        let writer = tokio::spawn({
            let socket = socket.clone();
            async move {
                let conn = Connection {
                    socket,
                    ws: server,
                    heartbeat: None,
                };
                run_connection(engine(), conn).await
            }
        });
        tokio::time::sleep(Duration::from_millis(20)).await;

        socket.cancellation_token.cancel();
        tokio::time::timeout(TIMEOUT, writer)
            .await
            .expect("the writer should stop")
            .unwrap();
    }

    #[derive(Debug)]
    struct RecordingHandler(tokio::sync::mpsc::UnboundedSender<DisconnectReason>);
    impl EngineIoHandler for RecordingHandler {
        type Data = ();
        fn on_connect(self: Arc<Self>, _: Arc<Socket<()>>) {}
        fn on_disconnect(&self, _: Arc<Socket<()>>, reason: DisconnectReason) {
            self.0.send(reason).ok();
        }
        fn on_message(self: &Arc<Self>, _: Str, _: Arc<Socket<()>>) {}
        fn on_binary(self: &Arc<Self>, _: Bytes, _: Arc<Socket<()>>) {}
    }

    /// The heartbeat of a session opened over websocket runs in the connection task: pings
    /// every interval, and a ping left unanswered closes the session with a close packet.
    #[tokio::test]
    async fn heartbeat_runs_in_the_connection_task() {
        let (tx, mut disconnected) = tokio::sync::mpsc::unbounded_channel();
        let interval = Duration::from_millis(50);
        let config = EngineIoConfig::builder()
            .ping_interval(interval)
            .ping_timeout(interval)
            .build();
        let engine = Arc::new(EngineIo::new(Arc::new(RecordingHandler(tx)), config));
        let socket = engine.create_session(
            ProtocolVersion::V4,
            TransportType::Websocket,
            Request::<()>::default().into_parts().0,
            false,
        );
        let (server, mut client) = ws_pair().await;
        tokio::spawn({
            let (engine, socket) = (engine.clone(), socket.clone());
            async move {
                let conn = Connection {
                    socket,
                    ws: server,
                    heartbeat: Some(Heartbeat::new(interval, interval)),
                };
                run_connection(engine, conn).await
            }
        });
        async fn next(client: &mut WebSocketStream<DuplexStream>) -> Message {
            tokio::time::timeout(TIMEOUT, client.next())
                .await
                .expect("a message from the server")
                .unwrap()
                .unwrap()
        }
        assert_eq!(next(&mut client).await, Message::text("2"));
        client.send(Message::text("3")).await.unwrap();
        assert_eq!(next(&mut client).await, Message::text("2"));
        // Not answered: the session closes.
        assert_eq!(next(&mut client).await, Message::text("1"));
        let reason = tokio::time::timeout(TIMEOUT, disconnected.recv())
            .await
            .unwrap();
        assert_eq!(reason, Some(DisconnectReason::HeartbeatTimeout));
    }
}
