//! The agents: each posts tool calls over one keep-alive HTTP/1.1 connection, to random tabs,
//! awaited or not, closed loop or at a fixed rate, and checks each answer came from the tab it
//! was addressed to; and the one large emit to every tab.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use anyhow::{Context, bail};
use hdrhistogram::Histogram;
use tokio::time::Instant;

use crate::Callee;
use crate::tab::TabStats;

/// What one agent does.
pub struct AgentConfig {
    pub server: SocketAddr,
    /// The tabs it may call, each with its own agent's session token.
    pub keys: Arc<Vec<Callee>>,
    pub awaited: bool,
    /// Time between two calls (a fixed rate); `None`: the next call as soon as one ends.
    pub interval: Option<Duration>,
    /// When its first call is scheduled, after the start (agents of a fixed rate are spread).
    pub offset: Duration,
    /// Calls scheduled before this are not measured.
    pub warmup_end: Instant,
    pub end: Instant,
    /// Fire-and-forget calls sent per tab, to compare with what the tabs received.
    pub sent_fire: Arc<Vec<AtomicU64>>,
    /// Picks the tabs (xorshift).
    pub seed: u64,
}

pub struct AgentResult {
    pub histogram: Histogram<u64>,
    /// Latency counted from each call's scheduled time (open loop only).
    pub from_schedule: Histogram<u64>,
    pub calls: u64,
    pub errors: BTreeMap<String, u64>,
    pub wrong_answer: u64,
}

#[derive(serde::Deserialize)]
struct Answer {
    result: Option<Echo>,
}

#[derive(serde::Deserialize)]
struct Echo {
    tab: usize,
    seq: u64,
}

pub(crate) type Sender =
    hyper::client::conn::http1::SendRequest<http_body_util::Full<bytes::Bytes>>;

/// One HTTP/1.1 keep-alive connection, driven by its own task: the cheapest client there is,
/// so the generator spends its core on load, not on client machinery.
async fn connect(server: SocketAddr) -> anyhow::Result<Sender> {
    let tcp = tokio::net::TcpStream::connect(server).await?;
    tcp.set_nodelay(true)?;
    let (sender, conn) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(tcp)).await?;
    tokio::spawn(conn);
    Ok(sender)
}

/// One `POST /api/voice-agent/tool-call` on `sender`: the status and the whole body, or what
/// failed ("transport", "body", "timeout" when nothing came within `within`).
pub(crate) async fn post_tool_call(
    sender: &mut Sender,
    auth: &str,
    body: String,
    within: Duration,
) -> Result<(u16, bytes::Bytes), String> {
    sender.ready().await.map_err(|_| "transport".to_owned())?;
    let request = hyper::Request::post("/api/voice-agent/tool-call")
        .header("host", "relay")
        .header("authorization", auth)
        .header("content-type", "application/json")
        .body(http_body_util::Full::new(bytes::Bytes::from(body)))
        .map_err(|_| "request".to_owned())?;
    let response = tokio::time::timeout(within, sender.send_request(request))
        .await
        .map_err(|_| "timeout".to_owned())?
        .map_err(|_| "transport".to_owned())?;
    let status = response.status().as_u16();
    let bytes = http_body_util::BodyExt::collect(response.into_body())
        .await
        .map_err(|_| "body".to_owned())?
        .to_bytes();
    Ok((status, bytes))
}

pub async fn agent(config: AgentConfig) -> AgentResult {
    let AgentConfig {
        server,
        keys,
        awaited,
        interval,
        offset,
        warmup_end,
        end,
        sent_fire,
        seed,
    } = config;
    let new_histogram =
        || Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).expect("histogram bounds");
    let (mut histogram, mut from_schedule) = (new_histogram(), new_histogram());
    let mut errors = BTreeMap::new();
    let (mut calls, mut wrong_answer) = (0u64, 0u64);
    let mut rng = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    let mut next = Instant::now() + offset;
    let mut seq = 0u64;
    let mut sender: Option<Sender> = None;
    loop {
        let scheduled = match interval {
            Some(i) => {
                tokio::time::sleep_until(next).await;
                let s = next;
                next += i;
                s
            }
            None => Instant::now(),
        };
        if scheduled >= end {
            break;
        }
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        let (tab, key, auth) = &keys[(rng % keys.len() as u64) as usize];
        let tab = *tab;
        seq += 1;
        let body = format!(
            "{{\"apiKey\":\"{key}\",\"toolName\":\"echo\",\"params\":{{\"tab\":{tab},\"seq\":{seq}}},\"awaitResult\":{awaited},\"timeoutMs\":10000}}"
        );
        let sent_at = Instant::now();
        let outcome: Result<bytes::Bytes, String> = async {
            if sender.as_ref().is_none_or(|s| s.is_closed()) {
                sender = Some(connect(server).await.map_err(|_| "connect".to_owned())?);
            }
            let s = sender.as_mut().ok_or("connect")?;
            let (status, bytes) = post_tool_call(s, auth, body, Duration::from_secs(30)).await?;
            if status == 200 {
                Ok(bytes)
            } else {
                Err(format!("http_{status}"))
            }
        }
        .await;
        let took = sent_at.elapsed();
        let measured = scheduled >= warmup_end;
        match outcome {
            Ok(bytes) => {
                if !awaited {
                    sent_fire[tab].fetch_add(1, Ordering::Relaxed);
                } else {
                    let ok = serde_json::from_slice::<Answer>(&bytes)
                        .ok()
                        .and_then(|a| a.result)
                        .is_some_and(|r| r.tab == tab && r.seq == seq);
                    if !ok && measured {
                        wrong_answer += 1;
                    }
                }
                if measured {
                    calls += 1;
                    let _ = histogram.record(took.as_micros().max(1) as u64);
                    let _ = from_schedule.record(scheduled.elapsed().as_micros().max(1) as u64);
                }
            }
            Err(kind) => {
                if !kind.starts_with("http_") {
                    sender = None;
                }
                if measured {
                    *errors.entry(kind).or_insert(0) += 1;
                }
            }
        }
    }
    AgentResult {
        histogram,
        from_schedule,
        calls,
        errors,
        wrong_answer,
    }
}

/// Sends each tab one fire-and-forget call whose params carry `bytes` bytes of padding, over
/// `agents` connections at once, and waits (up to 60 s) until every tab has received it. Returns
/// how many did.
pub async fn big_emit(
    server: SocketAddr,
    keys: &[Callee],
    (bytes, agents): (usize, usize),
    stats: &TabStats,
) -> anyhow::Result<u64> {
    let before = stats.events.load(Ordering::Relaxed);
    let pad = "x".repeat(bytes);
    let queue = Arc::new(std::sync::Mutex::new(keys.to_vec()));
    let mut senders = Vec::new();
    for _ in 0..agents.max(1) {
        let (queue, pad) = (queue.clone(), pad.clone());
        senders.push(tokio::spawn(async move {
            let mut sender: Option<Sender> = None;
            loop {
                let Some((tab, key, auth)) = queue.lock().ok().and_then(|mut q| q.pop()) else {
                    return Ok::<(), anyhow::Error>(());
                };
                let body = format!(
                    "{{\"apiKey\":\"{key}\",\"toolName\":\"echo\",\"params\":{{\"tab\":{tab},\"seq\":0,\"pad\":\"{pad}\"}},\"awaitResult\":false}}"
                );
                if sender.as_ref().is_none_or(|s| s.is_closed()) {
                    sender = Some(connect(server).await?);
                }
                let s = sender.as_mut().context("connection")?;
                s.ready().await?;
                let request = hyper::Request::post("/api/voice-agent/tool-call")
                    .header("host", "relay")
                    .header("authorization", &*auth)
                    .header("content-type", "application/json")
                    .body(http_body_util::Full::new(bytes::Bytes::from(body)))?;
                let response = s.send_request(request).await?;
                let status = response.status();
                http_body_util::BodyExt::collect(response.into_body()).await?;
                if !status.is_success() {
                    bail!("big emit to tab {tab}: HTTP {status}");
                }
            }
        }));
    }
    for s in senders {
        s.await??;
    }
    let want = keys.len() as u64;
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let got = stats.events.load(Ordering::Relaxed) - before;
        if got >= want || Instant::now() >= deadline {
            return Ok(got);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
