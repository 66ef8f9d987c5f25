//! What the generator measures of a process and of the machine, from /proc: CPU ticks,
//! context switches, resident memory, and latency percentiles.

use hdrhistogram::Histogram;
use serde::Serialize;
use tokio::time::Instant;

/// Clock ticks (utime + stime) of a process, from /proc.
pub fn cpu_ticks(pid: Option<u32>) -> Option<u64> {
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
pub fn ctx_switches(pid: u32) -> Option<u64> {
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
pub fn rss_kib(pid: u32) -> Option<u64> {
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
pub fn machine_busy_ticks() -> Option<u64> {
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

pub struct CpuMeter {
    server: Option<u32>,
    started: Instant,
    server_ticks: Option<u64>,
    own_ticks: Option<u64>,
    machine_ticks: Option<u64>,
    pub server_switches: Option<u64>,
}

/// CPU spent over a measured interval.
pub struct CpuSpent {
    /// Server CPU in % of one core.
    pub server_pct: Option<f64>,
    /// The generator's own CPU in % of one core.
    pub own_pct: Option<f64>,
    /// Server CPU time in µs.
    pub server_us: Option<f64>,
    /// What other processes used meanwhile, in % of one core (CPU figures taken while this is
    /// high are not comparable).
    pub other_pct: Option<f64>,
    /// The server's context switches.
    pub server_switches: Option<u64>,
}

impl CpuMeter {
    pub fn start(server: Option<u32>) -> Self {
        CpuMeter {
            server,
            started: Instant::now(),
            server_ticks: server.and_then(|p| cpu_ticks(Some(p))),
            own_ticks: cpu_ticks(None),
            machine_ticks: machine_busy_ticks(),
            server_switches: server.and_then(ctx_switches),
        }
    }

    pub fn stop(&self) -> CpuSpent {
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

/// Latency percentiles of a histogram, in µs.
#[derive(Serialize)]
pub struct Percentiles {
    p50: u64,
    p90: u64,
    p99: u64,
    p999: u64,
    max: u64,
    mean: f64,
}

impl Percentiles {
    pub fn of(h: &Histogram<u64>) -> Percentiles {
        Percentiles {
            p50: h.value_at_quantile(0.50),
            p90: h.value_at_quantile(0.90),
            p99: h.value_at_quantile(0.99),
            p999: h.value_at_quantile(0.999),
            max: h.max(),
            mean: (h.mean() * 10.0).round() / 10.0,
        }
    }
}
