//! A browser tab as the load generator plays it: a Socket.IO v4 client over WebSocket that binds
//! a key (handshake token or `voice-agent:register`) and answers every tool event at once. It
//! speaks the few packets it needs directly, so it stays cheap enough for tens of thousands of
//! tabs on one core.
//!
//! Every event carries `params = {"tab": <index>, "seq": <n>}`; a tab that receives another
//! tab's event counts it as misrouted.
//!
//! The WebSocket handshake carries the headers a desktop browser sends (user agent, `accept-*`,
//! `origin`, a 200-byte cookie), so a server that keeps each socket's request head is measured
//! with the head it would keep in production.

use std::collections::HashSet;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use serde::Deserialize;
use serde::de::IgnoredAny;
use tokio::net::TcpSocket;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::http::HeaderValue;
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;

/// How a tab binds its key.
#[derive(Clone, Debug)]
pub enum Bind {
    /// `auth: {token}` in the handshake (the relay's preferred way).
    Token(String),
    /// `voice-agent:register` with the bare key (how older frontends bind).
    Register(String),
}

/// Which request headers a tab's WebSocket handshake carries besides the upgrade headers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Headers {
    /// Only what the WebSocket client needs (host and the upgrade headers).
    Plain,
    /// What Chromium sends when a page opens a Socket.IO WebSocket, with a 200-byte cookie.
    Browser,
}

/// How each tab behaves once connected, besides binding.
#[derive(Clone, Debug)]
pub struct TabSetup {
    pub headers: Headers,
    /// A `voice-agent:handles` payload each tab sends after binding (acknowledged before the tab
    /// counts as bound), as a browser client declaring its tools does.
    pub declaration: Option<Arc<str>>,
}

/// The headers Chromium 140 on Linux sends with a page's WebSocket handshake (besides `host`
/// and the upgrade headers), for a page served from `origin`.
fn browser_headers(origin: &str) -> Vec<(&'static str, String)> {
    // A session cookie and an analytics cookie, 200 bytes in all, as a signed-in page has.
    let cookie = {
        let mut c = String::from("session=");
        while c.len() < 120 {
            c.push_str("a1B2c3D4e5");
        }
        c.push_str("; _ga=GA1.1.");
        while c.len() < 200 {
            c.push('7');
        }
        c
    };
    vec![
        ("origin", origin.to_owned()),
        ("pragma", "no-cache".to_owned()),
        ("cache-control", "no-cache".to_owned()),
        (
            "user-agent",
            "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) \
             Chrome/140.0.0.0 Safari/537.36"
                .to_owned(),
        ),
        ("accept-encoding", "gzip, deflate, br, zstd".to_owned()),
        ("accept-language", "en-US,en;q=0.9,de;q=0.8".to_owned()),
        ("cookie", cookie),
        (
            "sec-websocket-extensions",
            "permessage-deflate; client_max_window_bits".to_owned(),
        ),
    ]
}

/// Counters shared by all tabs.
#[derive(Default)]
pub struct TabStats {
    pub events: AtomicU64,
    pub acks_sent: AtomicU64,
    pub misrouted: AtomicU64,
    pub per_tab_fire: Vec<AtomicU64>,
    /// The `seq` of every call received, when calls carry unique ones: a second delivery of the
    /// same call to any tab counts in `duplicated`.
    pub seen: Option<Mutex<HashSet<u64>>>,
    pub duplicated: AtomicU64,
}

impl TabStats {
    pub fn new(tabs: usize) -> Self {
        TabStats {
            per_tab_fire: (0..tabs).map(|_| AtomicU64::new(0)).collect(),
            ..Default::default()
        }
    }
}

#[derive(Deserialize)]
struct Params {
    tab: usize,
    seq: u64,
}

/// Opens one tab and runs it until the connection ends. Returns once bound (through `bound`),
/// then keeps answering in the background task it is spawned in.
pub async fn run(
    server: SocketAddr,
    source: Option<IpAddr>,
    index: usize,
    bind: Bind,
    setup: TabSetup,
    stats: Arc<TabStats>,
    bound: tokio::sync::oneshot::Sender<Result<(), String>>,
) {
    let mut bound = Some(bound);
    let result = session(server, source, index, bind, &setup, &stats, &mut bound).await;
    if let (Some(tx), Err(e)) = (bound.take(), &result) {
        let _ = tx.send(Err(e.clone()));
    }
}

pub async fn session(
    server: SocketAddr,
    source: Option<IpAddr>,
    index: usize,
    bind: Bind,
    setup: &TabSetup,
    stats: &TabStats,
    bound: &mut Option<tokio::sync::oneshot::Sender<Result<(), String>>>,
) -> Result<(), String> {
    let socket = if server.is_ipv4() {
        TcpSocket::new_v4()
    } else {
        TcpSocket::new_v6()
    }
    .map_err(|e| e.to_string())?;
    if let Some(ip) = source {
        socket
            .bind(SocketAddr::new(ip, 0))
            .map_err(|e| format!("bind {ip}: {e}"))?;
    }
    let stream = tokio::time::timeout(Duration::from_secs(10), socket.connect(server))
        .await
        .map_err(|_| "connect timed out".to_string())?
        .map_err(|e| format!("connect: {e}"))?;
    let _ = stream.set_nodelay(true);
    let url = format!("ws://{server}/socket.io/?EIO=4&transport=websocket");
    let mut request = url.into_client_request().map_err(|e| e.to_string())?;
    if setup.headers == Headers::Browser {
        for (name, value) in browser_headers(&format!("http://{server}")) {
            let value = HeaderValue::from_str(&value).map_err(|e| e.to_string())?;
            request.headers_mut().insert(name, value);
        }
    }
    // Events are small: 4 KiB reads (tungstenite's default of 128 KiB is zeroed on every read).
    let config = WebSocketConfig::default().read_buffer_size(4096);
    let (ws, _) = tokio_tungstenite::client_async_with_config(request, stream, Some(config))
        .await
        .map_err(|e| format!("websocket: {e}"))?;
    let (mut tx, mut rx) = ws.split();

    // Engine.IO open packet, then the namespace connect.
    let open = next_text(&mut rx).await?;
    if !open.starts_with('0') {
        return Err(format!("unexpected open packet {open:.40}"));
    }
    let connect = match &bind {
        Bind::Token(token) => format!("40{}", serde_json::json!({ "token": token })),
        Bind::Register(_) => "40".to_owned(),
    };
    tx.send(Message::text(connect))
        .await
        .map_err(|e| e.to_string())?;
    // An Engine.IO ping can come first.
    let reply = next_answering_pings(&mut rx, &mut tx).await?;
    if !reply.starts_with("40") {
        return Err(format!("refused: {reply:.120}"));
    }
    if let Bind::Register(key) = &bind {
        let register = format!("420{}", serde_json::json!(["voice-agent:register", key]));
        tx.send(Message::text(register))
            .await
            .map_err(|e| e.to_string())?;
        while !next_answering_pings(&mut rx, &mut tx)
            .await?
            .starts_with("430")
        {}
    }
    if let Some(declaration) = &setup.declaration {
        let declare = format!("421[\"voice-agent:handles\",{declaration}]");
        tx.send(Message::text(declare))
            .await
            .map_err(|e| e.to_string())?;
        let ack = loop {
            let text = next_answering_pings(&mut rx, &mut tx).await?;
            if text.starts_with("431") {
                break text;
            }
        };
        if !ack.contains("\"ok\":true") {
            return Err(format!("declaration refused: {ack:.160}"));
        }
    }
    if let Some(b) = bound.take() {
        let _ = b.send(Ok(()));
    }

    while let Some(msg) = rx.next().await {
        let Ok(Message::Text(text)) = msg else {
            if matches!(msg, Ok(Message::Close(_)) | Err(_)) {
                break;
            }
            continue;
        };
        let text = text.as_str();
        if text == "2" {
            tx.send(Message::text("3"))
                .await
                .map_err(|e| e.to_string())?;
            continue;
        }
        let Some(rest) = text.strip_prefix("42") else {
            if text.starts_with("41") {
                break;
            }
            continue;
        };
        stats.events.fetch_add(1, Ordering::Relaxed);
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        let (ack_id, body) = rest.split_at(digits);
        let Ok((_event, params, _meta)) =
            serde_json::from_str::<(IgnoredAny, Params, Option<IgnoredAny>)>(body)
        else {
            continue;
        };
        if params.tab != index {
            stats.misrouted.fetch_add(1, Ordering::Relaxed);
        }
        if let Some(seen) = &stats.seen
            && !seen
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(params.seq)
        {
            stats.duplicated.fetch_add(1, Ordering::Relaxed);
        }
        if ack_id.is_empty() {
            if let Some(c) = stats.per_tab_fire.get(index) {
                c.fetch_add(1, Ordering::Relaxed);
            }
        } else {
            let answer = format!(
                "43{ack_id}[{{\"ok\":true,\"result\":{{\"tab\":{index},\"seq\":{}}}}}]",
                params.seq
            );
            tx.send(Message::text(answer))
                .await
                .map_err(|e| e.to_string())?;
            stats.acks_sent.fetch_add(1, Ordering::Relaxed);
        }
    }
    Ok(())
}

/// The next text frame that is not an Engine.IO ping; pings met on the way are answered.
async fn next_answering_pings<S, T>(rx: &mut S, tx: &mut T) -> Result<String, String>
where
    S: futures_util::Stream<Item = Result<Message, tokio_tungstenite::tungstenite::Error>> + Unpin,
    T: futures_util::Sink<Message, Error = tokio_tungstenite::tungstenite::Error> + Unpin,
{
    loop {
        let text = next_text(rx).await?;
        if text != "2" {
            return Ok(text);
        }
        tx.send(Message::text("3"))
            .await
            .map_err(|e| e.to_string())?;
    }
}

async fn next_text<S>(rx: &mut S) -> Result<String, String>
where
    S: futures_util::Stream<Item = Result<Message, tokio_tungstenite::tungstenite::Error>> + Unpin,
{
    loop {
        match tokio::time::timeout(Duration::from_secs(10), rx.next()).await {
            Err(_) => return Err("no answer in 10 s".into()),
            Ok(None) => return Err("closed".into()),
            Ok(Some(Err(e))) => return Err(e.to_string()),
            Ok(Some(Ok(Message::Text(t)))) => return Ok(t.as_str().to_owned()),
            Ok(Some(Ok(_))) => continue,
        }
    }
}
