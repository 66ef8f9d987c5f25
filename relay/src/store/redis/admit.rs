//! A call's admission in Redis, one round trip ([`forms::ACQUIRE`](super::forms)): its session's
//! rate and in-flight slots and the key's (all counted across nodes, refused once the session was
//! ended), this node in the key's watch while the call runs, where the tab is, and the call sent
//! to the node holding the tab when this node guesses it right. And ending a session.

use std::sync::Arc;

use super::releases::{FOLD_MAX, Late, retry_busy_after};
use super::{
    Acquired, Admit, Admitted, Cluster, Lane, NODE_SUSPECT, NODES, Place, SESSION_WINDOW,
    SessionNames, Slot, StoreError, ms, rate_window,
};
use crate::tokens::unix_now_ms;

impl Cluster {
    /// Admits a call (see [`forms::ACQUIRE`](super::forms)): one round trip for all of it (on a
    /// cluster, one more after it only when the node holding the tab was not heard from lately).
    /// When slots are given back late, an admission refused as busy is asked once more after
    /// [`retry_busy_after`]: the slots in the way may be ended calls' that another node gives
    /// back late ([`super::releases`]).
    pub async fn acquire(
        self: &Arc<Self>,
        rid: &str,
        admit: &Admit<'_>,
    ) -> Result<(Acquired, Option<Admitted>), StoreError> {
        let first = self.admit(rid, admit).await?;
        if self.gives_back_late() && matches!(first.0, Acquired::TooMany | Acquired::SessionBusy) {
            tokio::time::sleep(retry_busy_after(self.settings.fold_within)).await;
            return self.admit(rid, admit).await;
        }
        Ok(first)
    }

    /// One admission, sent again without the call when Redis ran it too late.
    async fn admit(
        self: &Arc<Self>,
        rid: &str,
        admit: &Admit<'_>,
    ) -> Result<(Acquired, Option<Admitted>), StoreError> {
        // The node to send the call to with its admission: the one this node last saw the tab
        // on, if not this one (on a cluster, if heard from lately: the script cannot check), and
        // only once this node knows Redis's clock (to bound when the admission may run).
        let send_by = self.redis_now_ms().map(|now| now + ms(super::OP_TIMEOUT));
        let guess = self
            .hint(rid)
            .filter(|_| admit.offer.is_some() && send_by.is_some());
        let message = match (&guess, admit.offer) {
            (Some(_), Some(offer)) => offer(),
            _ => Vec::new(),
        };
        let first = self
            .admit_once(rid, admit, guess.as_deref(), message, send_by.unwrap_or(0))
            .await?;
        match first {
            // Redis ran it past its bound (this node's idea of Redis's clock was wrong): again,
            // sending nothing with it.
            None => Ok(self
                .admit_once(rid, admit, None, Vec::new(), 0)
                .await?
                .unwrap_or((Acquired::Unknown, None))),
            Some(done) => Ok(done),
        }
    }

    /// One admission script; `None` when Redis found it late.
    async fn admit_once(
        self: &Arc<Self>,
        rid: &str,
        admit: &Admit<'_>,
        guess: Option<&str>,
        message: Vec<u8>,
        send_by: u64,
    ) -> Result<Option<(Acquired, Option<Admitted>)>, StoreError> {
        let session = admit.session;
        let names = self.session_names(rid, session.tag);
        let (window, window_ms) = rate_window(&names.window, SESSION_WINDOW);
        let watch = self.watch_name(rid);
        let mut inv = self.scripts_acquire().key(self.key_name(rid));
        inv.key(&watch).key(window).key(&names.ended);
        if !self.sharded {
            inv.key(NODES);
        }
        inv.arg(self.settings.max_inflight)
            .arg(ms(self.settings.inflight_ttl))
            .arg(&self.node)
            .arg(admit.call_id)
            .arg(ms(admit.life))
            .arg(guess.unwrap_or(""))
            .arg(message)
            .arg(send_by)
            .arg(format!("{:x}", session.tag))
            .arg(session.max_inflight)
            .arg(session.rate_per_sec)
            .arg(window_ms);
        // This node's ended calls' slots waiting to be given back: given back first (on a
        // cluster, those of the same key, whose hash slot the script declares, and those of
        // other hash slots on the same server, named in its arguments; the others go with the
        // other slots waiting).
        self.releases.admitting();
        let (folded, beside) = if self.sharded {
            // The tag of the guessed node's sharded channel on the key's server.
            inv.arg(&*self.shards.tag_of(&watch));
            self.releases.take_for(&watch, FOLD_MAX)
        } else {
            inv.arg(ms(NODE_SUSPECT));
            (self.releases.take(FOLD_MAX), Vec::new())
        };
        for (watch, call_id) in &folded {
            inv.key(watch).arg(call_id);
        }
        for (watch, call_id) in &beside {
            inv.arg(watch).arg(call_id);
        }
        let reply: Vec<String> = match self
            .op(inv.invoke_async(&mut self.conn_for(Lane::Calls)))
            .await
        {
            Ok(reply) => reply,
            Err(e) => {
                // Perhaps not run: given back later (giving a slot back twice changes nothing).
                self.releases.put_back(folded);
                self.releases.put_back(beside);
                return Err(e);
            }
        };
        let mut words = reply.into_iter();
        if self.sharded {
            // The places of the slots beside that the server did not serve.
            let left = words.next().unwrap_or_default();
            let mut beside: Vec<Option<Late>> = beside.into_iter().map(Some).collect();
            let moved = left
                .split(' ')
                .filter_map(|at| at.parse::<usize>().ok()?.checked_sub(1))
                .filter_map(|i| beside.get_mut(i)?.take())
                .collect();
            self.releases.not_served(moved);
        }
        let word = words.next();
        if word.as_deref() == Some("late") {
            return Ok(None);
        }
        if let Some(now) = words.next().and_then(|w| w.parse::<u64>().ok()) {
            self.saw_redis_clock(now);
        }
        let (place, sent) = match word.as_deref() {
            Some("ok") | Some("sent") => {
                let (node, sid, got) = (words.next(), words.next(), words.next());
                match (node, sid) {
                    (Some(node), Some(sid)) => {
                        let sent = got.map(|n| n.parse::<i64>().unwrap_or(0));
                        (Place::Online { node, sid }, sent)
                    }
                    _ => (Place::Waiting, None),
                }
            }
            other => return Ok(Some((Acquired::from_word(other), None))),
        };
        // The slot is taken: it is given back on drop, whatever follows.
        let slot = Slot::new(self.clone(), watch, admit.call_id);
        let place = match place {
            // On a cluster the script could not check the node's heartbeat (a call sent was
            // sent to a node heard from lately).
            Place::Online { node, sid } if self.sharded && sent.is_none() => {
                self.checked(node, sid).await?
            }
            place => place,
        };
        self.set_hint(rid, &place);
        Ok(Some((Acquired::Ok, Some(Admitted { slot, place, sent }))))
    }

    /// The names of a session's records beside its key's (under the key's hash tag).
    pub(super) fn session_names(&self, rid: &str, tag: u64) -> SessionNames {
        SessionNames {
            window: format!("{}:{tag:x}", self.tagged("s:", rid)),
            ended: format!("{}:{tag:x}", self.tagged("va:se:", rid)),
        }
    }

    /// Ends a session of the key whose digest is `rid`: no call of it is admitted until
    /// `exp_unix` (its token's expiry), after which it could not be presented anyway.
    pub async fn end_session(&self, rid: &str, tag: u64, exp_unix: u64) -> Result<(), StoreError> {
        let ttl_ms = exp_unix
            .saturating_mul(1000)
            .saturating_sub(unix_now_ms())
            .max(1000);
        let ended = self.session_names(rid, tag).ended;
        self.op(redis::cmd("SET")
            .arg(ended)
            .arg(1)
            .arg("PX")
            .arg(ttl_ms)
            .query_async::<()>(&mut self.conn_for(Lane::Calls)))
            .await
    }

    /// Whether a session of the key whose digest is `rid` was ended.
    pub async fn session_ended(&self, rid: &str, tag: u64) -> Result<bool, StoreError> {
        let ended = self.session_names(rid, tag).ended;
        self.op(redis::cmd("EXISTS")
            .arg(ended)
            .query_async::<bool>(&mut self.conn_for(Lane::Calls)))
            .await
    }
}
