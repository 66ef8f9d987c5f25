//! Several-node mode (`--control`): one generator's share of a scale run across relay nodes on
//! one Redis, step by step as `scripts/bench/scale.mjs` commands it on stdin, so that several
//! generator processes bind at once, call at once and live through a lost node together. Each
//! step answers with one JSON line on stdout:
//!
//! - at start: mints one token per tab on the node the tab will bind on → `{"event":"minted"}`
//! - `bind`: opens and binds every tab (tabs of all nodes interleaved) → `{"event":"bound"}`
//!   with the Unix-ms times of the first connect and the last bind
//! - `calls SECS RATE`: the rate-limited caller ([`crate::caller`]) → `{"event":"calls"}`
//! - `roam SECS`: waits until no tab is away (at most SECS) → `{"event":"roam"}`
//! - `exit`
//!
//! Tabs come back when their connection ends ([`crate::roam`]).

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use anyhow::{Context, bail};
use serde_json::json;
use tokio::io::AsyncBufReadExt;

use crate::Callee;
use crate::args::Args;
use crate::caller::{self, CallPlan};
use crate::roam::{self, Roam, unix_ms};
use crate::tab::{Bind, Headers, TabSetup, TabStats};
use crate::{mint, resolve};

fn say(v: serde_json::Value) {
    println!("{v}");
}

async fn addrs(urls: &[String]) -> anyhow::Result<Vec<SocketAddr>> {
    let mut out = Vec::new();
    for u in urls {
        out.push(resolve(u).await?);
    }
    Ok(out)
}

pub async fn run(args: Args) -> anyhow::Result<()> {
    // The nodes and each one's share of the tabs.
    let mut nodes: Vec<(String, SocketAddr, usize)> = Vec::new();
    for n in &args.nodes {
        let (url, count) = n.rsplit_once('=').context("--nodes: expected url=count")?;
        let count: usize = count.parse().context("--nodes: count")?;
        nodes.push((url.to_owned(), resolve(url).await?, count));
    }
    if nodes.is_empty() {
        bail!("--control needs --nodes");
    }
    let node_urls: Vec<String> = nodes.iter().map(|n| n.0.clone()).collect();
    let call_targets = addrs(if args.call_nodes.is_empty() {
        &node_urls
    } else {
        &args.call_nodes
    })
    .await?;
    let reconnect = addrs(if args.reconnect_nodes.is_empty() {
        &node_urls
    } else {
        &args.reconnect_nodes
    })
    .await?;
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(64)
        .timeout(Duration::from_secs(30))
        .build()?;

    // Tabs of all nodes interleaved, so every node binds throughout the cold start.
    let mut plan: Vec<usize> = Vec::new();
    let total: usize = nodes.iter().map(|n| n.2).sum();
    let mut given = vec![0usize; nodes.len()];
    for _ in 0..total {
        // The node furthest behind its share at this point.
        let pick = (0..nodes.len())
            .filter(|&n| given[n] < nodes[n].2)
            .min_by(|&a, &b| {
                let lag = |n: usize| given[n] as f64 / nodes[n].2 as f64;
                lag(a).total_cmp(&lag(b))
            })
            .context("tab plan")?;
        given[pick] += 1;
        plan.push(pick);
    }
    let mut minted_by_node = Vec::new();
    for (url, _, count) in &nodes {
        minted_by_node.push(
            mint(&http, url, *count)
                .await
                .with_context(|| format!("minting on {url}"))?
                .into_iter(),
        );
    }
    let mut tabs = Vec::with_capacity(total);
    for &n in &plan {
        tabs.push((n, minted_by_node[n].next().context("minted")?));
    }
    say(json!({"event": "minted", "tabs": total}));

    let mut stats = TabStats::new(total);
    stats.seen = Some(Default::default());
    let stats = Arc::new(stats);
    let roam = Arc::new(Roam::new(total, reconnect));
    let setup = TabSetup {
        headers: Headers::Browser,
        declaration: None,
    };
    let seq = Arc::new(AtomicU64::new(0));
    let mut keys: Arc<Vec<Callee>> = Arc::new(Vec::new());
    let mut lines = tokio::io::BufReader::new(tokio::io::stdin()).lines();
    while let Some(line) = lines.next_line().await? {
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.as_slice() {
            ["bind"] => {
                let started = unix_ms();
                let sem = Arc::new(tokio::sync::Semaphore::new(args.connect_concurrency));
                let mut waiters = Vec::with_capacity(total);
                for (i, (n, m)) in tabs.iter().enumerate() {
                    let (tx, rx) = tokio::sync::oneshot::channel();
                    let permit = sem.clone().acquire_owned().await?;
                    tokio::spawn(roam::run(
                        nodes[*n].1,
                        args.source_ip,
                        i,
                        Bind::Token(m.token.clone()),
                        setup.clone(),
                        stats.clone(),
                        roam.clone(),
                        tx,
                    ));
                    let asked = tokio::time::Instant::now();
                    waiters.push(tokio::spawn(async move {
                        let r = rx.await.unwrap_or(Err("tab ended".into()));
                        drop(permit);
                        r.map(|()| asked.elapsed().as_millis() as u64)
                    }));
                }
                let (mut failures, mut first_failure) = (0usize, None);
                let mut bound = Vec::new();
                let mut took = Vec::with_capacity(total);
                for (i, w) in waiters.into_iter().enumerate() {
                    match w.await? {
                        Ok(ms) => {
                            took.push(ms);
                            bound.push((i, tabs[i].1.key.clone(), tabs[i].1.auth.clone()));
                        }
                        Err(e) => {
                            failures += 1;
                            first_failure.get_or_insert(e);
                        }
                    }
                }
                let ended = unix_ms();
                keys = Arc::new(bound);
                // How long each tab took from its connect to its bind.
                took.sort_unstable();
                let q = |p: f64| {
                    took.get(((took.len() as f64 * p) as usize).min(took.len().saturating_sub(1)))
                        .copied()
                };
                say(json!({
                    "event": "bound", "tabs": total, "bound": keys.len(), "failures": failures,
                    "first_failure": first_failure, "started_unix_ms": started,
                    "ended_unix_ms": ended, "bind_ms": ended - started,
                    "tab_bind_ms": {"p50": q(0.5), "p99": q(0.99), "max": took.last(),
                        "over_1s": took.iter().filter(|&&t| t > 1000).count()},
                }));
            }
            ["calls", secs, rate, rest @ ..] => {
                // `calls <secs> <rate> [<storm after secs>]`
                if keys.is_empty() {
                    bail!("calls before any tab bound");
                }
                let report = caller::run(
                    CallPlan {
                        targets: call_targets.clone(),
                        keys: keys.clone(),
                        rate: rate.parse()?,
                        duration: Duration::from_secs_f64(secs.parse()?),
                        timeout_ms: args.call_timeout_ms,
                        max_in_flight: args.max_in_flight,
                        storm_after: match rest {
                            [after] => Some(Duration::from_secs_f64(after.parse()?)),
                            _ => None,
                        },
                    },
                    roam.clone(),
                    seq.clone(),
                )
                .await;
                use std::sync::atomic::Ordering::Relaxed;
                say(json!({
                    "event": "calls", "calls": report,
                    "misrouted": stats.misrouted.load(Relaxed),
                    "duplicated": stats.duplicated.load(Relaxed),
                    "roam": roam.report(),
                }));
            }
            ["roam", secs] => {
                let until = tokio::time::Instant::now() + Duration::from_secs_f64(secs.parse()?);
                while roam.away.load(std::sync::atomic::Ordering::SeqCst) > 0
                    && tokio::time::Instant::now() < until
                {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                say(json!({"event": "roam", "roam": roam.report()}));
            }
            ["exit"] => break,
            _ => bail!("unknown command {line:?}"),
        }
    }
    Ok(())
}
