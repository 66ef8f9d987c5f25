//! A call's hop to the node that holds its tab: one message there, one message back, on the
//! nodes' own channels in Redis, beside the Socket.IO adapter.
//!
//! Each node listens on its own channel (`va:n:<node>`, which also brings it the key events it
//! waits for: [`crate::store::redis`]). A call for a tab on another node is sent there for the
//! socket Redis named: by the script that admits it, when this node guessed that node right (no
//! round trip of its own), or else published right after. That node emits it to that very socket
//! and sends the outcome back by a script that also gives the call's slot back when the caller
//! asked ([`Cluster::reply`]): the tab's answer, "delivered" for a call that expects none, that
//! the socket no longer holds the key there ("gone": the caller finds the tab again), or a
//! failure from the error table. A caller that stops waiting (the agent cancelled, the timeout
//! passed) says so ([`Hop::cancel`]), and the holding node tells the tab. The adapter's path
//! asked how many nodes listen, published the request, and had the other node publish how many
//! sockets it reached before the answer; the caller then gave the slot back in a round trip of
//! its own.
//!
//! On one server a publish that no node received (Redis counts the receivers) means the node
//! Redis names is gone; the caller then waits for the key to change. Nothing here carries a key:
//! a call names its key's digest and the socket, and the holding node checks the socket holds
//! that key.
//!
//! A call is framed as `c`, the socket id, a newline, then its JSON message (the admission
//! script, which reads the socket id, puts it before the message it was given); cancels and
//! outcomes are JSON alone.

use std::borrow::Cow;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use dashmap::DashMap;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use tokio::sync::mpsc;

use crate::store::redis::Cluster;

/// Calls from other nodes held until the serving task takes them; past this, dropped (and
/// logged), as a subscriber that does not keep up drops them anyway.
const QUEUE: usize = 4096;

/// What a message is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
enum Kind {
    Call,
    Cancel,
    Reply,
}

/// How a call held on another node ended there.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Outcome {
    /// The tab answered (the answer is in the reply).
    Answered,
    /// Emitted to the tab; the call expects no answer.
    Delivered,
    /// The socket no longer holds the key on that node (it left, was replaced, or the node is
    /// closing): find the tab again.
    Gone,
    /// A failure from the error table (code and message in the reply).
    Failed,
}

/// One message on a call channel, as JSON. Which fields are set depends on `k`.
#[derive(Serialize, Deserialize)]
struct Message<'a> {
    k: Kind,
    /// The call id.
    #[serde(borrow)]
    id: Cow<'a, str>,
    /// Call: the node to reply to.
    #[serde(borrow, default, skip_serializing_if = "Option::is_none")]
    from: Option<Cow<'a, str>>,
    /// Call: the key's digest (the socket that holds it frames the message).
    #[serde(borrow, default, skip_serializing_if = "Option::is_none")]
    rid: Option<Cow<'a, str>>,
    /// Call: the event, its params, whether an answer is awaited and the time the tab has (ms).
    #[serde(borrow, default, skip_serializing_if = "Option::is_none")]
    event: Option<Cow<'a, str>>,
    #[serde(borrow, default, skip_serializing_if = "Option::is_none")]
    params: Option<&'a RawValue>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    ack: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    ms: Option<u64>,
    /// Call: the W3C trace context the tab works in (`traceparent`, `tracestate`), if any.
    #[serde(borrow, default, skip_serializing_if = "Option::is_none")]
    tp: Option<Cow<'a, str>>,
    #[serde(borrow, default, skip_serializing_if = "Option::is_none")]
    ts: Option<Cow<'a, str>>,
    /// Call: give the call's slot back with its final outcome. Reply: it was given back.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    rel: Option<bool>,
    /// Which delivery of the call this is (call and reply): an outcome of an earlier one, which
    /// the caller gave up on, is not taken for the later one's.
    #[serde(default)]
    n: u32,
    /// Reply: how the call ended, the tab's answer, or a failure's code and message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    r: Option<Outcome>,
    #[serde(borrow, default, skip_serializing_if = "Option::is_none")]
    v: Option<&'a RawValue>,
    #[serde(borrow, default, skip_serializing_if = "Option::is_none")]
    code: Option<Cow<'a, str>>,
    #[serde(borrow, default, skip_serializing_if = "Option::is_none")]
    msg: Option<Cow<'a, str>>,
}

impl<'a> Message<'a> {
    fn new(k: Kind, id: &'a str) -> Self {
        Message {
            k,
            id: Cow::Borrowed(id),
            from: None,
            rid: None,
            event: None,
            params: None,
            ack: None,
            ms: None,
            tp: None,
            ts: None,
            rel: None,
            n: 0,
            r: None,
            v: None,
            code: None,
            msg: None,
        }
    }
}

/// A call for a tab of this node, sent by another node.
pub struct Held {
    pub id: Arc<str>,
    /// The node to reply to.
    pub from: String,
    pub rid: String,
    pub sid: String,
    pub event: String,
    pub params: Box<RawValue>,
    pub awaited: bool,
    /// The time the tab has to answer.
    pub timeout: Duration,
    /// Give the call's slot back with its final outcome.
    pub give_back: bool,
    /// Which delivery of the call this is.
    pub attempt: u32,
    /// The W3C trace context the tab works in, if the call has one.
    pub traceparent: Option<String>,
    pub tracestate: Option<String>,
}

/// What this node is asked by others.
pub enum Incoming {
    Call(Held),
    /// The caller stopped waiting for call `id`.
    Cancel(Arc<str>),
}

/// The outcome of a call held on another node.
#[derive(Debug)]
pub struct Reply {
    pub outcome: Outcome,
    /// The tab's answer (`Answered`).
    pub answer: Option<Box<RawValue>>,
    /// A failure's code and message (`Failed`).
    pub failure: Option<(String, String)>,
    /// The holding node gave the call's slot back.
    pub given_back: bool,
    /// Which delivery of the call it is the outcome of.
    attempt: u32,
}

/// A call going to another node: what it carries.
pub struct Outgoing<'a> {
    pub id: &'a str,
    pub rid: &'a str,
    pub event: &'a str,
    pub params: &'a RawValue,
    pub awaited: bool,
    pub timeout: Duration,
    /// Give the slot back with the final outcome (a call with no outcome of its own to record).
    pub give_back: bool,
    /// Which delivery of the call this is (0 for the first).
    pub attempt: u32,
    /// The W3C trace context the tab works in, if the call has one.
    pub traceparent: Option<&'a str>,
    pub tracestate: Option<&'a str>,
}

/// The publish failed or took too long.
#[derive(Debug)]
pub struct Unsent;

/// This node's end of the hops: sending calls, cancels and outcomes, and receiving its own.
pub struct Hop {
    cluster: Arc<Cluster>,
    /// Calls of this node waiting for their outcome, by call id.
    waiting: DashMap<Arc<str>, mpsc::Sender<Reply>>,
    incoming: Mutex<Option<mpsc::Receiver<Incoming>>>,
}

/// The outcomes a call of this node waits for; no longer expected once dropped.
pub struct Expected<'a> {
    hop: &'a Hop,
    id: Arc<str>,
    rx: mpsc::Receiver<Reply>,
}

/// Outcomes of one call kept until read: one per delivery, the last ones of earlier deliveries
/// arriving late at most.
const OUTCOMES: usize = 4;

impl Expected<'_> {
    /// The outcome of delivery `attempt`, when it comes (pending forever if none does: the
    /// caller bounds the wait); outcomes of earlier deliveries are passed over.
    pub async fn reply(&mut self, attempt: u32) -> Reply {
        loop {
            match self.rx.recv().await {
                Some(reply) if reply.attempt == attempt => return reply,
                Some(_) => continue,
                None => std::future::pending().await,
            }
        }
    }
}

impl Drop for Expected<'_> {
    fn drop(&mut self) {
        self.hop.waiting.remove(&self.id);
    }
}

impl Hop {
    /// Takes this node's messages from `cluster` ([`Cluster::take_messages`]): outcomes go to
    /// their callers, calls and cancels are kept for [`Hop::take_incoming`].
    pub fn start(cluster: Arc<Cluster>) -> anyhow::Result<Arc<Hop>> {
        let mut messages = cluster
            .take_messages()
            .ok_or_else(|| anyhow::anyhow!("this node's messages are taken already"))?;
        let (tx, rx) = mpsc::channel(QUEUE);
        let hop = Arc::new(Hop {
            cluster,
            waiting: DashMap::new(),
            incoming: Mutex::new(Some(rx)),
        });
        let weak = Arc::downgrade(&hop);
        tokio::spawn(async move {
            while let Some(body) = messages.recv().await {
                let Some(hop) = weak.upgrade() else { break };
                hop.receive(&body, &tx);
            }
        });
        Ok(hop)
    }

    /// The calls and cancels other nodes send this node; `None` after the first time.
    pub fn take_incoming(&self) -> Option<mpsc::Receiver<Incoming>> {
        self.incoming
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
    }

    fn receive(&self, body: &[u8], incoming: &mpsc::Sender<Incoming>) {
        // A call: `c<sid>\n<message>`.
        let (sid, json) = match body.strip_prefix(b"c") {
            Some(framed) => match framed.iter().position(|b| *b == b'\n') {
                Some(nl) => (Some(&framed[..nl]), &framed[nl + 1..]),
                None => (None, body),
            },
            None => (None, body),
        };
        let Ok(m) = serde_json::from_slice::<Message<'_>>(json) else {
            tracing::warn!("a message on this node's channel could not be read");
            return;
        };
        let item = match (m.k, sid) {
            (Kind::Reply, _) => {
                if let Some(tx) = self.waiting.get(m.id.as_ref()) {
                    let _ = tx.try_send(Reply {
                        outcome: m.r.unwrap_or(Outcome::Gone),
                        answer: m.v.map(RawValue::to_owned),
                        failure: m
                            .code
                            .map(|c| (c.into_owned(), m.msg.unwrap_or_default().into_owned())),
                        given_back: m.rel.unwrap_or(false),
                        attempt: m.n,
                    });
                }
                return;
            }
            (Kind::Cancel, _) => Incoming::Cancel(m.id.as_ref().into()),
            (Kind::Call, Some(sid)) => {
                let (Some(from), Some(rid), Some(event), Some(params), Some(ms), Ok(sid)) = (
                    m.from,
                    m.rid,
                    m.event,
                    m.params,
                    m.ms,
                    std::str::from_utf8(sid),
                ) else {
                    tracing::warn!("a call on this node's channel lacked a field");
                    return;
                };
                Incoming::Call(Held {
                    id: m.id.as_ref().into(),
                    from: from.into_owned(),
                    rid: rid.into_owned(),
                    sid: sid.to_owned(),
                    event: event.into_owned(),
                    params: params.to_owned(),
                    awaited: m.ack.unwrap_or(false),
                    timeout: Duration::from_millis(ms),
                    give_back: m.rel.unwrap_or(false),
                    attempt: m.n,
                    traceparent: m.tp.map(Cow::into_owned),
                    tracestate: m.ts.map(Cow::into_owned),
                })
            }
            (Kind::Call, None) => {
                tracing::warn!("a call on this node's channel named no socket");
                return;
            }
        };
        if incoming.try_send(item).is_err() {
            tracing::warn!("calls from other nodes are not taken fast enough; one dropped");
        }
    }

    /// Expects the outcomes of call `id` (before it is sent, so none comes unexpected).
    pub fn expect(&self, id: &Arc<str>) -> Expected<'_> {
        let (tx, rx) = mpsc::channel(OUTCOMES);
        self.waiting.insert(id.clone(), tx);
        Expected {
            hop: self,
            id: id.clone(),
            rx,
        }
    }

    /// The message that sends `call` to the node holding its tab, without the socket id that
    /// frames it (the admission script, or [`Hop::send`], puts it before).
    pub fn message(&self, call: &Outgoing<'_>) -> Vec<u8> {
        let mut m = Message::new(Kind::Call, call.id);
        m.from = Some(Cow::Borrowed(self.cluster.node()));
        m.rid = Some(Cow::Borrowed(call.rid));
        m.event = Some(Cow::Borrowed(call.event));
        m.params = Some(call.params);
        m.ack = Some(call.awaited);
        m.ms = Some(call.timeout.as_millis().max(1) as u64);
        m.rel = Some(call.give_back);
        m.n = call.attempt;
        m.tp = call.traceparent.map(Cow::Borrowed);
        m.ts = call.tracestate.map(Cow::Borrowed);
        serde_json::to_vec(&m).unwrap_or_default()
    }

    /// Whether a publish's receiver count tells if the node still listens: on one server, not on
    /// a Redis Cluster (there it is the count of the one server the publish reached).
    pub fn counts_receivers(&self) -> bool {
        !self.cluster.is_sharded()
    }

    /// Sends a call's `message` for socket `sid` to `node`: how many subscribers received it
    /// (on a Redis Cluster, a count of one server's only).
    pub async fn send(&self, node: &str, sid: &str, message: &[u8]) -> Result<i64, Unsent> {
        let mut body = Vec::with_capacity(message.len() + sid.len() + 2);
        body.push(b'c');
        body.extend_from_slice(sid.as_bytes());
        body.push(b'\n');
        body.extend_from_slice(message);
        self.cluster
            .publish_to(node, body)
            .await
            .map_err(|_| Unsent)
    }

    /// Tells `node` the caller stopped waiting for call `id`. Best effort, in the background.
    pub fn cancel(self: &Arc<Self>, node: &str, id: &str) {
        let body = serde_json::to_vec(&Message::new(Kind::Cancel, id)).unwrap_or_default();
        let (hop, node) = (self.clone(), node.to_owned());
        tokio::spawn(async move {
            let _ = hop.cluster.publish_to(&node, body).await;
        });
    }

    /// Sends the outcome of `held` back to its caller (`answer`: the tab's; `failure`: a code of
    /// the error table and its message), giving the call's slot back with a final outcome when
    /// the caller asked.
    pub async fn reply(
        &self,
        held: &Held,
        outcome: Outcome,
        answer: Option<&RawValue>,
        failure: Option<(&str, &str)>,
    ) -> Result<(), Unsent> {
        let give_back = held.give_back && outcome != Outcome::Gone;
        let mut m = Message::new(Kind::Reply, &held.id);
        m.r = Some(outcome);
        m.v = answer;
        m.rel = give_back.then_some(true);
        m.n = held.attempt;
        if let Some((code, msg)) = failure {
            m.code = Some(Cow::Borrowed(code));
            m.msg = Some(Cow::Borrowed(msg));
        }
        let body = serde_json::to_vec(&m).map_err(|_| Unsent)?;
        self.cluster
            .reply(&held.rid, &held.from, give_back.then_some(&*held.id), body)
            .await
            .map_err(|_| Unsent)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_call_reads_back_as_sent() {
        let params = RawValue::from_string(r#"{"a":[1,"two"]}"#.into()).unwrap();
        let mut m = Message::new(Kind::Call, "c_1");
        m.from = Some("n1".into());
        m.rid = Some("r".into());
        m.event = Some("voice-agent:show".into());
        m.params = Some(&params);
        m.ack = Some(true);
        m.ms = Some(1500);
        let body = serde_json::to_vec(&m).unwrap();
        let back: Message<'_> = serde_json::from_slice(&body).unwrap();
        assert_eq!(back.k, Kind::Call);
        assert_eq!(back.params.unwrap().get(), params.get());
        assert_eq!(back.ms, Some(1500));
        assert!(back.v.is_none() && back.r.is_none());
    }

    #[test]
    fn a_reply_carries_the_answer_untouched() {
        let answer = RawValue::from_string(r#"{"result":{"x":"\u00e9"}}"#.into()).unwrap();
        let mut m = Message::new(Kind::Reply, "c_2");
        m.r = Some(Outcome::Answered);
        m.v = Some(&answer);
        let body = serde_json::to_vec(&m).unwrap();
        let back: Message<'_> = serde_json::from_slice(&body).unwrap();
        assert_eq!(back.r, Some(Outcome::Answered));
        assert_eq!(back.v.unwrap().get(), answer.get());
    }
}
