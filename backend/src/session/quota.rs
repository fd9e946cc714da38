//! What a session holds on the device, as its quota and its peer's ledger
//! count it.

use super::Session;
use crate::exec::Executor;

impl<E: Executor> Session<E> {
    /// Device memory the session holds in all, as the quota counts it.
    pub(super) fn charged(&self) -> u64 {
        self.mem_used.saturating_add(self.overhead)
    }

    /// Whether `more` bytes of allocations would pass the session's quota
    /// or its peer's. Within them, the peer's ledger holds the amount for
    /// this session until the request ends ([`Session::settle`]), so
    /// sessions of one peer allocating at once cannot pass its quota
    /// together.
    pub(super) fn over_quota(&self, more: u64) -> bool {
        let want = self.charged().saturating_add(more);
        self.limits.mem_quota.is_some_and(|q| want > q) || self.limits.peer_ledger.as_ref().is_some_and(|l| !l.reserve(want))
    }

    /// Tells the peer's ledger what the session holds now that a request
    /// is done (what was reserved for an allocation that failed goes back).
    pub(super) fn settle(&self) {
        if let Some(l) = &self.limits.peer_ledger {
            l.settle(self.charged());
        }
    }

    /// Measures what the session holds on the device besides its
    /// allocations and its first context (where the executor can tell, and
    /// the process serves only this session), and says whether the quota
    /// still holds. Called
    /// after each operation that makes the driver reserve memory: the
    /// caller undoes the operation when it does not.
    pub(super) fn remeasure(&mut self) -> bool {
        if !self.limits.footprint {
            return true;
        }
        if let Some(fp) = self.exec.process_footprint() {
            // The first measurement follows the first context's creation.
            let besides = fp.saturating_sub(self.mem_used);
            let base = *self.baseline.get_or_insert(besides);
            self.overhead = besides.saturating_sub(base);
            tracing::debug!(session = self.id, footprint = fp, overhead = self.overhead, "device footprint measured");
        }
        !self.over_quota(0)
    }
}
