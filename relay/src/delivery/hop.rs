//! A call's hop to the node that holds its tab: one message there, one message back, on
//! channels of the relay's own beside the Socket.IO adapter's.
//!
//! Each node subscribes to its own call channel (`va:call:<node>`; sharded on a Redis Cluster, so
//! a message goes to the one shard that owns the channel). A call for a tab on another node is
//! published there with the socket Redis named ([`Hop::call`]); that node emits it to that very
//! socket and publishes the outcome on the caller's channel: the tab's answer, "delivered" for a
//! call that expects none, or that the socket no longer holds the key there ("gone": the caller
//! finds the tab again), or a failure from the error table. A caller that stops waiting (the
//! agent cancelled, the timeout passed) says so ([`Hop::cancel`]), and the holding node tells
//! the tab. What a call needs of Redis is thus the publish of each message; the adapter's path
//! asked how many nodes listen, published the request, and had the other node publish how many
//! sockets it reached before the answer.
//!
//! A publish that no node received (Redis counts the receivers) means the node Redis names is
//! gone; the caller then waits for the key to change. Nothing here carries a key: a call names
//! its key's digest and the socket, and the holding node checks the socket holds that key.

use std::borrow::Cow;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use dashmap::DashMap;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use socketioxide_redis::drivers::Driver;
use tokio::sync::{mpsc, oneshot};

use crate::pubsub::PubSub;
use crate::store::redis::OP_TIMEOUT;

/// A node's call channel is this and the node's name.
const CALLS_PREFIX: &str = "va:call:";
/// Messages for this node held until the serving task takes them; past this, dropped (and
/// logged), as a subscriber that does not keep up drops them anyway.
const QUEUE: usize = 4096;

fn channel(node: &str) -> String {
    format!("{CALLS_PREFIX}{node}")
}

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
    /// Call: the key's digest and the socket that holds it.
    #[serde(borrow, default, skip_serializing_if = "Option::is_none")]
    rid: Option<Cow<'a, str>>,
    #[serde(borrow, default, skip_serializing_if = "Option::is_none")]
    sid: Option<Cow<'a, str>>,
    /// Call: the event, its params, whether an answer is awaited and the time the tab has (ms).
    #[serde(borrow, default, skip_serializing_if = "Option::is_none")]
    event: Option<Cow<'a, str>>,
    #[serde(borrow, default, skip_serializing_if = "Option::is_none")]
    params: Option<&'a RawValue>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    ack: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    ms: Option<u64>,
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
            sid: None,
            event: None,
            params: None,
            ack: None,
            ms: None,
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
}

/// A call going to another node: what it carries.
pub struct Outgoing<'a> {
    pub id: &'a str,
    pub rid: &'a str,
    pub sid: &'a str,
    pub event: &'a str,
    pub params: &'a RawValue,
    pub awaited: bool,
    pub timeout: Duration,
}

/// The publish failed or took too long.
#[derive(Debug)]
pub struct Unsent;

/// This node's end of the hops: sending calls, cancels and replies, and receiving its own.
pub struct Hop {
    pubsub: PubSub,
    node: String,
    /// Calls of this node waiting for their reply, by call id.
    waiting: DashMap<Arc<str>, oneshot::Sender<Reply>>,
    incoming: Mutex<Option<mpsc::Receiver<Incoming>>>,
}

/// A reply this node waits for; no longer expected once dropped.
pub struct Expected<'a> {
    hop: &'a Hop,
    id: Arc<str>,
    rx: oneshot::Receiver<Reply>,
}

impl Expected<'_> {
    /// The reply, when it comes (pending forever if none does: the caller bounds the wait).
    pub async fn reply(&mut self) -> Reply {
        match (&mut self.rx).await {
            Ok(reply) => reply,
            Err(_) => std::future::pending().await,
        }
    }
}

impl Drop for Expected<'_> {
    fn drop(&mut self) {
        self.hop.waiting.remove(&self.id);
    }
}

impl Hop {
    /// Subscribes to this node's call channel; replies are routed to their callers, calls and
    /// cancels kept for [`Hop::take_incoming`].
    pub async fn start(pubsub: PubSub, node: &str) -> anyhow::Result<Arc<Hop>> {
        use futures_util::StreamExt;
        let mut stream = Driver::subscribe(&pubsub, channel(node), QUEUE)
            .await
            .map_err(|e| anyhow::anyhow!("cannot subscribe to this node's call channel: {e}"))?;
        let (tx, rx) = mpsc::channel(QUEUE);
        let hop = Arc::new(Hop {
            pubsub,
            node: node.to_owned(),
            waiting: DashMap::new(),
            incoming: Mutex::new(Some(rx)),
        });
        let weak = Arc::downgrade(&hop);
        tokio::spawn(async move {
            while let Some((_, body)) = stream.next().await {
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
        let Ok(m) = serde_json::from_slice::<Message<'_>>(body) else {
            tracing::warn!("a message on this node's call channel could not be read");
            return;
        };
        let item = match m.k {
            Kind::Reply => {
                if let Some((_, tx)) = self.waiting.remove(m.id.as_ref()) {
                    let _ = tx.send(Reply {
                        outcome: m.r.unwrap_or(Outcome::Gone),
                        answer: m.v.map(RawValue::to_owned),
                        failure: m
                            .code
                            .map(|c| (c.into_owned(), m.msg.unwrap_or_default().into_owned())),
                    });
                }
                return;
            }
            Kind::Cancel => Incoming::Cancel(m.id.as_ref().into()),
            Kind::Call => {
                let (Some(from), Some(rid), Some(sid), Some(event), Some(params), Some(ms)) =
                    (m.from, m.rid, m.sid, m.event, m.params, m.ms)
                else {
                    tracing::warn!("a call on this node's call channel lacked a field");
                    return;
                };
                Incoming::Call(Held {
                    id: m.id.as_ref().into(),
                    from: from.into_owned(),
                    rid: rid.into_owned(),
                    sid: sid.into_owned(),
                    event: event.into_owned(),
                    params: params.to_owned(),
                    awaited: m.ack.unwrap_or(false),
                    timeout: Duration::from_millis(ms),
                })
            }
        };
        if incoming.try_send(item).is_err() {
            tracing::warn!("calls from other nodes are not taken fast enough; one dropped");
        }
    }

    async fn publish(&self, node: &str, m: &Message<'_>) -> Result<i64, Unsent> {
        let body = serde_json::to_vec(m).map_err(|_| Unsent)?;
        match tokio::time::timeout(OP_TIMEOUT, self.pubsub.publish_counted(channel(node), body))
            .await
        {
            Ok(Ok(n)) => Ok(n),
            _ => Err(Unsent),
        }
    }

    /// Expects the reply to call `id` (before sending it, so no reply comes unexpected).
    pub fn expect(&self, id: &Arc<str>) -> Expected<'_> {
        let (tx, rx) = oneshot::channel();
        self.waiting.insert(id.clone(), tx);
        Expected {
            hop: self,
            id: id.clone(),
            rx,
        }
    }

    /// Sends a call to `node`; how many subscribers received it (0: no node listens there).
    pub async fn call(&self, node: &str, call: &Outgoing<'_>) -> Result<i64, Unsent> {
        let mut m = Message::new(Kind::Call, call.id);
        m.from = Some(Cow::Borrowed(&self.node));
        m.rid = Some(Cow::Borrowed(call.rid));
        m.sid = Some(Cow::Borrowed(call.sid));
        m.event = Some(Cow::Borrowed(call.event));
        m.params = Some(call.params);
        m.ack = Some(call.awaited);
        m.ms = Some(call.timeout.as_millis().max(1) as u64);
        self.publish(node, &m).await
    }

    /// Tells `node` the caller stopped waiting for call `id`. Best effort, in the background.
    pub fn cancel(self: &Arc<Self>, node: &str, id: &str) {
        let hop = self.clone();
        let node = node.to_owned();
        let id = id.to_owned();
        tokio::spawn(async move {
            let _ = hop.publish(&node, &Message::new(Kind::Cancel, &id)).await;
        });
    }

    /// Replies to `node` that call `id` ended with `outcome` (`answer`: the tab's; `failure`: a
    /// code of the error table and its message).
    pub async fn reply(
        &self,
        node: &str,
        id: &str,
        outcome: Outcome,
        answer: Option<&RawValue>,
        failure: Option<(&str, &str)>,
    ) -> Result<(), Unsent> {
        let mut m = Message::new(Kind::Reply, id);
        m.r = Some(outcome);
        m.v = answer;
        if let Some((code, msg)) = failure {
            m.code = Some(Cow::Borrowed(code));
            m.msg = Some(Cow::Borrowed(msg));
        }
        self.publish(node, &m).await.map(drop)
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
        m.sid = Some("s".into());
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
