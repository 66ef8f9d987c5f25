//! Which browser pages may use the relay: its own origin (the demo page it serves) always, and
//! the origins `RELAY_ALLOWED_ORIGINS` lists (or any, with `*`). A refused origin is logged, so
//! an operator whose page cannot connect sees why; the lines are bounded (a hostile client may
//! send any `Origin`), and an origin holds no secret.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use axum::http::{HeaderMap, HeaderValue, header};

/// Refused origins logged per [`LOG_WINDOW`] at most; the rest are counted and told with the
/// next line.
const LOG_BUDGET: u32 = 10;
const LOG_WINDOW: Duration = Duration::from_secs(60);
/// Longest origin written to the log.
const LOG_ORIGIN_MAX: usize = 200;

/// The allowed origins and the budget of log lines for refused ones.
pub struct Origins {
    /// `RELAY_ALLOWED_ORIGINS`, without trailing slashes; `*` allows any.
    listed: Vec<String>,
    log: Mutex<LogWindow>,
}

struct LogWindow {
    started: Instant,
    written: u32,
    suppressed: u64,
}

impl Origins {
    pub fn new(listed: &[String]) -> Self {
        Origins {
            listed: listed
                .iter()
                .map(|o| o.trim_end_matches('/').to_owned())
                .collect(),
            log: Mutex::new(LogWindow {
                started: Instant::now(),
                written: 0,
                suppressed: 0,
            }),
        }
    }

    /// Whether a browser page on `origin` may open a socket or read an answer: the relay's own
    /// origin (`host`, the request's `Host`), or one `RELAY_ALLOWED_ORIGINS` lists.
    pub fn allowed(&self, origin: &str, host: Option<&HeaderValue>) -> bool {
        let origin = origin.trim_end_matches('/');
        let host = host.and_then(|h| h.to_str().ok()).unwrap_or_default();
        let bare = origin
            .strip_prefix("http://")
            .or_else(|| origin.strip_prefix("https://"))
            .unwrap_or(origin);
        if !host.is_empty() && bare.eq_ignore_ascii_case(host) {
            return true;
        }
        self.listed
            .iter()
            .any(|o| o == "*" || o.eq_ignore_ascii_case(origin))
    }

    /// Logs a request whose `Origin` is not allowed (`what`: what it asked for), within the
    /// budget. Requests without `Origin` are not browsers' and pass unnoticed.
    pub fn note(&self, headers: &HeaderMap, what: &str) {
        let Some(origin) = headers.get(header::ORIGIN) else {
            return;
        };
        if self.allowed(
            origin.to_str().unwrap_or_default(),
            headers.get(header::HOST),
        ) {
            return;
        }
        self.refused(origin, what);
    }

    /// Logs that a page on `origin` was refused, within the budget.
    pub fn refused(&self, origin: &HeaderValue, what: &str) {
        let suppressed = {
            let mut log = self.log.lock().unwrap_or_else(|p| p.into_inner());
            if log.started.elapsed() >= LOG_WINDOW {
                log.started = Instant::now();
                log.written = 0;
            }
            if log.written >= LOG_BUDGET {
                log.suppressed += 1;
                return;
            }
            log.written += 1;
            std::mem::take(&mut log.suppressed)
        };
        let origin: String = String::from_utf8_lossy(origin.as_bytes())
            .chars()
            .take(LOG_ORIGIN_MAX)
            .collect();
        let listed = if self.listed.is_empty() {
            "unset: only the relay's own origin".to_owned()
        } else {
            self.listed.join(",")
        };
        tracing::warn!(
            %origin,
            request = what,
            allowed = %listed,
            more_refused = suppressed,
            "a page on an origin RELAY_ALLOWED_ORIGINS does not list was refused"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host(h: &str) -> HeaderValue {
        HeaderValue::from_str(h).unwrap()
    }

    #[test]
    fn the_relays_own_origin_stays_allowed_beside_the_list() {
        let none = Origins::new(&[]);
        assert!(none.allowed("http://127.0.0.1:3001", Some(&host("127.0.0.1:3001"))));
        assert!(!none.allowed("http://127.0.0.1:5173", Some(&host("127.0.0.1:3001"))));
        assert!(!none.allowed("http://127.0.0.1:3001", None));
        let listed = Origins::new(&["http://localhost:5173/".into()]);
        assert!(listed.allowed("http://localhost:5173", Some(&host("127.0.0.1:3001"))));
        assert!(
            listed.allowed("http://127.0.0.1:3001", Some(&host("127.0.0.1:3001"))),
            "setting the list keeps the relay's own page working"
        );
        assert!(!listed.allowed("https://evil.example", Some(&host("127.0.0.1:3001"))));
        let any = Origins::new(&["*".into()]);
        assert!(any.allowed("https://anything.example", None));
    }

    #[test]
    fn refused_origins_are_logged_within_a_budget() {
        let origins = Origins::new(&[]);
        for _ in 0..(LOG_BUDGET + 5) {
            origins.refused(&host("https://page.example"), "GET /token");
        }
        let log = origins.log.lock().unwrap();
        assert_eq!(log.written, LOG_BUDGET);
        assert_eq!(log.suppressed, 5);
    }
}
