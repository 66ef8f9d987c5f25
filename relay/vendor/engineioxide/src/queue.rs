//! The send queue of a [`Socket`](crate::Socket): a bounded multi-producer, single-consumer
//! queue of [`PacketBuf`]s, with one extra slot for the latest volatile packet.
//!
//! Patched in (not in upstream engineioxide 0.17.9, which uses a tokio `mpsc` channel and a
//! `watch` channel): a tokio `mpsc` channel allocates its first block of 32 slots (5.4 KB for
//! `PacketBuf`) when it is created and keeps it for its whole life, and a `watch` channel
//! allocates eight cache-padded notifiers, whether the socket ever sends anything or not. This
//! queue holds its packets in a `VecDeque` that is empty, and allocates nothing, while the socket
//! is idle, and that gives its memory back every time the consumer drains it.
//!
//! Same semantics as the channels it replaces: `try_send`/`try_reserve` fail with `Full` once
//! `capacity` packets are queued or reserved, and with `Closed` once the consumer closed the
//! queue; packets queued before the close can still be received; a volatile packet overwrites
//! the previous one that was not sent yet and is received after the buffered packets.

use std::{
    collections::VecDeque,
    sync::{Mutex, MutexGuard},
    task::{Context, Poll, Waker},
};

use engineioxide_core::PacketBuf;
use tokio::sync::{Notify, mpsc::error::TrySendError};

#[derive(Debug, Default)]
struct State {
    packets: VecDeque<PacketBuf>,
    /// Places taken by permits that were not used yet.
    reserved: usize,
    /// The latest volatile packet, not sent yet (boxed: a `PacketBuf` takes 168 bytes).
    volatile: Option<Box<PacketBuf>>,
    closed: bool,
    /// The consumer, waiting for a packet.
    rx_waker: Option<Waker>,
}

/// A bounded packet queue that allocates nothing while it is empty.
#[derive(Debug)]
pub(crate) struct PacketQueue {
    state: Mutex<State>,
    capacity: usize,
    /// Wakes producers waiting for a place ([`PacketQueue::send`]) or for the close
    /// ([`PacketQueue::closed`]).
    changed: Notify,
}

impl PacketQueue {
    pub(crate) fn new(capacity: usize) -> Self {
        Self {
            state: Mutex::new(State::default()),
            capacity: capacity.max(1),
            changed: Notify::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // No code panics while holding the lock; a poisoned lock still holds a valid state.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Wakes the consumer, after the lock is released.
    fn wake(waker: Option<Waker>) {
        if let Some(w) = waker {
            w.wake();
        }
    }

    /// Queues `packets`, or gives them back if the queue is full or closed.
    pub(crate) fn try_send(&self, packets: PacketBuf) -> Result<(), TrySendError<PacketBuf>> {
        let mut state = self.lock();
        if state.closed {
            return Err(TrySendError::Closed(packets));
        }
        if state.packets.len() + state.reserved >= self.capacity {
            return Err(TrySendError::Full(packets));
        }
        state.packets.push_back(packets);
        let waker = state.rx_waker.take();
        drop(state);
        Self::wake(waker);
        Ok(())
    }

    /// Queues `packets`, waiting for a place while the queue is full.
    pub(crate) async fn send(&self, mut packets: PacketBuf) -> Result<(), PacketBuf> {
        loop {
            let changed = self.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            match self.try_send(packets) {
                Ok(()) => return Ok(()),
                Err(TrySendError::Closed(p)) => return Err(p),
                Err(TrySendError::Full(p)) => packets = p,
            }
            changed.await;
        }
    }

    /// Takes a place in the queue for one send.
    pub(crate) fn try_reserve(&self) -> Result<Permit<'_>, TrySendError<()>> {
        let mut state = self.lock();
        if state.closed {
            return Err(TrySendError::Closed(()));
        }
        if state.packets.len() + state.reserved >= self.capacity {
            return Err(TrySendError::Full(()));
        }
        state.reserved += 1;
        Ok(Permit { queue: self })
    }

    /// Sets the volatile packet (replacing one not sent yet). False if the queue is closed.
    pub(crate) fn send_volatile(&self, packets: PacketBuf) -> bool {
        let mut state = self.lock();
        if state.closed {
            return false;
        }
        state.volatile = Some(Box::new(packets));
        let waker = state.rx_waker.take();
        drop(state);
        Self::wake(waker);
        true
    }

    /// Takes the next packet: buffered packets first, then the volatile one.
    fn pop(state: &mut State) -> Option<PacketBuf> {
        match state.packets.pop_front() {
            Some(p) => {
                if state.packets.is_empty() {
                    // Give the memory back: an idle socket holds no queue.
                    state.packets = VecDeque::new();
                }
                Some(p)
            }
            None => state.volatile.take().map(|p| *p),
        }
    }

    /// Receives the next packet; `None` once the queue is closed and drained.
    pub(crate) fn poll_recv(&self, cx: &mut Context<'_>) -> Poll<Option<PacketBuf>> {
        let mut state = self.lock();
        let len = state.packets.len();
        if let Some(p) = Self::pop(&mut state) {
            let full = len + state.reserved >= self.capacity;
            drop(state);
            if full {
                self.changed.notify_waiters();
            }
            return Poll::Ready(Some(p));
        }
        if state.closed {
            return Poll::Ready(None);
        }
        match &mut state.rx_waker {
            Some(w) if w.will_wake(cx.waker()) => {}
            w => *w = Some(cx.waker().clone()),
        }
        Poll::Pending
    }

    /// Receives the next packet; `None` once the queue is closed and drained.
    #[cfg(any(test, feature = "__test_harness"))]
    pub(crate) async fn recv(&self) -> Option<PacketBuf> {
        std::future::poll_fn(|cx| self.poll_recv(cx)).await
    }

    /// Takes the next packet if there is one.
    pub(crate) fn try_recv(&self) -> Option<PacketBuf> {
        let mut state = self.lock();
        let len = state.packets.len();
        let p = Self::pop(&mut state)?;
        let full = len + state.reserved >= self.capacity;
        drop(state);
        if full {
            self.changed.notify_waiters();
        }
        Some(p)
    }

    /// Closes the queue: nothing more can be sent, what was queued can still be received.
    pub(crate) fn close(&self) {
        let mut state = self.lock();
        state.closed = true;
        let waker = state.rx_waker.take();
        drop(state);
        Self::wake(waker);
        self.changed.notify_waiters();
    }

    pub(crate) fn is_closed(&self) -> bool {
        self.lock().closed
    }

    /// Waits until the queue is closed.
    pub(crate) async fn closed(&self) {
        loop {
            let changed = self.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            if self.is_closed() {
                return;
            }
            changed.await;
        }
    }
}

/// A place taken in a [`PacketQueue`] for one send; given back if dropped unused.
#[derive(Debug)]
pub(crate) struct Permit<'a> {
    queue: &'a PacketQueue,
}

impl Permit<'_> {
    /// Queues `packets` in the place this permit holds (dropped if the queue was closed since).
    pub(crate) fn send(self, packets: PacketBuf) {
        let queue = self.queue;
        std::mem::forget(self);
        let mut state = queue.lock();
        state.reserved -= 1;
        if state.closed {
            return;
        }
        state.packets.push_back(packets);
        let waker = state.rx_waker.take();
        drop(state);
        PacketQueue::wake(waker);
    }
}

impl Drop for Permit<'_> {
    fn drop(&mut self) {
        let mut state = self.queue.lock();
        state.reserved -= 1;
        drop(state);
        self.queue.changed.notify_waiters();
    }
}

#[cfg(test)]
mod tests {
    use std::{sync::Arc, time::Duration};

    use engineioxide_core::{Packet, Str};
    use smallvec::smallvec;

    use super::*;

    fn msg(s: &'static str) -> PacketBuf {
        smallvec![Packet::Message(Str::from(s))]
    }

    fn text(p: Option<PacketBuf>) -> Option<String> {
        p.map(|mut p| match p.remove(0) {
            Packet::Message(m) => m.to_string(),
            other => format!("{other:?}"),
        })
    }

    #[test]
    fn bounded_by_capacity_with_permits() {
        let q = PacketQueue::new(2);
        let permit = q.try_reserve().unwrap();
        q.try_send(msg("a")).unwrap();
        assert!(matches!(q.try_send(msg("b")), Err(TrySendError::Full(_))));
        assert!(matches!(q.try_reserve(), Err(TrySendError::Full(()))));
        drop(permit);
        q.try_reserve().unwrap().send(msg("b"));
        assert_eq!(text(q.try_recv()).as_deref(), Some("a"));
        assert_eq!(text(q.try_recv()).as_deref(), Some("b"));
        assert!(q.try_recv().is_none());
    }

    #[test]
    fn holds_no_memory_once_drained() {
        let q = PacketQueue::new(128);
        for _ in 0..100 {
            q.try_send(msg("x")).unwrap();
        }
        while q.try_recv().is_some() {}
        assert_eq!(q.lock().packets.capacity(), 0);
    }

    #[test]
    fn volatile_is_latest_and_after_buffered() {
        let q = PacketQueue::new(4);
        assert!(q.send_volatile(msg("dropped")));
        assert!(q.send_volatile(msg("kept")));
        q.try_send(msg("buffered")).unwrap();
        assert_eq!(text(q.try_recv()).as_deref(), Some("buffered"));
        assert_eq!(text(q.try_recv()).as_deref(), Some("kept"));
        assert!(q.try_recv().is_none());
    }

    #[test]
    fn closed_refuses_but_drains() {
        let q = PacketQueue::new(4);
        q.try_send(msg("a")).unwrap();
        q.close();
        assert!(q.is_closed());
        assert!(matches!(q.try_send(msg("b")), Err(TrySendError::Closed(_))));
        assert!(matches!(q.try_reserve(), Err(TrySendError::Closed(()))));
        assert!(!q.send_volatile(msg("v")));
        assert_eq!(text(q.try_recv()).as_deref(), Some("a"));
        let waker = futures_util::task::noop_waker();
        let mut cx = Context::from_waker(&waker);
        assert!(matches!(q.poll_recv(&mut cx), Poll::Ready(None)));
    }

    #[tokio::test]
    async fn recv_wakes_on_send_and_close() {
        let q = Arc::new(PacketQueue::new(4));
        let rx = tokio::spawn({
            let q = q.clone();
            async move { (text(q.recv().await), q.recv().await.is_none()) }
        });
        tokio::time::sleep(Duration::from_millis(10)).await;
        q.try_send(msg("a")).unwrap();
        tokio::time::sleep(Duration::from_millis(10)).await;
        q.close();
        let (first, ended) = tokio::time::timeout(Duration::from_secs(1), rx)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(first.as_deref(), Some("a"));
        assert!(ended);
    }

    #[tokio::test]
    async fn send_waits_for_a_place_and_closed_for_the_close() {
        let q = Arc::new(PacketQueue::new(1));
        q.try_send(msg("a")).unwrap();
        let sender = tokio::spawn({
            let q = q.clone();
            async move { q.send(msg("b")).await.is_ok() }
        });
        let closed = tokio::spawn({
            let q = q.clone();
            async move { q.closed().await }
        });
        tokio::time::sleep(Duration::from_millis(10)).await;
        assert!(!sender.is_finished());
        assert_eq!(text(q.recv().await).as_deref(), Some("a"));
        assert!(
            tokio::time::timeout(Duration::from_secs(1), sender)
                .await
                .unwrap()
                .unwrap()
        );
        assert_eq!(text(q.recv().await).as_deref(), Some("b"));
        assert!(!closed.is_finished());
        q.close();
        tokio::time::timeout(Duration::from_secs(1), closed)
            .await
            .unwrap()
            .unwrap();
    }
}
