//! The channel a request's events come back on: a [`RequestHandle`] that is both a blocking
//! iterator and an async [`Stream`], with no async runtime (a mutex, a condition variable and a
//! waker).
//!
//! The engine thread sends through an [`EventSender`]; dropping the handle marks the channel
//! closed, which the engine thread sees on its next tick ([`EventSender::is_closed`]) and
//! cancels the request.

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use futures_core::Stream;

use super::Event;

#[derive(Default)]
struct State {
    queue: VecDeque<Event>,
    /// The sender is gone: no event will come after those queued.
    sender_gone: bool,
    /// The handle is gone: the request is cancelled.
    handle_gone: bool,
    /// The task waiting in `poll_next`, if any.
    waker: Option<Waker>,
    /// Threads blocked in `recv`: only then does a send signal the condition variable (a
    /// system call), so an async reader costs no more than a waker per event.
    blocked: usize,
}

#[derive(Default)]
struct Chan {
    state: Mutex<State>,
    ready: Condvar,
}

impl Chan {
    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding this lock leaves a consistent queue: keep using it.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A new channel: the engine keeps the sender, the caller gets the handle. Front ends that
/// script events themselves (tests of an HTTP layer) use it too.
pub fn event_channel() -> (EventSender, RequestHandle) {
    let chan = Arc::new(Chan::default());
    (EventSender { chan: chan.clone() }, RequestHandle { chan, id: 0 })
}

/// The sending side of a request's events.
pub struct EventSender {
    chan: Arc<Chan>,
}

impl std::fmt::Debug for EventSender {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventSender").field("closed", &self.is_closed()).finish()
    }
}

impl EventSender {
    /// Queues an event; `false` when the handle was dropped (nobody will read it).
    pub fn send(&self, event: Event) -> bool {
        let mut st = self.chan.lock();
        if st.handle_gone {
            return false;
        }
        st.queue.push_back(event);
        let waker = st.waker.take();
        let blocked = st.blocked > 0;
        drop(st);
        if blocked {
            self.chan.ready.notify_all();
        }
        if let Some(w) = waker {
            w.wake();
        }
        true
    }

    /// Whether the handle was dropped (the request is cancelled).
    pub fn is_closed(&self) -> bool {
        self.chan.lock().handle_gone
    }
}

impl Drop for EventSender {
    fn drop(&mut self) {
        let mut st = self.chan.lock();
        st.sender_gone = true;
        let waker = st.waker.take();
        drop(st);
        self.chan.ready.notify_all();
        if let Some(w) = waker {
            w.wake();
        }
    }
}

/// A submitted request: its events, in order, ending with [`Event::Done`], [`Event::Error`]
/// or [`Event::Refused`].
///
/// Read it as a blocking iterator (`for event in handle`, [`RequestHandle::recv`]) or as an
/// async [`Stream`] (`StreamExt::next`, [`RequestHandle::next_event`]) under any runtime.
/// Dropping it cancels the request: the engine frees its slot on its next tick.
pub struct RequestHandle {
    chan: Arc<Chan>,
    id: u64,
}

impl std::fmt::Debug for RequestHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RequestHandle").field("id", &self.id).finish_non_exhaustive()
    }
}

impl RequestHandle {
    pub(super) fn with_id(mut self, id: u64) -> Self {
        self.id = id;
        self
    }

    /// The engine's id of the request (as in [`super::SlotInfo::request_id`]; 0 for a handle
    /// of [`event_channel`]).
    pub fn id(&self) -> u64 {
        self.id
    }

    /// The next event, waiting for it; `None` once the last one was read.
    pub fn recv(&mut self) -> Option<Event> {
        let mut st = self.chan.lock();
        loop {
            if let Some(ev) = st.queue.pop_front() {
                return Some(ev);
            }
            if st.sender_gone {
                return None;
            }
            st.blocked += 1;
            st = self.chan.ready.wait(st).unwrap_or_else(|e| e.into_inner());
            st.blocked -= 1;
        }
    }

    /// Like [`RequestHandle::recv`], waiting at most `timeout`: `Err(())` when it passed.
    #[allow(clippy::result_unit_err)]
    pub fn recv_timeout(&mut self, timeout: Duration) -> Result<Option<Event>, ()> {
        let end = Instant::now() + timeout;
        let mut st = self.chan.lock();
        loop {
            if let Some(ev) = st.queue.pop_front() {
                return Ok(Some(ev));
            }
            if st.sender_gone {
                return Ok(None);
            }
            let now = Instant::now();
            if now >= end {
                return Err(());
            }
            st.blocked += 1;
            st = self.chan.ready.wait_timeout(st, end - now).unwrap_or_else(|e| e.into_inner()).0;
            st.blocked -= 1;
        }
    }

    /// The next event if one is queued, without waiting.
    pub fn try_recv(&mut self) -> Option<Event> {
        self.chan.lock().queue.pop_front()
    }

    /// The next event, awaited; `None` once the last one was read.
    pub async fn next_event(&mut self) -> Option<Event> {
        std::future::poll_fn(|cx| Pin::new(&mut *self).poll_next(cx)).await
    }
}

impl Iterator for RequestHandle {
    type Item = Event;

    fn next(&mut self) -> Option<Event> {
        self.recv()
    }
}

impl Stream for RequestHandle {
    type Item = Event;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Event>> {
        let mut st = self.chan.lock();
        if let Some(ev) = st.queue.pop_front() {
            return Poll::Ready(Some(ev));
        }
        if st.sender_gone {
            return Poll::Ready(None);
        }
        st.waker = Some(cx.waker().clone());
        Poll::Pending
    }
}

impl Drop for RequestHandle {
    fn drop(&mut self) {
        let mut st = self.chan.lock();
        st.handle_gone = true;
        st.queue.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decoder::FinishReason;
    use crate::engine::Usage;

    fn done() -> Event {
        Event::Done {
            text: String::new(),
            finish: FinishReason::Length,
            usage: Usage::default(),
            stop_word: None,
        }
    }

    #[test]
    fn events_arrive_in_order_and_end_when_the_sender_goes() {
        let (tx, mut rx) = event_channel();
        let t = std::thread::spawn(move || {
            for i in 0..3 {
                assert!(tx.send(Event::Error(i.to_string())));
            }
            assert!(tx.send(done()));
        });
        let got: Vec<Event> = rx.by_ref().collect();
        t.join().expect("sender thread");
        assert_eq!(got.len(), 4);
        assert_eq!(got[0], Event::Error("0".into()));
        assert_eq!(got[3], done());
        assert_eq!(rx.recv(), None);
    }

    #[test]
    fn dropping_the_handle_closes_the_channel() {
        let (tx, rx) = event_channel();
        assert!(!tx.is_closed());
        drop(rx);
        assert!(tx.is_closed());
        assert!(!tx.send(done()));
    }

    #[test]
    fn recv_timeout_times_out_then_reads() {
        let (tx, mut rx) = event_channel();
        assert_eq!(rx.recv_timeout(Duration::from_millis(5)), Err(()));
        tx.send(done());
        assert_eq!(rx.recv_timeout(Duration::from_millis(5)), Ok(Some(done())));
        drop(tx);
        assert_eq!(rx.recv_timeout(Duration::from_millis(5)), Ok(None));
    }

    #[test]
    fn the_stream_wakes_its_task() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        use std::task::Wake;
        struct Count(AtomicUsize);
        impl Wake for Count {
            fn wake(self: Arc<Self>) {
                self.0.fetch_add(1, Ordering::SeqCst);
            }
        }
        let count = Arc::new(Count(AtomicUsize::new(0)));
        let waker = Waker::from(count.clone());
        let mut cx = Context::from_waker(&waker);
        let (tx, mut rx) = event_channel();
        assert_eq!(Pin::new(&mut rx).poll_next(&mut cx), Poll::Pending);
        tx.send(done());
        assert_eq!(count.0.load(Ordering::SeqCst), 1);
        assert_eq!(Pin::new(&mut rx).poll_next(&mut cx), Poll::Ready(Some(done())));
        drop(tx);
        assert_eq!(Pin::new(&mut rx).poll_next(&mut cx), Poll::Ready(None));
    }
}
