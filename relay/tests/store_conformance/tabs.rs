//! Real sockets for the binding cases: a Socket.IO server (in-memory adapter) with a polling
//! client of its own, on a thread and a real-time runtime of their own, so that the in-memory
//! run on tokio's paused clock gets live sockets too. A socket stays connected for the whole
//! suite (its heartbeat would end it after tens of seconds).

use std::sync::mpsc;

use relay::sockets::TabSocket;
use socketioxide::SocketIo;
use socketioxide::extract::SocketRef;

/// Hands out connected sockets.
pub struct Tabs {
    ask: mpsc::Sender<mpsc::Sender<TabSocket>>,
}

impl Tabs {
    pub fn start() -> Tabs {
        let (ask, asked) = mpsc::channel::<mpsc::Sender<TabSocket>>();
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a runtime for the sockets");
            runtime.block_on(serve(asked));
        });
        Tabs { ask }
    }

    /// A newly connected socket.
    pub fn socket(&self) -> TabSocket {
        let (tx, rx) = mpsc::channel();
        self.ask.send(tx).expect("the socket server runs");
        rx.recv().expect("a socket connected")
    }
}

async fn serve(asked: mpsc::Receiver<mpsc::Sender<TabSocket>>) {
    let (connected, mut sockets) = tokio::sync::mpsc::unbounded_channel::<SocketRef>();
    let (layer, io) = SocketIo::builder().build_layer();
    io.ns("/", move |s: SocketRef| {
        let connected = connected.clone();
        async move {
            let _ = connected.send(s);
        }
    });
    let app = axum::Router::new().layer(layer);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("a port for the sockets");
    let url = format!(
        "http://{}/socket.io/?EIO=4&transport=polling",
        listener.local_addr().expect("its address")
    );
    tokio::spawn(async move { axum::serve(listener, app).await });
    let http = reqwest::Client::new();
    // Answered one at a time: the blocking wait for the next ask runs off the runtime's thread.
    let (asks, mut next) = tokio::sync::mpsc::unbounded_channel();
    std::thread::spawn(move || {
        while let Ok(reply) = asked.recv() {
            if asks.send(reply).is_err() {
                break;
            }
        }
    });
    while let Some(reply) = next.recv().await {
        let open = http
            .get(&url)
            .send()
            .await
            .expect("engine.io open")
            .text()
            .await
            .expect("open packet");
        let handshake: serde_json::Value =
            serde_json::from_str(open.trim_start_matches('0')).expect("open packet is JSON");
        let sid = handshake["sid"].as_str().expect("a session id").to_owned();
        http.post(format!("{url}&sid={sid}"))
            .body("40")
            .send()
            .await
            .expect("Socket.IO connect");
        let socket = sockets.recv().await.expect("the namespace connected");
        let _ = reply.send(TabSocket::Local(socket));
    }
}
