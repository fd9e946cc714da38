//! Host functions of a session's graphs, run in the program.
//!
//! A host node (or a host function captured on a stream) runs the program's
//! function, which only the program can call. The executor makes such a
//! node call [`HostCalls::call`] (the GPU executor from a thread of the
//! driver, the host double from its replay): the call is queued here and
//! the node holds its graph until the program has run the function. The
//! session's serving loop takes queued calls ([`HostCalls::take_due`]),
//! sends each to the program while the program waits in `HostCallWait`,
//! and reports each answer ([`HostCalls::finish`]).
//!
//! A session that ends [closes](HostCalls::close) its queue: held nodes go
//! on at once without their function, so the driver's threads are never
//! left waiting for a program that is gone.

use std::collections::{HashSet, VecDeque};
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::Duration;

/// A host function due in the program.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HostCall {
    /// Answered by the program when it has run the function.
    pub id: u64,
    /// The program's function.
    pub func: u64,
    /// Its data.
    pub data: u64,
}

#[derive(Default)]
struct State {
    next_id: u64,
    /// Queued, not yet sent to the program.
    due: VecDeque<HostCall>,
    /// Sent, not yet answered.
    sent: HashSet<u64>,
    /// Answered, not yet seen by their waiter.
    finished: HashSet<u64>,
    closed: bool,
}

/// One session's queue of host calls (shared with the driver's threads).
#[derive(Default)]
pub struct HostCalls {
    state: Mutex<State>,
    changed: Condvar,
}

impl HostCalls {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Queues a call of `func(data)` and returns its id without waiting
    /// (the host double, which checks [`HostCalls::is_finished`] later).
    /// `None` once the queue is closed.
    pub fn queue(&self, func: u64, data: u64) -> Option<u64> {
        let mut s = self.lock();
        if s.closed {
            return None;
        }
        s.next_id += 1;
        let id = s.next_id;
        s.due.push_back(HostCall { id, func, data });
        self.changed.notify_all();
        Some(id)
    }

    /// Queues a call of `func(data)` and waits until the program has run it
    /// or the queue is closed (a driver thread, running a host node).
    pub fn call(&self, func: u64, data: u64) {
        let Some(id) = self.queue(func, data) else { return };
        let mut s = self.lock();
        while !s.closed && !s.finished.contains(&id) {
            s = self.changed.wait(s).unwrap_or_else(|p| p.into_inner());
        }
        s.finished.remove(&id);
    }

    /// Whether call `id` has been answered (and forgets it if so).
    pub fn is_finished(&self, id: u64) -> bool {
        let mut s = self.lock();
        s.closed || s.finished.remove(&id)
    }

    /// Takes the calls due, marking them sent.
    pub fn take_due(&self) -> Vec<HostCall> {
        let mut s = self.lock();
        let due: Vec<HostCall> = s.due.drain(..).collect();
        s.sent.extend(due.iter().map(|c| c.id));
        due
    }

    /// The program answered call `id`; `false` if no such call was sent.
    pub fn finish(&self, id: u64) -> bool {
        let mut s = self.lock();
        if !s.sent.remove(&id) {
            return false;
        }
        s.finished.insert(id);
        self.changed.notify_all();
        true
    }

    /// Waits up to `t` for a call to come due; whether one is.
    pub fn wait_due(&self, t: Duration) -> bool {
        let s = self.lock();
        if !s.due.is_empty() {
            return true;
        }
        let (s, _) = self.changed.wait_timeout(s, t).unwrap_or_else(|p| p.into_inner());
        !s.due.is_empty()
    }

    /// Ends the queue: waiting nodes go on without their function, and new
    /// calls are skipped.
    pub fn close(&self) {
        let mut s = self.lock();
        s.closed = true;
        s.due.clear();
        s.sent.clear();
        self.changed.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn a_call_waits_for_its_answer() {
        let q = Arc::new(HostCalls::default());
        let node = {
            let q = q.clone();
            std::thread::spawn(move || q.call(7, 8))
        };
        assert!(q.wait_due(Duration::from_secs(10)));
        let due = q.take_due();
        assert_eq!(due, [HostCall { id: 1, func: 7, data: 8 }]);
        assert!(!q.finish(2), "an id never sent");
        assert!(!node.is_finished());
        assert!(q.finish(1));
        node.join().unwrap();
        assert!(!q.finish(1), "answered twice");
    }

    #[test]
    fn closing_releases_waiting_nodes() {
        let q = Arc::new(HostCalls::default());
        let node = {
            let q = q.clone();
            std::thread::spawn(move || q.call(1, 2))
        };
        assert!(q.wait_due(Duration::from_secs(10)));
        q.close();
        node.join().unwrap();
        assert_eq!(q.queue(1, 2), None);
        assert!(q.take_due().is_empty());
    }
}
