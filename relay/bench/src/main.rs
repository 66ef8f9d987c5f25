//! `loadgen`: opens N tabs (Socket.IO clients that bind a key and answer tool events at once)
//! and drives tool calls over HTTP from C concurrent agents, fire-and-forget or awaited, closed
//! loop (as fast as answers come) or at a fixed rate (latency measured from each call's
//! scheduled time, so a slow server cannot hide its queueing). It checks that every call reached
//! the tab it was addressed to, and reports throughput, latency percentiles, errors, and the
//! CPU and memory of the server and of itself. One JSON line on stdout.
//!
//! With `--big-emit-bytes N` it also sends one fire-and-forget call carrying N bytes of params to
//! every tab once the tabs are bound, and reports the server's resident memory per tab after all
//! of them received it: whether a socket gives back what a large message made it grow.

mod tab;

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use anyhow::{Context, bail};
use clap::Parser;
use hdrhistogram::Histogram;
use serde_json::{Value, json};
use tokio::time::Instant;

use crate::tab::{Bind, Headers, TabStats};

#[derive(Parser, Clone)]
#[command(name = "loadgen", about = "Load generator for the voice-agent relay")]
struct Args {
    /// Server base URL.
    #[arg(long, default_value = "http://127.0.0.1:3001")]
    url: String,
    /// Agent secret (Bearer).
    #[arg(long, env = "RELAY_AGENT_SECRET", hide_env_values = true)]
    secret: String,
    /// Label for the report.
    #[arg(long, default_value = "relay")]
    label: String,
    /// Tabs to open.
    #[arg(long, default_value_t = 100)]
    tabs: usize,
    /// Concurrent agents (HTTP connections); 0 only opens tabs (idle measurement).
    #[arg(long, default_value_t = 32)]
    agents: usize,
    /// Await each call's answer.
    #[arg(long)]
    awaited: bool,
    /// Measured seconds (after the warm-up).
    #[arg(long, default_value_t = 10.0)]
    duration_secs: f64,
    /// Seconds of calls before the measured ones.
    #[arg(long, default_value_t = 1.0)]
    warmup_secs: f64,
    /// Calls per second across all agents; unset means closed loop.
    #[arg(long)]
    rate: Option<f64>,
    /// How tabs bind: `token` (handshake auth) or `register` (bare key event).
    #[arg(long, default_value = "token")]
    bind: String,
    /// Server process to measure (RSS, CPU).
    #[arg(long)]
    server_pid: Option<u32>,
    /// Seconds to hold idle tabs before measuring memory.
    #[arg(long, default_value_t = 2.0)]
    settle_secs: f64,
    /// Where agents post their calls, when not to `--url` (tabs on one relay node, calls to
    /// another: the several-node path).
    #[arg(long)]
    call_url: Option<String>,
    /// Tabs connecting at once.
    #[arg(long, default_value_t = 200)]
    connect_concurrency: usize,
    /// Request headers of each tab's handshake: `browser` (what Chromium sends, with a 200-byte
    /// cookie) or `plain` (host and the upgrade headers only).
    #[arg(long, default_value = "browser")]
    headers: String,
    /// After binding, send every tab one fire-and-forget call with this many bytes of params
    /// and measure the server's memory again once all arrived (0: no such call).
    #[arg(long, default_value_t = 0)]
    big_emit_bytes: usize,
    /// After binding, each tab declares it handles this many tools (`voice-agent:handles`),
    /// as the browser client does (0: tabs never declare).
    #[arg(long, default_value_t = 0)]
    handles: usize,
}

/// Tabs per loopback source address: each (source, destination) pair has ~28k ephemeral ports.
const TABS_PER_SOURCE_IP: usize = 20_000;

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()?;
    let report = rt.block_on(run(args))?;
    println!("{report}");
    Ok(())
}

/// Clock ticks (utime + stime) of a process, from /proc.
fn cpu_ticks(pid: Option<u32>) -> Option<u64> {
    let path = pid.map_or_else(
        || "/proc/self/stat".to_owned(),
        |p| format!("/proc/{p}/stat"),
    );
    let stat = std::fs::read_to_string(path).ok()?;
    let after = stat.rsplit_once(')')?.1;
    let fields: Vec<&str> = after.split_whitespace().collect();
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some(utime + stime)
}

/// Context switches (voluntary and involuntary) of a process's live threads, from /proc: how often
/// the server went to sleep (or was preempted), which at low load is what a call costs most.
fn ctx_switches(pid: u32) -> Option<u64> {
    let mut total = 0;
    for task in std::fs::read_dir(format!("/proc/{pid}/task")).ok()? {
        let Ok(status) = std::fs::read_to_string(task.ok()?.path().join("status")) else {
            continue; // a thread that ended meanwhile
        };
        total += status
            .lines()
            .filter(|l| l.contains("ctxt_switches:"))
            .filter_map(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
            .sum::<u64>();
    }
    Some(total)
}

/// Resident memory of a process in KiB.
fn rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

/// Linux reports CPU time in 1/100 s ticks.
const TICKS_PER_SEC: f64 = 100.0;

/// Busy clock ticks of the whole machine (all cores), from /proc/stat.
fn machine_busy_ticks() -> Option<u64> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let fields: Vec<u64> = stat
        .lines()
        .next()?
        .split_whitespace()
        .skip(1)
        .take(8)
        .map(|f| f.parse().unwrap_or(0))
        .collect();
    let idle = fields.get(3)? + fields.get(4)?;
    Some(fields.iter().sum::<u64>() - idle)
}

struct CpuMeter {
    server: Option<u32>,
    started: Instant,
    server_ticks: Option<u64>,
    own_ticks: Option<u64>,
    machine_ticks: Option<u64>,
    server_switches: Option<u64>,
}

/// CPU spent over a measured interval.
struct CpuSpent {
    /// Server CPU in % of one core.
    server_pct: Option<f64>,
    /// The generator's own CPU in % of one core.
    own_pct: Option<f64>,
    /// Server CPU time in µs.
    server_us: Option<f64>,
    /// What other processes used meanwhile, in % of one core (CPU figures taken while this is
    /// high are not comparable).
    other_pct: Option<f64>,
    /// The server's context switches.
    server_switches: Option<u64>,
}

impl CpuMeter {
    fn start(server: Option<u32>) -> Self {
        CpuMeter {
            server,
            started: Instant::now(),
            server_ticks: server.and_then(|p| cpu_ticks(Some(p))),
            own_ticks: cpu_ticks(None),
            machine_ticks: machine_busy_ticks(),
            server_switches: server.and_then(ctx_switches),
        }
    }

    fn stop(&self) -> CpuSpent {
        let secs = self.started.elapsed().as_secs_f64().max(1e-6);
        let spent = |before: Option<u64>, now: Option<u64>| Some((now? - before?) as f64);
        let server = spent(
            self.server_ticks,
            self.server.and_then(|p| cpu_ticks(Some(p))),
        );
        let own = spent(self.own_ticks, cpu_ticks(None));
        let machine = spent(self.machine_ticks, machine_busy_ticks());
        let pct = |ticks: Option<f64>| ticks.map(|t| t / TICKS_PER_SEC / secs * 100.0);
        let other = match (machine, server, own) {
            (Some(m), Some(s), Some(o)) => Some((m - s - o).max(0.0)),
            _ => None,
        };
        CpuSpent {
            server_pct: pct(server),
            own_pct: pct(own),
            server_us: server.map(|t| t / TICKS_PER_SEC * 1e6),
            other_pct: pct(other),
            server_switches: match (self.server_switches, self.server.and_then(ctx_switches)) {
                (Some(before), Some(now)) => Some(now.saturating_sub(before)),
                _ => None,
            },
        }
    }
}

struct Minted {
    key: String,
    token: String,
}

async fn mint(http: &reqwest::Client, url: &str, n: usize) -> anyhow::Result<Vec<Minted>> {
    let sem = Arc::new(tokio::sync::Semaphore::new(64));
    let mut tasks = Vec::with_capacity(n);
    for _ in 0..n {
        let http = http.clone();
        let url = format!("{url}/token");
        let permit = sem.clone().acquire_owned().await?;
        tasks.push(tokio::spawn(async move {
            let _permit = permit;
            let body: Value = http
                .post(url)
                .send()
                .await?
                .error_for_status()?
                .json()
                .await?;
            Ok::<_, anyhow::Error>(Minted {
                key: body["apiKey"].as_str().unwrap_or_default().to_owned(),
                token: body["token"].as_str().unwrap_or_default().to_owned(),
            })
        }));
    }
    let mut out = Vec::with_capacity(n);
    for t in tasks {
        out.push(t.await??);
    }
    Ok(out)
}

fn percentiles(h: &Histogram<u64>) -> Value {
    json!({
        "p50": h.value_at_quantile(0.50),
        "p90": h.value_at_quantile(0.90),
        "p99": h.value_at_quantile(0.99),
        "p999": h.value_at_quantile(0.999),
        "max": h.max(),
        "mean": (h.mean() * 10.0).round() / 10.0,
    })
}

struct AgentResult {
    histogram: Histogram<u64>,
    /// Latency counted from each call's scheduled time (open loop only).
    from_schedule: Histogram<u64>,
    calls: u64,
    errors: BTreeMap<String, u64>,
    wrong_answer: u64,
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

type Sender = hyper::client::conn::http1::SendRequest<http_body_util::Full<bytes::Bytes>>;

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

#[allow(clippy::too_many_arguments)]
async fn agent(
    server: SocketAddr,
    secret: String,
    keys: Arc<Vec<(usize, String)>>,
    awaited: bool,
    interval: Option<Duration>,
    offset: Duration,
    warmup_end: Instant,
    end: Instant,
    sent_fire: Arc<Vec<AtomicU64>>,
    seed: u64,
) -> AgentResult {
    let new_histogram =
        || Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).expect("histogram bounds");
    let (mut histogram, mut from_schedule) = (new_histogram(), new_histogram());
    let mut errors = BTreeMap::new();
    let (mut calls, mut wrong_answer) = (0u64, 0u64);
    let mut rng = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    let mut next = Instant::now() + offset;
    let auth = format!("Bearer {secret}");
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
        let (tab, key) = &keys[(rng % keys.len() as u64) as usize];
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
            s.ready().await.map_err(|_| "transport".to_owned())?;
            let request = hyper::Request::post("/api/voice-agent/tool-call")
                .header("host", "relay")
                .header("authorization", &auth)
                .header("content-type", "application/json")
                .body(http_body_util::Full::new(bytes::Bytes::from(body)))
                .map_err(|_| "request".to_owned())?;
            let response = tokio::time::timeout(Duration::from_secs(30), s.send_request(request))
                .await
                .map_err(|_| "timeout".to_owned())?
                .map_err(|_| "transport".to_owned())?;
            let status = response.status().as_u16();
            let bytes = http_body_util::BodyExt::collect(response.into_body())
                .await
                .map_err(|_| "body".to_owned())?
                .to_bytes();
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

/// Sends each tab one fire-and-forget call whose params carry `bytes` bytes of padding, over 32
/// connections, and waits (up to 60 s) until every tab has received it. Returns how many did.
async fn big_emit(
    server: SocketAddr,
    secret: &str,
    keys: &[(usize, String)],
    bytes: usize,
    stats: &TabStats,
) -> anyhow::Result<u64> {
    let before = stats.events.load(Ordering::Relaxed);
    let pad = "x".repeat(bytes);
    let auth = format!("Bearer {secret}");
    let queue = Arc::new(std::sync::Mutex::new(keys.to_vec()));
    let mut senders = Vec::new();
    for _ in 0..32 {
        let (queue, pad, auth) = (queue.clone(), pad.clone(), auth.clone());
        senders.push(tokio::spawn(async move {
            let mut sender: Option<Sender> = None;
            loop {
                let Some((tab, key)) = queue.lock().ok().and_then(|mut q| q.pop()) else {
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
                    .header("authorization", &auth)
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

async fn resolve(url: &str) -> anyhow::Result<SocketAddr> {
    let host = url
        .strip_prefix("http://")
        .context("only http:// URLs")?
        .trim_end_matches('/');
    tokio::net::lookup_host(host)
        .await?
        .next()
        .context("server address")
}

async fn run(args: Args) -> anyhow::Result<Value> {
    let server = resolve(&args.url).await?;
    let call_server = match &args.call_url {
        Some(url) => resolve(url).await?,
        None => server,
    };
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(args.agents.max(64))
        .timeout(Duration::from_secs(30))
        .tcp_nodelay(true)
        .build()?;

    // Tokens first (not measured), then the tabs.
    let minted = mint(&http, &args.url, args.tabs)
        .await
        .context("minting tokens")?;
    let rss_before = args.server_pid.and_then(rss_kib);
    let stats = Arc::new(TabStats::new(args.tabs));
    let bind_started = Instant::now();
    let sem = Arc::new(tokio::sync::Semaphore::new(args.connect_concurrency));
    let mut waiters = Vec::with_capacity(args.tabs);
    let headers = match args.headers.as_str() {
        "plain" => Headers::Plain,
        "browser" => Headers::Browser,
        other => bail!("--headers {other}: expected browser or plain"),
    };
    let setup = tab::TabSetup {
        headers,
        declaration: (args.handles > 0).then(|| {
            let tools: Vec<String> = (0..args.handles).map(|i| format!("tool_{i}")).collect();
            serde_json::json!({ "tools": tools }).to_string().into()
        }),
    };
    for (i, m) in minted.iter().enumerate() {
        let bind = match args.bind.as_str() {
            "register" => Bind::Register(m.key.clone()),
            _ => Bind::Token(m.token.clone()),
        };
        let source = (server.ip().is_loopback() && args.tabs > TABS_PER_SOURCE_IP)
            .then(|| IpAddr::V4(Ipv4Addr::new(127, 0, 0, 1 + (i / TABS_PER_SOURCE_IP) as u8)));
        let (tx, rx) = tokio::sync::oneshot::channel();
        let permit = sem.clone().acquire_owned().await?;
        let stats = stats.clone();
        tokio::spawn(tab::run(server, source, i, bind, setup.clone(), stats, tx));
        waiters.push(tokio::spawn(async move {
            let r = rx.await.unwrap_or(Err("tab ended".into()));
            drop(permit);
            r
        }));
    }
    let mut bind_failures = 0usize;
    let mut first_failure = None;
    let mut bound = vec![false; args.tabs];
    for (i, w) in waiters.into_iter().enumerate() {
        match w.await? {
            Ok(()) => bound[i] = true,
            Err(e) => {
                bind_failures += 1;
                first_failure.get_or_insert(e);
            }
        }
    }
    let bind_ms = bind_started.elapsed().as_secs_f64() * 1000.0;
    if bind_failures == args.tabs && args.tabs > 0 {
        bail!("no tab could bind: {}", first_failure.unwrap_or_default());
    }
    tokio::time::sleep(Duration::from_secs_f64(args.settle_secs)).await;
    let rss_after = args.server_pid.and_then(rss_kib);

    let mut report = json!({
        "label": args.label,
        "tabs": args.tabs,
        "bind": args.bind,
        "bind_failures": bind_failures,
        "bind_ms": bind_ms.round(),
        "server_rss_kib_before_tabs": rss_before,
        "server_rss_kib_with_tabs": rss_after,
        "rss_bytes_per_tab": match (rss_before, rss_after) {
            (Some(b), Some(a)) if args.tabs > 0 => Some(((a.saturating_sub(b)) * 1024) as f64 / args.tabs as f64),
            _ => None,
        },
    });
    report["headers"] = json!(args.headers);
    if let Some(e) = first_failure {
        report["first_bind_failure"] = json!(e);
    }
    if args.big_emit_bytes > 0 {
        let bound_keys: Vec<(usize, String)> = minted
            .iter()
            .enumerate()
            .filter(|(i, _)| bound[*i])
            .map(|(i, m)| (i, m.key.clone()))
            .collect();
        let started = Instant::now();
        let delivered = big_emit(
            call_server,
            &args.secret,
            &bound_keys,
            args.big_emit_bytes,
            &stats,
        )
        .await?;
        report["big_emit_bytes"] = json!(args.big_emit_bytes);
        report["big_emit_delivered"] = json!(delivered);
        report["big_emit_ms"] = json!((started.elapsed().as_secs_f64() * 1000.0).round());
        tokio::time::sleep(Duration::from_secs_f64(args.settle_secs)).await;
        let rss_emit = args.server_pid.and_then(rss_kib);
        report["server_rss_kib_after_big_emit"] = json!(rss_emit);
        report["rss_bytes_per_tab_after_big_emit"] = json!(match (rss_before, rss_emit) {
            (Some(b), Some(a)) if args.tabs > 0 =>
                Some(((a.saturating_sub(b)) * 1024) as f64 / args.tabs as f64),
            _ => None,
        });
    }
    if args.agents == 0 {
        return Ok(report);
    }

    // Calls go only to tabs that bound (a failed tab is reported above, not called).
    let keys: Arc<Vec<(usize, String)>> = Arc::new(
        minted
            .into_iter()
            .enumerate()
            .filter(|(i, _)| bound[*i])
            .map(|(i, m)| (i, m.key))
            .collect(),
    );
    // Counted from what the tabs already received (the big emit), so lost and duplicated
    // calls compare only this phase.
    let sent_fire: Arc<Vec<AtomicU64>> = Arc::new(
        stats
            .per_tab_fire
            .iter()
            .map(|c| AtomicU64::new(c.load(Ordering::Relaxed)))
            .collect(),
    );
    let start = Instant::now();
    let warmup_end = start + Duration::from_secs_f64(args.warmup_secs);
    let end = warmup_end + Duration::from_secs_f64(args.duration_secs);
    let interval = args
        .rate
        .map(|r| Duration::from_secs_f64(args.agents as f64 / r.max(0.001)));
    let mut tasks = Vec::with_capacity(args.agents);
    for a in 0..args.agents {
        let offset = interval.map_or(Duration::ZERO, |i| i.mul_f64(a as f64 / args.agents as f64));
        tasks.push(tokio::spawn(agent(
            call_server,
            args.secret.clone(),
            keys.clone(),
            args.awaited,
            interval,
            offset,
            warmup_end,
            end,
            sent_fire.clone(),
            a as u64 + 1,
        )));
    }
    tokio::time::sleep_until(warmup_end).await;
    let cpu = CpuMeter::start(args.server_pid);
    let mut histogram = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3)?;
    let mut from_schedule = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3)?;
    let (mut calls, mut wrong_answer) = (0u64, 0u64);
    let mut errors: BTreeMap<String, u64> = BTreeMap::new();
    for t in tasks {
        let r = t.await?;
        histogram.add(&r.histogram)?;
        from_schedule.add(&r.from_schedule)?;
        calls += r.calls;
        wrong_answer += r.wrong_answer;
        for (k, v) in r.errors {
            *errors.entry(k).or_insert(0) += v;
        }
    }
    let CpuSpent {
        server_pct: server_cpu,
        own_pct: own_cpu,
        server_us,
        other_pct,
        server_switches,
    } = cpu.stop();
    let measured = Instant::now().duration_since(warmup_end).as_secs_f64();

    // Fire-and-forget: give in-flight events a moment, then compare per tab.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut lost = 0u64;
    let mut extra = 0u64;
    for (sent, got) in sent_fire.iter().zip(stats.per_tab_fire.iter()) {
        let (s, g) = (sent.load(Ordering::Relaxed), got.load(Ordering::Relaxed));
        lost += s.saturating_sub(g);
        extra += g.saturating_sub(s);
    }
    report["agents"] = json!(args.agents);
    report["mode"] = json!(if args.awaited {
        "awaited"
    } else {
        "fire_and_forget"
    });
    report["rate"] = json!(args.rate);
    report["duration_s"] = json!((measured * 100.0).round() / 100.0);
    report["calls"] = json!(calls);
    report["throughput_per_s"] = json!((calls as f64 / measured).round());
    report["latency_us"] = percentiles(&histogram);
    if args.rate.is_some() {
        report["latency_from_schedule_us"] = percentiles(&from_schedule);
    }
    // Clock ticks are 10 ms: over a 10 s run at 500 calls/s that is a 0.2% resolution.
    report["server_cpu_us_per_call"] = json!(
        server_us
            .filter(|_| calls > 0)
            .map(|us| (us / calls as f64 * 10.0).round() / 10.0)
    );
    report["calls_per_server_core_s"] = json!(
        server_cpu
            .filter(|c| *c > 0.0)
            .map(|c| (calls as f64 / measured / (c / 100.0)).round())
    );
    report["server_ctx_switches_per_call"] = json!(
        server_switches
            .filter(|_| calls > 0)
            .map(|n| (n as f64 / calls as f64 * 100.0).round() / 100.0)
    );
    report["errors"] = json!(errors);
    report["misrouted"] = json!(stats.misrouted.load(Ordering::Relaxed) + wrong_answer);
    report["lost"] = json!(lost);
    report["duplicated"] = json!(extra);
    report["server_cpu_pct"] = json!(server_cpu.map(|c| c.round()));
    report["loadgen_cpu_pct"] = json!(own_cpu.map(|c| c.round()));
    report["other_cpu_pct"] = json!(other_pct.map(|c| c.round()));
    report["server_rss_kib_end"] = json!(args.server_pid.and_then(rss_kib));
    Ok(report)
}
