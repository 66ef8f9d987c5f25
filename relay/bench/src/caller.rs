//! The rate-limited caller: awaited tool calls to random tabs at a fixed rate, each call on its
//! own task (a call that waits for a tab between sockets does not hold back the next ones),
//! spread over several nodes as a balancer would, over pooled keep-alive connections. Each
//! answer must echo the tab and the call it was meant for. Calls are counted in four groups:
//! before any tab was lost; after, to tabs never lost; to a lost tab before it was bound again
//! (in flight when it was lost, or sent while it was away); to a lost tab once bound again.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hdrhistogram::Histogram;
use serde::Serialize;
use tokio::time::Instant;

use crate::meters::Percentiles;
use crate::roam::Roam;

use crate::Callee;
use crate::agent::{Sender, post_tool_call};

/// Where and how fast to call.
pub struct CallPlan {
    pub targets: Vec<SocketAddr>,
    /// The tabs to call, each with its own agent's session token.
    pub keys: Arc<Vec<Callee>>,
    pub rate: f64,
    pub duration: Duration,
    /// The relay's timeout for each call (`timeoutMs`).
    pub timeout_ms: u64,
    /// Calls in flight at most (each holds a connection); a call due beyond it is skipped.
    pub max_in_flight: usize,
    /// When the lost-node scenario kills a node, from the start of the calls: calls sent after
    /// it count as `others` even if this generator lost no tab (it holds none of that node's).
    pub storm_after: Option<Duration>,
}

struct Group {
    histogram: Histogram<u64>,
    ok: u64,
    wrong_answer: u64,
    errors: BTreeMap<String, u64>,
}

impl Group {
    fn new() -> Self {
        Group {
            histogram: Histogram::new_with_bounds(1, 120_000_000, 3).expect("histogram bounds"),
            ok: 0,
            wrong_answer: 0,
            errors: BTreeMap::new(),
        }
    }
}

#[derive(Serialize)]
pub struct GroupReport {
    pub ok: u64,
    pub wrong_answer: u64,
    pub errors: BTreeMap<String, u64>,
    pub latency_us: Option<Percentiles>,
    /// The latencies recorded, `[µs, count]` (so that several generators' can be merged).
    pub hist: Vec<(u64, u64)>,
}

#[derive(Serialize)]
pub struct CallsReport {
    pub rate: f64,
    pub duration_s: f64,
    pub sent: u64,
    pub skipped: u64,
    /// Before any tab of this generator was lost (and before the node kill, when told of it).
    pub quiet: GroupReport,
    /// After the first loss (or the node kill), to tabs never lost.
    pub others: GroupReport,
    /// To a lost tab before it was bound again: in flight when it was lost, or sent while away.
    pub caught: GroupReport,
    /// To a lost tab after it was bound again.
    pub back: GroupReport,
}

fn report(g: Group) -> GroupReport {
    GroupReport {
        ok: g.ok,
        wrong_answer: g.wrong_answer,
        errors: g.errors,
        latency_us: (!g.histogram.is_empty()).then(|| Percentiles::of(&g.histogram)),
        hist: g
            .histogram
            .iter_recorded()
            .map(|v| (v.value_iterated_to(), v.count_at_value()))
            .collect(),
    }
}

async fn connect(server: SocketAddr) -> Result<Sender, String> {
    let tcp = tokio::net::TcpStream::connect(server)
        .await
        .map_err(|e| format!("connect: {}", e.kind()))?;
    let _ = tcp.set_nodelay(true);
    let (sender, conn) = hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(tcp))
        .await
        .map_err(|_| "handshake".to_owned())?;
    tokio::spawn(conn);
    Ok(sender)
}

#[derive(serde::Deserialize)]
struct Answer {
    result: Option<Echo>,
    error: Option<ErrorBody>,
}

#[derive(serde::Deserialize)]
struct Echo {
    tab: usize,
    seq: u64,
}

#[derive(serde::Deserialize)]
struct ErrorBody {
    code: String,
}

/// Runs the calls and waits for the last one.
pub async fn run(plan: CallPlan, roam: Arc<Roam>, seq: Arc<AtomicU64>) -> CallsReport {
    let groups = Arc::new(Mutex::new([
        Group::new(),
        Group::new(),
        Group::new(),
        Group::new(),
    ]));
    let pools: Arc<Vec<Mutex<Vec<Sender>>>> = Arc::new(
        plan.targets
            .iter()
            .map(|_| Mutex::new(Vec::new()))
            .collect(),
    );
    let slots = Arc::new(tokio::sync::Semaphore::new(plan.max_in_flight));
    let mut tick = tokio::time::interval(Duration::from_secs_f64(1.0 / plan.rate.max(0.001)));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    let started = Instant::now();
    let end = started + plan.duration;
    let mut rng: u64 = 0x9E37_79B9_7F4A_7C15 ^ u64::from(std::process::id());
    let (mut sent, mut skipped) = (0u64, 0u64);
    let mut tasks = tokio::task::JoinSet::new();
    loop {
        tick.tick().await;
        if Instant::now() >= end {
            break;
        }
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        let Ok(permit) = slots.clone().try_acquire_owned() else {
            skipped += 1;
            continue;
        };
        sent += 1;
        let (tab, key, auth) = plan.keys[(rng % plan.keys.len() as u64) as usize].clone();
        let node = (sent as usize) % plan.targets.len();
        let server = plan.targets[node];
        let n = seq.fetch_add(1, Ordering::Relaxed) + 1;
        let body = format!(
            "{{\"apiKey\":\"{key}\",\"toolName\":\"echo\",\"params\":{{\"tab\":{tab},\"seq\":{n}}},\"awaitResult\":true,\"timeoutMs\":{}}}",
            plan.timeout_ms
        );
        let (groups, pools, roam) = (groups.clone(), pools.clone(), roam.clone());
        let storm = roam.first_drop.load(Ordering::SeqCst) > 0
            || plan
                .storm_after
                .is_some_and(|after| started.elapsed() >= after);
        let flag = |v: &Vec<std::sync::atomic::AtomicBool>| {
            v.get(tab).is_some_and(|m| m.load(Ordering::SeqCst))
        };
        let back_at_start = flag(&roam.moved) && !flag(&roam.away_now);
        tasks.spawn(async move {
            let _permit = permit;
            let sent_at = Instant::now();
            let outcome = call(&pools[node], server, &auth, body).await;
            let took = sent_at.elapsed();
            let moved = roam
                .moved
                .get(tab)
                .is_some_and(|m| m.load(Ordering::SeqCst));
            let mut all = groups.lock().unwrap_or_else(|e| e.into_inner());
            let g = &mut all[if back_at_start {
                3
            } else if moved {
                2
            } else if storm {
                1
            } else {
                0
            }];
            match outcome {
                Ok(bytes) => {
                    let answer = serde_json::from_slice::<Answer>(&bytes).ok();
                    match answer {
                        Some(Answer {
                            result: Some(r), ..
                        }) if r.tab == tab && r.seq == n => {
                            g.ok += 1;
                            let _ = g.histogram.record(took.as_micros().max(1) as u64);
                        }
                        _ => g.wrong_answer += 1,
                    }
                }
                Err(kind) => *g.errors.entry(kind).or_insert(0) += 1,
            }
        });
    }
    while tasks.join_next().await.is_some() {}
    let duration_s = (started.elapsed().as_secs_f64() * 100.0).round() / 100.0;
    let [quiet, others, caught, back] = std::mem::replace(
        &mut *groups.lock().unwrap_or_else(|e| e.into_inner()),
        [Group::new(), Group::new(), Group::new(), Group::new()],
    );
    CallsReport {
        rate: plan.rate,
        duration_s,
        sent,
        skipped,
        quiet: report(quiet),
        others: report(others),
        caught: report(caught),
        back: report(back),
    }
}

/// One call over a pooled connection to `server`: the body of a 200, or what failed (`http_<status>_<code>`).
async fn call(
    pool: &Mutex<Vec<Sender>>,
    server: SocketAddr,
    auth: &str,
    body: String,
) -> Result<bytes::Bytes, String> {
    let idle = pool.lock().unwrap_or_else(|e| e.into_inner()).pop();
    let mut sender = match idle {
        Some(s) if !s.is_closed() => s,
        _ => connect(server).await?,
    };
    let (status, bytes) = post_tool_call(&mut sender, auth, body, Duration::from_secs(130)).await?;
    pool.lock().unwrap_or_else(|e| e.into_inner()).push(sender);
    if status == 200 {
        return Ok(bytes);
    }
    let code = serde_json::from_slice::<Answer>(&bytes)
        .ok()
        .and_then(|a| a.error)
        .map_or_else(|| "?".to_owned(), |e| e.code);
    Err(format!("http_{status}_{code}"))
}
