//! `Server-Timing` of a tool call's answer: where the call's time went, as the relay measured it
//! and the tab reported it. The relay writes it; the agent side reads it back.

/// A tool call's time, in milliseconds: `relay` (outside its last delivery: reading the request,
/// finding the tab, waiting for it), `delivery` (the last delivery without the tab's handler:
/// the network and the browser), `tab` (the handler, as the tab reported it). `delivery` is
/// absent when nothing was delivered, `tab` when the tab reported no time.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct ServerTiming {
    pub relay_ms: f64,
    pub delivery_ms: Option<f64>,
    pub tab_ms: Option<f64>,
}

impl ServerTiming {
    /// The header's value: `relay;dur=0.412, delivery;dur=1.031, tab;dur=12.500`. Digits are
    /// written by hand from whole microseconds: `core::fmt` on floats costs more than the rest
    /// of the header, and this is written on every call.
    pub fn header_value(&self) -> String {
        let mut out = String::with_capacity(64);
        push_metric(&mut out, "relay;dur=", self.relay_ms);
        if let Some(d) = self.delivery_ms {
            push_metric(&mut out, ", delivery;dur=", d);
        }
        if let Some(t) = self.tab_ms {
            push_metric(&mut out, ", tab;dur=", t);
        }
        out
    }

    /// Reads the metrics `relay`, `delivery` and `tab` of a `Server-Timing` value (others are
    /// skipped); `None` when it holds no `relay` duration.
    pub fn parse(value: &str) -> Option<ServerTiming> {
        let mut timing = ServerTiming::default();
        let mut relay = None;
        for metric in value.split(',') {
            let mut parts = metric.split(';').map(str::trim);
            let name = parts.next().unwrap_or_default();
            let dur = parts
                .filter_map(|p| p.strip_prefix("dur="))
                .find_map(|d| d.parse::<f64>().ok())
                .filter(|d| d.is_finite() && *d >= 0.0);
            match (name, dur) {
                ("relay", Some(d)) => relay = Some(d),
                ("delivery", d) => timing.delivery_ms = d,
                ("tab", d) => timing.tab_ms = d,
                _ => {}
            }
        }
        timing.relay_ms = relay?;
        Some(timing)
    }
}

/// `name` and `ms` with three decimals.
fn push_metric(out: &mut String, name: &str, ms: f64) {
    let us = (ms.max(0.0) * 1000.0).round() as u64;
    out.push_str(name);
    push_digits(out, us / 1000);
    out.push('.');
    let frac = us % 1000;
    out.push(char::from(b'0' + (frac / 100) as u8));
    out.push(char::from(b'0' + (frac / 10 % 10) as u8));
    out.push(char::from(b'0' + (frac % 10) as u8));
}

fn push_digits(out: &mut String, mut n: u64) {
    let mut digits = [0u8; 20];
    let mut i = digits.len();
    loop {
        i -= 1;
        digits[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    for d in &digits[i..] {
        out.push(char::from(*d));
    }
}
