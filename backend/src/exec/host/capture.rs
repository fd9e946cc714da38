//! Stream capture in the host test double: work issued on a capturing
//! stream becomes a node depending on the stream's current dependencies;
//! an event recorded during capture carries them to the streams that wait
//! for it (which join the capture); ending the capture hands back the
//! graph. What the driver refuses during capture is refused here too.

use super::graph::Graphs;
use super::graph::Op;
use crate::exec::CuRes;
use pvgpu_ring::CuError;
use pvgpu_ring::cuda::api::*;
use std::collections::HashSet;

/// A stream's part in a capture.
pub(super) struct Capture {
    id: u64,
    graph: u64,
    deps: Vec<u64>,
    mode: u32,
    origin: u64,
    invalidated: bool,
    /// The capture made its graph (else it captures into the program's).
    owned: bool,
}

impl Graphs {
    /// Whether stream `s` is capturing (invalidated captures count).
    pub(super) fn capturing(&self, s: Option<u64>) -> bool {
        s.is_some_and(|s| self.captures.contains_key(&s))
    }

    /// Whether a capture that forbids unsafe calls is under way.
    pub(super) fn strict_capture(&self) -> bool {
        self.captures.values().any(|c| c.mode != CU_STREAM_CAPTURE_MODE_RELAXED.0)
    }

    /// An unsafe call during a strict capture: every such capture is
    /// invalidated, and the call fails; unless the calling thread is in
    /// relaxed mode, which the driver lets make such calls.
    pub(super) fn refuse_unsafe(&mut self) -> CuRes<()> {
        if !self.strict_capture() || self.mode == CU_STREAM_CAPTURE_MODE_RELAXED.0 {
            return Ok(());
        }
        for c in self.captures.values_mut().filter(|c| c.mode != CU_STREAM_CAPTURE_MODE_RELAXED.0) {
            c.invalidated = true;
        }
        Err(CuError::STREAM_CAPTURE_UNSUPPORTED)
    }

    /// Synchronising the context waits for capturing streams too: illegal
    /// in any capture mode, it invalidates every capture.
    pub(super) fn refuse_sync(&mut self) -> CuRes<()> {
        if self.captures.is_empty() {
            return Ok(());
        }
        self.captures.values_mut().for_each(|c| c.invalidated = true);
        Err(CuError::STREAM_CAPTURE_UNSUPPORTED)
    }

    /// A call that waits on stream `s`, which a capture forbids: the
    /// capture is invalidated and the call fails.
    pub(super) fn refuse_wait(&mut self, s: u64) -> CuRes<()> {
        if self.capturing(Some(s)) { Err(self.invalidate(s)) } else { Ok(()) }
    }

    /// Invalidates the capture of stream `s` (an illegal call on it).
    pub(super) fn invalidate(&mut self, s: u64) -> CuError {
        if let Some(id) = self.captures.get(&s).map(|c| c.id) {
            self.captures.values_mut().filter(|c| c.id == id).for_each(|c| c.invalidated = true);
        }
        CuError::STREAM_CAPTURE_UNSUPPORTED
    }

    /// Records `op` as work on capturing stream `s`.
    pub(super) fn record(&mut self, s: u64, op: Op) -> CuRes<u64> {
        let c = self.captures.get(&s).ok_or(CuError::INVALID_VALUE)?;
        if c.invalidated {
            return Err(CuError::STREAM_CAPTURE_INVALIDATED);
        }
        let (g, deps) = (c.graph, c.deps.clone());
        let n = self.add(g, &deps, op)?;
        if let Some(c) = self.captures.get_mut(&s) {
            c.deps = vec![n];
        }
        Ok(n)
    }

    pub(super) fn begin(&mut self, s: u64, mode: u32) -> CuRes<()> {
        if self.captures.contains_key(&s) {
            return Err(CuError::ILLEGAL_STATE);
        }
        let graph = self.create();
        let id = self.id();
        self.captures.insert(s, Capture { id, graph, deps: Vec::new(), mode, origin: s, invalidated: false, owned: true });
        Ok(())
    }

    /// Begins a capture into graph `g`, after its nodes `deps`.
    pub(super) fn begin_into(&mut self, s: u64, g: u64, deps: &[u64], mode: u32) -> CuRes<()> {
        if self.captures.contains_key(&s) {
            return Err(CuError::ILLEGAL_STATE);
        }
        let graph = self.graph(g)?;
        if deps.iter().any(|d| self.node_graph.get(d) != Some(&g)) || (graph.borrowed && !graph.body) {
            return Err(CuError::INVALID_VALUE);
        }
        let id = self.id();
        self.captures.insert(s, Capture { id, graph: g, deps: deps.to_vec(), mode, origin: s, invalidated: false, owned: false });
        Ok(())
    }

    /// What the next work captured on `s` follows: `deps` added, or
    /// instead of what it followed (`set`).
    pub(super) fn update_deps(&mut self, s: u64, deps: &[u64], set: bool) -> CuRes<()> {
        let c = self.captures.get(&s).ok_or(CuError::ILLEGAL_STATE)?;
        if deps.iter().any(|d| self.node_graph.get(d) != Some(&c.graph)) {
            return Err(CuError::INVALID_VALUE);
        }
        let c = self.captures.get_mut(&s).ok_or(CuError::ILLEGAL_STATE)?;
        if set {
            c.deps.clear();
        }
        for &d in deps {
            if !c.deps.contains(&d) {
                c.deps.push(d);
            }
        }
        Ok(())
    }

    pub(super) fn end(&mut self, s: u64) -> CuRes<u64> {
        let c = self.captures.get(&s).ok_or(CuError::ILLEGAL_STATE)?;
        if c.origin != s {
            return Err(CuError::STREAM_CAPTURE_UNMATCHED);
        }
        let (id, graph, invalidated, owned) = (c.id, c.graph, c.invalidated, c.owned);
        let unjoined = self.captures.iter().any(|(&o, other)| o != s && other.id == id && !self.joined(other, c));
        let streams: Vec<u64> = self.captures.iter().filter(|(_, x)| x.id == id).map(|(&o, _)| o).collect();
        for o in streams {
            self.captures.remove(&o);
        }
        self.marks.retain(|_, (cid, _)| *cid != id);
        if invalidated || unjoined {
            // The driver answers an unjoined fork as it answers any
            // invalidated capture.
            if owned {
                let _ = self.destroy(graph);
            }
            return Err(CuError::STREAM_CAPTURE_INVALIDATED);
        }
        Ok(graph)
    }

    /// Whether every node a forked stream added precedes the origin's
    /// current dependencies.
    fn joined(&self, forked: &Capture, origin: &Capture) -> bool {
        let Ok(graph) = self.graph(origin.graph) else { return false };
        let mut before: HashSet<u64> = origin.deps.iter().copied().collect();
        let mut stack: Vec<u64> = origin.deps.clone();
        while let Some(n) = stack.pop() {
            for (a, _) in graph.edges.iter().filter(|(_, b)| *b == n) {
                if before.insert(*a) {
                    stack.push(*a);
                }
            }
        }
        forked.deps.iter().all(|d| before.contains(d))
    }

    /// (status, id, graph, deps) of stream `s`.
    pub(super) fn info_of(&self, s: Option<u64>) -> (u32, u64, Option<u64>, Vec<u64>) {
        match s.and_then(|s| self.captures.get(&s)) {
            None => (CU_STREAM_CAPTURE_STATUS_NONE.0, 0, None, Vec::new()),
            Some(c) if c.invalidated => (CU_STREAM_CAPTURE_STATUS_INVALIDATED.0, c.id, Some(c.graph), Vec::new()),
            Some(c) => (CU_STREAM_CAPTURE_STATUS_ACTIVE.0, c.id, Some(c.graph), c.deps.clone()),
        }
    }

    /// An event recorded on capturing stream `s`: it carries the
    /// stream's dependencies to whoever waits for it.
    pub(super) fn mark(&mut self, e: u64, s: u64) -> CuRes<()> {
        let c = self.captures.get(&s).ok_or(CuError::INVALID_VALUE)?;
        self.marks.insert(e, (c.id, c.deps.clone()));
        Ok(())
    }

    /// Event `e` was recorded outside any capture.
    pub(super) fn unmark(&mut self, e: u64) {
        self.marks.remove(&e);
    }

    /// Whether event `e` was last recorded during a capture.
    pub(super) fn marked(&self, e: u64) -> bool {
        self.marks.contains_key(&e)
    }

    /// Stream `s` waits for event `e`: a marked event makes `s` join its
    /// capture (or adds its dependencies). Returns whether it was marked.
    pub(super) fn wait(&mut self, s: Option<u64>, e: u64) -> CuRes<bool> {
        let Some((id, deps)) = self.marks.get(&e).cloned() else { return Ok(false) };
        let s = s.ok_or(CuError::STREAM_CAPTURE_IMPLICIT)?;
        match self.captures.get_mut(&s) {
            Some(c) if c.id == id => {
                for d in deps {
                    if !c.deps.contains(&d) {
                        c.deps.push(d);
                    }
                }
            }
            Some(_) => return Err(CuError::STREAM_CAPTURE_MERGE),
            None => {
                let origin = self.captures.values().find(|c| c.id == id).ok_or(CuError::INVALID_VALUE)?;
                let (graph, mode, origin) = (origin.graph, origin.mode, origin.origin);
                self.captures.insert(s, Capture { id, graph, deps, mode, origin, invalidated: false, owned: false });
            }
        }
        Ok(true)
    }
}
