//! The browser client's reconnection policy, as socket.io-client's `Backoff` computes it with the
//! options `web/client/src/client.ts` passes (`reconnectionDelay: 250`, `reconnectionDelayMax: 3000`,
//! the default `randomizationFactor: 0.5`): the n-th attempt after a connection ends waits
//! `250 · 2ⁿ` ms, moved up or down by a random share of up to half of it, at most 3 s; a
//! successful connection starts over at n = 0.

/// Delays of one tab's reconnection attempts.
pub struct Backoff {
    attempts: u32,
    rng: u64,
}

/// `reconnectionDelay` of the browser client.
const MIN_MS: f64 = 250.0;
/// `reconnectionDelayMax` of the browser client.
const MAX_MS: f64 = 3000.0;
/// socket.io-client's default `randomizationFactor` (the browser client keeps it).
const JITTER: f64 = 0.5;
const FACTOR: f64 = 2.0;

impl Backoff {
    pub fn new(seed: u64) -> Self {
        Backoff {
            attempts: 0,
            rng: seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407)
                | 1,
        }
    }

    /// A uniform number in [0, 1).
    fn random(&mut self) -> f64 {
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        (self.rng >> 11) as f64 / (1u64 << 53) as f64
    }

    /// The wait before the next attempt, in ms (socket.io-client's `Backoff.duration`).
    pub fn next_ms(&mut self) -> u64 {
        let mut ms = MIN_MS * FACTOR.powi(self.attempts.min(30) as i32);
        self.attempts += 1;
        let rand = self.random();
        let deviation = (rand * JITTER * ms).floor();
        ms = if ((rand * 10.0).floor() as u64) & 1 == 0 {
            ms - deviation
        } else {
            ms + deviation
        };
        ms.min(MAX_MS) as u64
    }

    /// The wait after a handshake the relay refused (`unavailable`, e.g. while it binds a storm
    /// of tabs): the browser client's `scheduleReconnect(750 + Math.random() * 500)`.
    pub fn refused_ms(&mut self) -> u64 {
        750 + (self.random() * 500.0) as u64
    }

    /// A connection opened: the next loss starts over.
    pub fn reset(&mut self) {
        self.attempts = 0;
    }

    /// A uniform index below `n` (which node the balancer gives the next attempt).
    pub fn pick(&mut self, n: usize) -> usize {
        (self.random() * n as f64) as usize % n.max(1)
    }
}

#[cfg(test)]
mod tests {
    use super::Backoff;

    #[test]
    fn delays_follow_the_client_policy() {
        let mut b = Backoff::new(7);
        for _ in 0..200 {
            b.reset();
            let first = b.next_ms();
            assert!((125..=375).contains(&first), "{first}");
            let second = b.next_ms();
            assert!((250..=750).contains(&second), "{second}");
            for _ in 0..6 {
                assert!(b.next_ms() <= 3000);
            }
        }
    }
}
