//! `floor`: the least a server on the relay's stack (hyper 1 and tungstenite over tokio) can do
//! for the load generator's round trip, to measure the relay against. No Socket.IO, no
//! authentication, no JSON library, no key state: it answers the few packets the generator's tabs
//! send with fixed text, finds a call's tab by its key, writes the call to that tab's WebSocket,
//! and answers the HTTP request with what the tab sent back.
//!
//! It reads the generator's own messages by position: the key in a tab's `40{"token":"…"}` and in
//! a call's `"apiKey":"…"`, the params between `"params":` and `,"awaitResult"`, the ack id after
//! `43`. Any other client is out of scope.
//!
//! `FLOOR_ADDR` (default `127.0.0.1:4301`) is where it listens. Like the relay it runs tokio's
//! default runtime, so `taskset` decides its worker threads.

use std::collections::{HashMap, VecDeque};
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use bytes::Bytes;
use futures_util::{SinkExt, StreamExt};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::sync::{Notify, oneshot};
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::handshake::derive_accept_key;
use tokio_tungstenite::tungstenite::protocol::{Role, WebSocketConfig};

/// How long an awaited call waits for its tab.
const CALL_TIMEOUT: Duration = Duration::from_secs(10);

/// One connected tab: frames waiting to be written, and the calls waiting for its answer.
#[derive(Default)]
struct Tab {
    state: Mutex<TabState>,
    /// Wakes the tab's connection task when a frame is queued.
    queued: Notify,
}

#[derive(Default)]
struct TabState {
    frames: VecDeque<String>,
    waiting: HashMap<u64, oneshot::Sender<String>>,
    next_ack: u64,
}

impl Tab {
    fn send(&self, frame: String) {
        self.state.lock().expect("tab lock").frames.push_back(frame);
        self.queued.notify_one();
    }
}

#[derive(Default)]
struct Floor {
    tabs: RwLock<HashMap<String, Arc<Tab>>>,
    minted: AtomicU64,
}

type Body = Full<Bytes>;

fn respond(status: StatusCode, body: impl Into<Bytes>) -> Response<Body> {
    let mut response = Response::new(Full::new(body.into()));
    *response.status_mut() = status;
    response
}

/// The text between `start` and the next `end` after it.
fn between<'a>(text: &'a str, start: &str, end: &str) -> Option<&'a str> {
    let from = text.find(start)? + start.len();
    let len = text[from..].find(end)?;
    Some(&text[from..from + len])
}

async fn handle(
    floor: Arc<Floor>,
    request: Request<Incoming>,
) -> Result<Response<Body>, Infallible> {
    let path = request.uri().path();
    Ok(match path {
        "/healthz" => respond(StatusCode::OK, "ok"),
        "/token" => {
            let n = floor.minted.fetch_add(1, Ordering::Relaxed);
            respond(
                StatusCode::OK,
                format!("{{\"apiKey\":\"f{n}\",\"token\":\"f{n}\"}}"),
            )
        }
        "/api/voice-agent/tool-call" => call(&floor, request).await,
        _ if path.starts_with("/socket.io/") => upgrade(floor, request),
        _ => respond(StatusCode::NOT_FOUND, ""),
    })
}

fn upgrade(floor: Arc<Floor>, mut request: Request<Incoming>) -> Response<Body> {
    let Some(key) = request.headers().get("sec-websocket-key") else {
        return respond(StatusCode::BAD_REQUEST, "");
    };
    let accept = derive_accept_key(key.as_bytes());
    let on_upgrade = hyper::upgrade::on(&mut request);
    tokio::spawn(async move {
        if let Ok(upgraded) = on_upgrade.await {
            // The relay's read size (its tabs send small acknowledgements).
            let config = WebSocketConfig::default().read_buffer_size(1024);
            let io = TokioIo::new(upgraded);
            let ws = WebSocketStream::from_raw_socket(io, Role::Server, Some(config)).await;
            tab_connection(floor, ws).await;
        }
    });
    Response::builder()
        .status(StatusCode::SWITCHING_PROTOCOLS)
        .header("upgrade", "websocket")
        .header("connection", "Upgrade")
        .header("sec-websocket-accept", accept)
        .body(Full::new(Bytes::new()))
        .expect("static response")
}

/// Runs one tab's WebSocket: binds its key at its connect packet, writes queued frames, and hands
/// acknowledgements to the calls waiting for them.
async fn tab_connection(
    floor: Arc<Floor>,
    mut ws: WebSocketStream<TokioIo<hyper::upgrade::Upgraded>>,
) {
    if ws.send(Message::text("0{}")).await.is_err() {
        return;
    }
    let tab = Arc::new(Tab::default());
    let mut key = None;
    loop {
        tokio::select! {
            msg = ws.next() => {
                let Some(Ok(Message::Text(text))) = msg else {
                    if matches!(msg, None | Some(Err(_)) | Some(Ok(Message::Close(_)))) {
                        break;
                    }
                    continue;
                };
                let text = text.as_str();
                if let Some(rest) = text.strip_prefix("43") {
                    let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
                    let (id, answer) = rest.split_at(digits);
                    let waiting = id.parse().ok().and_then(|id| tab.state.lock().expect("tab lock").waiting.remove(&id));
                    if let (Some(tx), Some(inner)) = (waiting, answer.strip_prefix('[').and_then(|a| a.strip_suffix(']'))) {
                        let _ = tx.send(inner.to_owned());
                    }
                } else if text.starts_with("40") && key.is_none() {
                    let Some(k) = between(text, "\"token\":\"", "\"") else { break };
                    floor.tabs.write().expect("tabs lock").insert(k.to_owned(), tab.clone());
                    key = Some(k.to_owned());
                    if ws.send(Message::text("40{}")).await.is_err() {
                        break;
                    }
                }
            }
            () = tab.queued.notified() => {
                let frames = std::mem::take(&mut tab.state.lock().expect("tab lock").frames);
                for frame in frames {
                    if ws.feed(Message::text(frame)).await.is_err() {
                        break;
                    }
                }
                if ws.flush().await.is_err() {
                    break;
                }
            }
        }
    }
    if let Some(k) = key {
        floor.tabs.write().expect("tabs lock").remove(&k);
    }
}

async fn call(floor: &Floor, request: Request<Incoming>) -> Response<Body> {
    let Ok(body) = request.into_body().collect().await.map(|b| b.to_bytes()) else {
        return respond(StatusCode::BAD_REQUEST, "");
    };
    let Ok(body) = std::str::from_utf8(&body) else {
        return respond(StatusCode::BAD_REQUEST, "");
    };
    let (Some(key), Some(params)) = (
        between(body, "\"apiKey\":\"", "\""),
        between(body, "\"params\":", ",\"awaitResult\""),
    ) else {
        return respond(StatusCode::BAD_REQUEST, "");
    };
    let Some(tab) = floor.tabs.read().expect("tabs lock").get(key).cloned() else {
        return respond(StatusCode::NOT_FOUND, "{\"ok\":false}");
    };
    if !body.contains("\"awaitResult\":true") {
        tab.send(format!("42[\"voice-agent:echo\",{params},{{}}]"));
        return respond(StatusCode::OK, "{\"ok\":true}");
    }
    let (tx, rx) = oneshot::channel();
    let id = {
        let mut state = tab.state.lock().expect("tab lock");
        let id = state.next_ack;
        state.next_ack += 1;
        state.waiting.insert(id, tx);
        id
    };
    tab.send(format!("42{id}[\"voice-agent:echo\",{params},{{}}]"));
    match tokio::time::timeout(CALL_TIMEOUT, rx).await {
        Ok(Ok(answer)) => respond(StatusCode::OK, answer),
        _ => {
            tab.state.lock().expect("tab lock").waiting.remove(&id);
            respond(StatusCode::GATEWAY_TIMEOUT, "{\"ok\":false}")
        }
    }
}

fn main() -> std::io::Result<()> {
    let addr: SocketAddr = std::env::var("FLOOR_ADDR")
        .unwrap_or_else(|_| "127.0.0.1:4301".into())
        .parse()
        .map_err(std::io::Error::other)?;
    tokio::runtime::Runtime::new()?.block_on(async move {
        let listener = tokio::net::TcpListener::bind(addr).await?;
        eprintln!("floor listening on http://{addr}");
        let floor = Arc::new(Floor::default());
        loop {
            let (tcp, _) = listener.accept().await?;
            let _ = tcp.set_nodelay(true);
            let floor = floor.clone();
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |r| handle(floor.clone(), r));
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(tcp), service)
                    .with_upgrades()
                    .await;
            });
        }
    })
}
