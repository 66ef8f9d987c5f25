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

mod agent;
mod args;
mod backoff;
mod caller;
mod meters;
mod report;
mod roam;
mod scale;
mod tab;

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use anyhow::{Context, bail};
use clap::Parser;
use hdrhistogram::Histogram;
use serde_json::Value;
use tokio::time::Instant;

use crate::agent::{AgentConfig, agent, big_emit};
use crate::args::{Args, TABS_PER_SOURCE_IP};
use crate::meters::{CpuMeter, CpuSpent, Percentiles, rss_kib};
use crate::report::{BigEmit, Calls, Report, per_tab};
use crate::tab::{Bind, Headers, TabStats};

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()?;
    if args.control {
        return rt.block_on(scale::run(args));
    }
    let report = rt.block_on(run(args))?;
    println!("{}", serde_json::to_string(&report)?);
    Ok(())
}

pub(crate) struct Minted {
    key: String,
    token: String,
    /// `Authorization` for calls to this tab: its own agent's session token.
    auth: Arc<str>,
}

/// A tab an agent may call: its index, its key, and the `Authorization` its calls carry.
pub(crate) type Callee = (usize, String, Arc<str>);

pub(crate) async fn mint(
    http: &reqwest::Client,
    url: &str,
    n: usize,
) -> anyhow::Result<Vec<Minted>> {
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
                auth: format!("Bearer {}", body["agentToken"].as_str().unwrap_or_default()).into(),
            })
        }));
    }
    let mut out = Vec::with_capacity(n);
    for t in tasks {
        out.push(t.await??);
    }
    Ok(out)
}

pub(crate) async fn resolve(url: &str) -> anyhow::Result<SocketAddr> {
    let host = url
        .strip_prefix("http://")
        .context("only http:// URLs")?
        .trim_end_matches('/');
    tokio::net::lookup_host(host)
        .await?
        .next()
        .context("server address")
}

async fn run(args: Args) -> anyhow::Result<Report> {
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

    let mut report = Report {
        label: args.label.clone(),
        tabs: args.tabs,
        bind: args.bind.clone(),
        bind_failures,
        bind_ms: bind_ms.round(),
        server_rss_kib_before_tabs: rss_before,
        server_rss_kib_with_tabs: rss_after,
        rss_bytes_per_tab: per_tab(rss_before, rss_after, args.tabs),
        headers: args.headers.clone(),
        first_bind_failure: first_failure,
        big_emit: None,
        calls: None,
    };
    if args.big_emit_bytes > 0 {
        let bound_keys: Vec<Callee> = minted
            .iter()
            .enumerate()
            .filter(|(i, _)| bound[*i])
            .map(|(i, m)| (i, m.key.clone(), m.auth.clone()))
            .collect();
        let started = Instant::now();
        let delivered = big_emit(
            call_server,
            &bound_keys,
            (args.big_emit_bytes, args.big_emit_agents),
            &stats,
        )
        .await?;
        let big_emit_ms = (started.elapsed().as_secs_f64() * 1000.0).round();
        tokio::time::sleep(Duration::from_secs_f64(args.settle_secs)).await;
        let rss_emit = args.server_pid.and_then(rss_kib);
        let later = if args.after_emit_secs > 0.0 {
            tokio::time::sleep(Duration::from_secs_f64(args.after_emit_secs)).await;
            per_tab(rss_before, args.server_pid.and_then(rss_kib), args.tabs)
        } else {
            None
        };
        report.big_emit = Some(BigEmit {
            big_emit_bytes: args.big_emit_bytes,
            big_emit_delivered: delivered,
            big_emit_ms,
            server_rss_kib_after_big_emit: rss_emit,
            rss_bytes_per_tab_after_big_emit: per_tab(rss_before, rss_emit, args.tabs),
            big_emit_agents: args.big_emit_agents,
            rss_bytes_per_tab_later: later,
            after_emit_secs: (args.after_emit_secs > 0.0).then_some(args.after_emit_secs),
        });
    }
    if args.agents == 0 {
        return Ok(report);
    }

    // Calls go only to tabs that bound (a failed tab is reported above, not called).
    let keys: Arc<Vec<Callee>> = Arc::new(
        minted
            .into_iter()
            .enumerate()
            .filter(|(i, _)| bound[*i])
            .map(|(i, m)| (i, m.key, m.auth))
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
        tasks.push(tokio::spawn(agent(AgentConfig {
            server: call_server,
            keys: keys.clone(),
            awaited: args.awaited,
            interval,
            offset,
            warmup_end,
            end,
            sent_fire: sent_fire.clone(),
            seed: a as u64 + 1,
        })));
    }
    tokio::time::sleep_until(warmup_end).await;
    if args.marks {
        eprintln!("loadgen: measuring");
    }
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
    if args.marks {
        eprintln!("loadgen: measured");
    }
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
    let round = |x: f64, places: f64| (x * places).round() / places;
    report.calls = Some(Calls {
        agents: args.agents,
        mode: if args.awaited {
            "awaited"
        } else {
            "fire_and_forget"
        },
        rate: args.rate,
        duration_s: round(measured, 100.0),
        calls,
        throughput_per_s: (calls as f64 / measured).round(),
        latency_us: Percentiles::of(&histogram),
        latency_from_schedule_us: args.rate.map(|_| Percentiles::of(&from_schedule)),
        // Clock ticks are 10 ms: over a 10 s run at 500 calls/s that is a 0.2% resolution.
        server_cpu_us_per_call: server_us
            .filter(|_| calls > 0)
            .map(|us| round(us / calls as f64, 10.0)),
        calls_per_server_core_s: server_cpu
            .filter(|c| *c > 0.0)
            .map(|c| (calls as f64 / measured / (c / 100.0)).round()),
        server_ctx_switches_per_call: server_switches
            .filter(|_| calls > 0)
            .map(|n| round(n as f64 / calls as f64, 100.0)),
        errors,
        misrouted: stats.misrouted.load(Ordering::Relaxed) + wrong_answer,
        lost,
        duplicated: extra,
        server_cpu_pct: server_cpu.map(f64::round),
        loadgen_cpu_pct: own_cpu.map(f64::round),
        other_cpu_pct: other_pct.map(f64::round),
        server_rss_kib_end: args.server_pid.and_then(rss_kib),
    });
    Ok(report)
}
