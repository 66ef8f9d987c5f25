//! A key's state in Redis: issuing, binding, releasing, revoking, reading it, and
//! `Idempotency-Key` claims (a call's admission is in [`super::admit`]). Each change is
//! one script (see [`super::scripts`]) that tells the nodes in the key's watch.

use std::time::Duration;

use redis::Value;

use super::{
    Bound, Cluster, Declared, IdemClaim, Lane, NODE_KEYS_PREFIX, NODE_SUSPECT, NODES, ONLINE_EXTRA,
    Place, Revoked, StoreError, StoredStatus, ms, rate_window,
};
use crate::store::keys::TabInfo;
use crate::store::lifecycle::BindError;
use crate::tokens::unix_now_ms;

impl Cluster {
    pub async fn issue(&self, rid: &str, exp_unix: u64) -> Result<(), StoreError> {
        let now = unix_now_ms();
        let exp = exp_unix * 1000;
        let ttl = exp
            .saturating_sub(now)
            .min(ms(self.settings.unbound_ttl))
            .max(1);
        let mut inv = self.scripts.issue.key(self.key_name(rid));
        inv.arg(now).arg(exp).arg(ttl);
        self.op(inv.invoke_async::<i64>(&mut self.conn_for(Lane::Tabs)))
            .await
            .map(drop)
    }

    /// Binds the key to `sid` on this node. `token_exp_unix` is `None` for a bare key.
    pub async fn bind(
        &self,
        rid: &str,
        sid: &str,
        token_exp_unix: Option<u64>,
    ) -> Result<Result<Bound, BindError>, StoreError> {
        let now = unix_now_ms();
        let proof = if token_exp_unix.is_some() { "t" } else { "b" };
        // The arguments both forms of the script share; each adds its last one.
        let bind_args = |inv: &mut redis::ScriptInvocation<'_>| {
            inv.arg(now)
                .arg(&self.node)
                .arg(sid)
                .arg(proof)
                .arg(token_exp_unix.unwrap_or(0) * 1000)
                .arg(ms(ONLINE_EXTRA));
        };
        let reply: Vec<String> = if self.sharded {
            let mut inv = self.sharded_scripts.bind.key(self.key_name(rid));
            inv.key(self.watch_name(rid));
            bind_args(&mut inv);
            inv.arg(&*self.told_under(rid));
            let reply: Vec<String> = self
                .op(inv.invoke_async(&mut self.conn_for(Lane::Tabs)))
                .await?;
            if reply.first().map(String::as_str) == Some("bound") {
                self.sharded_bound(rid, reply.get(2).map(String::as_str))
                    .await;
            }
            reply
        } else {
            let mut inv = self.scripts.bind.key(self.key_name(rid));
            inv.key(self.watch_name(rid))
                .key(self.node_keys(&self.node));
            bind_args(&mut inv);
            inv.arg(NODE_KEYS_PREFIX);
            self.op(inv.invoke_async(&mut self.conn_for(Lane::Tabs)))
                .await?
        };
        let word = |i: usize| reply.get(i).map(String::as_str);
        Ok(match (word(0), word(1)) {
            (Some("same"), _) => Ok(Bound::Same),
            (Some("bound"), Some(exp)) => Ok(Bound::Bound {
                exp_unix: exp.parse::<u64>().unwrap_or(0) / 1000,
                replaced: match (word(2), word(3)) {
                    (Some(node), Some(sid)) if !node.is_empty() => {
                        Some((node.to_owned(), sid.to_owned()))
                    }
                    _ => None,
                },
                mode: word(4).filter(|m| !m.is_empty()).map(str::to_owned),
            }),
            (Some("err"), Some("revoked")) => Err(BindError::Revoked),
            (Some("err"), Some("token_required")) => Err(BindError::TokenRequired),
            (Some("err"), Some("expired")) => Err(BindError::Expired),
            _ => Err(BindError::Unknown),
        })
    }

    /// The socket `sid` of this node left: its key goes offline for the grace (if still its).
    pub async fn release(&self, rid: &str, sid: &str) -> Result<(), StoreError> {
        if self.sharded {
            return self.sharded_release(rid, sid).await;
        }
        let mut inv = self.scripts.release.key(self.key_name(rid));
        inv.key(self.watch_name(rid))
            .key(self.node_keys(&self.node));
        inv.arg(unix_now_ms())
            .arg(&self.node)
            .arg(sid)
            .arg(ms(self.settings.grace));
        self.op(inv.invoke_async::<i64>(&mut self.conn_for(Lane::Tabs)))
            .await
            .map(drop)
    }

    pub async fn revoke(&self, rid: &str) -> Result<Revoked, StoreError> {
        let reply: Vec<String> = if self.sharded {
            let mut inv = self.sharded_scripts.revoke.key(self.key_name(rid));
            inv.key(self.watch_name(rid))
                .arg(unix_now_ms())
                .arg(&*self.told_under(rid));
            let reply: Vec<String> = self
                .op(inv.invoke_async(&mut self.conn_for(Lane::Calls)))
                .await?;
            if let Some(node) = reply.get(1) {
                let _ = self
                    .node_set(Lane::Calls, false, node, &self.key_name(rid))
                    .await;
            }
            reply
        } else {
            let mut inv = self.scripts.revoke.key(self.key_name(rid));
            inv.key(self.watch_name(rid));
            inv.arg(unix_now_ms()).arg(NODE_KEYS_PREFIX);
            self.op(inv.invoke_async(&mut self.conn_for(Lane::Calls)))
                .await?
        };
        Ok(match reply.first().map(String::as_str) {
            Some("revoked") => Revoked::Done {
                online_on: reply.get(1).cloned(),
            },
            _ => Revoked::Unknown,
        })
    }

    pub async fn is_revoked(&self, rid: &str) -> Result<bool, StoreError> {
        let st: Option<String> = self
            .op(redis::cmd("HGET")
                .arg(self.key_name(rid))
                .arg("st")
                .query_async(&mut self.conn_for(Lane::Tabs)))
            .await?;
        Ok(st.as_deref() == Some("revoked"))
    }

    pub async fn status(&self, rid: &str) -> Result<Option<StoredStatus>, StoreError> {
        let name = self.key_name(rid);
        type Fields = (
            Option<String>,
            Option<u64>,
            Option<String>,
            Option<String>,
            Option<u64>,
            Option<String>,
            Option<u64>,
        );
        let ((st, since, hd, pt, rv, md, exp), ttl): (Fields, i64) = self
            .op(redis::pipe()
                .cmd("HMGET")
                .arg(&name)
                .arg("st")
                .arg("since")
                .arg("hd")
                .arg("pt")
                .arg("rv")
                .arg("md")
                .arg("exp")
                .cmd("PTTL")
                .arg(&name)
                .query_async(&mut self.conn_for(Lane::Calls)))
            .await?;
        use relay_wire::KeyState;
        let state = match st.as_deref() {
            Some("issued") => KeyState::Issued,
            Some("online") => KeyState::Online,
            Some("offline") => KeyState::Offline,
            _ => return Ok(None),
        };
        Ok(Some(StoredStatus {
            state,
            since_ms: since.unwrap_or(0),
            ttl_ms: u64::try_from(ttl).ok(),
            token_exp_ms: exp,
            tab: TabInfo {
                revision: rv.unwrap_or(0),
                declared: hd.map(|hd| relay_wire::Declaration::from_stored(&hd, pt.as_deref())),
                mode: md.map(Into::into),
            },
        }))
    }

    /// Records what the socket `sid` of this node declared for the key it holds.
    pub async fn declare(
        &self,
        rid: &str,
        sid: &str,
        declared: &relay_wire::Declaration,
    ) -> Result<Declared, StoreError> {
        let script = if self.sharded {
            &self.sharded_scripts.declare
        } else {
            &self.scripts.declare
        };
        let mut inv = script.key(self.key_name(rid));
        inv.key(self.watch_name(rid));
        inv.arg(&self.node)
            .arg(sid)
            .arg(declared.joined())
            .arg(declared.page_tools().unwrap_or(""));
        if self.sharded {
            inv.arg(&*self.told_under(rid));
        }
        let reply: Vec<String> = self
            .op(inv.invoke_async(&mut self.conn_for(Lane::Tabs)))
            .await?;
        Ok(match (reply.first().map(String::as_str), reply.get(1)) {
            (Some("ok" | "same"), Some(rv)) => Declared::Revision(rv.parse().unwrap_or(0)),
            _ => Declared::NotBound,
        })
    }

    /// Sets the key's mode; where its tab is now (`Unknown` for a key gone or revoked).
    pub async fn set_mode(&self, rid: &str, mode: &str) -> Result<Place, StoreError> {
        let mut inv = self.scripts.set_mode.key(self.key_name(rid));
        inv.arg(mode);
        let reply: Vec<String> = self
            .op(inv.invoke_async(&mut self.conn_for(Lane::Calls)))
            .await?;
        let mut words = reply.into_iter();
        Ok(
            match (words.next().as_deref(), words.next(), words.next()) {
                (Some("online"), Some(node), Some(sid)) => Place::Online { node, sid },
                (Some("waiting"), _, _) => Place::Waiting,
                _ => Place::Unknown,
            },
        )
    }

    pub async fn lookup(&self, rid: &str) -> Result<Place, StoreError> {
        let place = self.lookup_now(rid).await?;
        self.set_hint(rid, &place);
        Ok(place)
    }

    async fn lookup_now(&self, rid: &str) -> Result<Place, StoreError> {
        if self.sharded {
            return self.sharded_lookup(rid).await;
        }
        let mut inv = self.scripts.lookup.key(self.key_name(rid));
        inv.key(NODES);
        inv.arg(ms(NODE_SUSPECT));
        let reply: Vec<String> = self
            .op(inv.invoke_async(&mut self.conn_for(Lane::Calls)))
            .await?;
        let mut words = reply.into_iter();
        Ok(
            match (words.next().as_deref(), words.next(), words.next()) {
                (Some("online"), Some(node), Some(sid)) => Place::Online { node, sid },
                (Some("waiting"), _, _) => Place::Waiting,
                _ => Place::Unknown,
            },
        )
    }

    /// One step of a fixed-window limit shared by every node: false when `limit` is spent. For
    /// token minting, so on the tabs' lane (a session's call rate is taken in [`Self::acquire`]).
    pub async fn rate(
        &self,
        bucket: &str,
        limit: u32,
        window: Duration,
    ) -> Result<bool, StoreError> {
        let (name, window_ms) = rate_window(bucket, window);
        let mut inv = self.scripts.rate.key(name);
        inv.arg(limit).arg(window_ms);
        let ok: i64 = self
            .op(inv.invoke_async(&mut self.conn_for(Lane::Tabs)))
            .await?;
        Ok(ok == 1)
    }

    fn idem_name(&self, rid: &str, idem: &str) -> String {
        format!("{}:{idem}", self.tagged("va:idem:", rid))
    }

    pub async fn idem_claim(
        &self,
        rid: &str,
        idem: &str,
        fingerprint: u64,
        until_ms: u64,
        window: Duration,
    ) -> Result<IdemClaim, StoreError> {
        let mut inv = self.scripts.idem_claim.key(self.idem_name(rid, idem));
        inv.arg(fingerprint.to_string())
            .arg(until_ms)
            .arg(ms(window));
        let reply: Vec<Value> = self
            .op(inv.invoke_async(&mut self.conn_for(Lane::Calls)))
            .await?;
        let text = |i: usize| -> Option<String> {
            reply
                .get(i)
                .and_then(|v| redis::from_redis_value_ref::<String>(v).ok())
        };
        Ok(match text(0).as_deref() {
            Some("run") => IdemClaim::Run,
            Some("done") => IdemClaim::Done {
                status: text(1).and_then(|s| s.parse().ok()).unwrap_or(500),
                body: reply
                    .get(2)
                    .and_then(|v| redis::from_redis_value_ref::<Vec<u8>>(v).ok())
                    .unwrap_or_default(),
            },
            Some("pending") => IdemClaim::Pending {
                until_ms: text(1).and_then(|s| s.parse().ok()).unwrap_or(0),
            },
            _ => IdemClaim::Conflict,
        })
    }

    /// Records a first call's outcome with its fingerprint, for retries. The claim is written
    /// again if it is gone (a primary that died before its replica had it): a retry then
    /// replays this outcome rather than finding a record without its fingerprint.
    pub async fn idem_record(
        &self,
        rid: &str,
        idem: &str,
        fingerprint: u64,
        window: Duration,
        status: u16,
        body: &[u8],
    ) -> Result<(), StoreError> {
        let mut inv = self.scripts.idem_record.key(self.idem_name(rid, idem));
        inv.arg(fingerprint.to_string())
            .arg(status)
            .arg(body)
            .arg(ms(window));
        self.op(inv.invoke_async::<i64>(&mut self.conn_for(Lane::Calls)))
            .await
            .map(drop)
    }
}
