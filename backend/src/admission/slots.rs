//! Session slots: how many sessions are served at once, in all, over each
//! transport, and of one peer over each transport.

use crate::handover::Transport;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// Limits of one transport's sessions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TransportLimit {
    /// Sessions over the transport.
    pub total: usize,
    /// Sessions of one peer over it.
    pub per_peer: usize,
}

impl TransportLimit {
    /// `total` sessions, and of one peer `per_peer`, or a quarter of
    /// `total` (at least one) when unset: one peer never takes every slot
    /// unless the operator says so.
    pub fn new(total: usize, per_peer: Option<usize>) -> Self {
        TransportLimit { total, per_peer: per_peer.unwrap_or((total / 4).max(1)) }
    }
}

/// Limits on sessions held at once.
#[derive(Debug, Clone, Copy)]
pub struct SlotLimits {
    /// In all.
    pub total: usize,
    /// Per session class of [`Transport::session_class`]: local, TCP
    /// (with TLS), Xen.
    pub per_transport: [TransportLimit; 3],
}

/// Which limit turned a peer away.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Full {
    /// Every slot is taken.
    #[error("all {0} session slots are taken (--max-sessions)")]
    Total(usize),
    /// Every slot of the transport is taken.
    #[error("all {1} {0} session slots are taken (--max-{0}-sessions)")]
    Transport(&'static str, usize),
    /// The peer holds as many as it may.
    #[error("the peer holds {0} sessions, its most (--max-sessions-per-peer)")]
    Peer(usize),
}

#[derive(Debug, Default)]
struct Counts {
    total: usize,
    transport: [usize; 3],
    peer: HashMap<(usize, String), usize>,
}

/// Counted session slots.
#[derive(Debug)]
pub struct Slots {
    limits: SlotLimits,
    counts: Mutex<Counts>,
}

/// One slot, given back when dropped.
#[derive(Debug)]
pub struct Slot {
    slots: Arc<Slots>,
    class: usize,
    peer: String,
}

impl Slot {
    /// The peer that holds it.
    pub fn peer(&self) -> &str {
        &self.peer
    }
}

impl Slots {
    /// Slots under `limits`.
    pub fn new(limits: SlotLimits) -> Arc<Slots> {
        Arc::new(Slots { limits, counts: Mutex::new(Counts::default()) })
    }

    /// Takes a slot for `peer` over `transport`.
    pub fn acquire(self: &Arc<Self>, transport: Transport, peer: &str) -> Result<Slot, Full> {
        self.acquire_within(transport, peer, None)
    }

    /// Takes a slot for `peer` over `transport`, where the peer may hold
    /// `per_peer` sessions of the transport (a tenant's own limit) instead
    /// of the transport's default.
    pub fn acquire_within(self: &Arc<Self>, transport: Transport, peer: &str, per_peer: Option<usize>) -> Result<Slot, Full> {
        let class = transport.session_class();
        let mut limit = self.limits.per_transport[class];
        if let Some(n) = per_peer {
            limit.per_peer = n;
        }
        let mut c = self.counts.lock().unwrap_or_else(|p| p.into_inner());
        if c.total >= self.limits.total {
            return Err(Full::Total(self.limits.total));
        }
        if c.transport[class] >= limit.total {
            return Err(Full::Transport(transport.session_class_name(), limit.total));
        }
        let key = (class, peer.to_string());
        let held = c.peer.get(&key).copied().unwrap_or(0);
        if held >= limit.per_peer {
            return Err(Full::Peer(limit.per_peer));
        }
        c.total += 1;
        c.transport[class] += 1;
        *c.peer.entry(key).or_default() += 1;
        Ok(Slot { slots: self.clone(), class, peer: peer.to_string() })
    }

    /// Slots held now.
    pub fn held(&self) -> usize {
        self.counts.lock().unwrap_or_else(|p| p.into_inner()).total
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut c = self.slots.counts.lock().unwrap_or_else(|p| p.into_inner());
        c.total -= 1;
        c.transport[self.class] -= 1;
        let key = (self.class, std::mem::take(&mut self.peer));
        if let Some(n) = c.peer.get_mut(&key) {
            *n -= 1;
            if *n == 0 {
                c.peer.remove(&key);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_count_in_all_per_transport_and_per_peer() {
        let t = |total, per_peer| TransportLimit { total, per_peer };
        let s = Slots::new(SlotLimits { total: 5, per_transport: [t(4, 2), t(2, 2), t(4, 2)] });
        let a = s.acquire(Transport::Tcp, "tcp:10.0.0.1").unwrap();
        let _b = s.acquire(Transport::Tls, "tcp:10.0.0.2").unwrap();
        assert_eq!(s.acquire(Transport::Tcp, "tcp:10.0.0.3").unwrap_err(), Full::Transport("tcp", 2));
        let _c = s.acquire(Transport::Local, "uid:1000").unwrap();
        let _d = s.acquire(Transport::Local, "uid:1000").unwrap();
        assert_eq!(s.acquire(Transport::Local, "uid:1000").unwrap_err(), Full::Peer(2));
        let e = s.acquire(Transport::Xen, "xen:5").unwrap();
        assert_eq!(s.acquire(Transport::Xen, "xen:6").unwrap_err(), Full::Total(5));
        drop(a);
        let _f = s.acquire(Transport::Xen, "xen:6").unwrap();
        assert_eq!(s.held(), 5);
        drop(e);
        assert_eq!(s.held(), 4);
    }

    /// Unset, one peer may hold a quarter of a transport's sessions.
    #[test]
    fn a_peer_holds_a_quarter_unless_told_otherwise() {
        assert_eq!(TransportLimit::new(16, None).per_peer, 4);
        assert_eq!(TransportLimit::new(2, None).per_peer, 1);
        assert_eq!(TransportLimit::new(16, Some(16)).per_peer, 16);
        let lim = TransportLimit::new(8, None);
        let s = Slots::new(SlotLimits { total: 64, per_transport: [lim; 3] });
        let held: Vec<_> = (0..2).map(|_| s.acquire(Transport::Tcp, "tcp:10.0.0.1").unwrap()).collect();
        assert_eq!(s.acquire(Transport::Tls, "tcp:10.0.0.1").unwrap_err(), Full::Peer(2));
        // Another address has room; the same user over another transport too.
        s.acquire(Transport::Tcp, "tcp:10.0.0.2").unwrap();
        s.acquire(Transport::Local, "tcp:10.0.0.1").unwrap();
        drop(held);
    }
}
