//! The supervisor's desk for checkpoints and restores.
//!
//! A checkpoint is *ordered* here (the file the supervisor opened, owner
//! only, and whether the session stays) and the session is nudged; at its
//! next call that waits for a reply, the session takes its order through
//! its broker ([`crate::ipc::Broker`]), writes the snapshot into the file
//! it was handed (a sandboxed worker opens no path itself), and reports.
//! A restored snapshot is *parked* here under its session's token until a
//! connection of the same peer presents that token (`Resume`); its worker
//! then claims the file.

use crate::ipc::{IpcError, Token};
use std::collections::HashMap;
use std::fs::File;
use std::os::fd::OwnedFd;
use std::path::PathBuf;
use std::sync::mpsc::{Receiver, Sender, channel};
use std::sync::{Arc, Mutex};

/// How a checkpoint went, as the session reports it, or why not.
pub type Done = Result<Written, String>;

/// What a session reports of a checkpoint it wrote, or that it failed.
pub type Report = Result<Wrote, String>;

/// A checkpoint as its session reports it.
#[derive(Debug, Clone, Copy)]
pub struct Wrote {
    /// Bytes of device state in the file.
    pub bytes: u64,
    /// The session's token.
    pub token: Token,
    /// How long the session was held for it, from the call it was taken
    /// at (its work drained, the file written and synced, its memory
    /// handed over) to this report: the checkpoint's part of the
    /// session's pause, without its way to that call.
    pub held: std::time::Duration,
}

/// A checkpoint written.
#[derive(Debug)]
pub struct Written {
    /// Bytes of device state in the file.
    pub bytes: u64,
    /// The session's token.
    pub token: Token,
    /// How long the session was held for it ([`Wrote::held`]).
    pub held: std::time::Duration,
    /// Device memory handed over in place (the driver's descriptors, in
    /// the snapshot's order, as [`Desk::add_handed`] took them): the
    /// snapshot restores only with them.
    pub handed: Vec<OwnedFd>,
}

/// What a session is ordered to do.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OrderKind {
    /// It stays on this backend (`--leave-running`).
    pub stay: bool,
    /// It hands its device memory over in place where it can (a
    /// migration to a backend on the same GPU).
    pub hand_over: bool,
    /// Only its skeleton, while it runs on (`CheckpointRequest::skeleton`).
    pub skeleton: bool,
}

struct Order {
    file: Arc<OwnedFd>,
    kind: OrderKind,
    /// Memory handed over so far.
    handed: Vec<OwnedFd>,
    done: Sender<Done>,
}

/// The most pieces of memory one checkpoint hands over.
pub const MAX_HANDED: usize = 1 << 16;

struct Parked {
    peer: String,
    file: Arc<OwnedFd>,
    path: PathBuf,
    handed: Vec<Arc<OwnedFd>>,
    handed_bytes: u64,
    /// The device memory its session holds once rebuilt, as a quota
    /// counts it.
    held: u64,
}

/// Device memory a session of this backend left on the GPU when it moved
/// (handed over in place), kept until the backend restoring its snapshot
/// takes it.
#[derive(Debug)]
pub struct Kept {
    /// The driver's descriptors, in the snapshot's order.
    pub fds: Vec<OwnedFd>,
    /// Whose session it was.
    pub peer: String,
    /// Its snapshot.
    pub path: PathBuf,
    /// Its bytes.
    pub bytes: u64,
}

/// A claimed snapshot held for its worker.
struct Held {
    scope: String,
    done: Sender<()>,
    handed: Vec<Arc<OwnedFd>>,
}

/// Orders, parked snapshots, and where moved sessions went; and the
/// tickets of copies between backends, which reach sessions the same way
/// ([`crate::peer_copy`]).
#[derive(Default)]
pub struct Desk {
    /// Copies from other backends into these sessions, and to them.
    pub copies: crate::peer_copy::Copies,
    orders: Mutex<HashMap<u64, Order>>,
    parked: Mutex<HashMap<Token, Parked>>,
    /// Token to (peer, the other backend's address).
    moved: Mutex<HashMap<Token, (String, String)>>,
    /// Snapshots handed to workers, held here until the worker is done
    /// with them ([`Desk::release`]).
    held: Mutex<HashMap<Token, Held>>,
    /// Memory sessions of this backend handed over in place, by token,
    /// until the backend they moved to, or this one, takes it.
    handed_out: Mutex<HashMap<Token, Kept>>,
}

/// How long a claimed snapshot is held for its worker at most.
const HOLD: std::time::Duration = std::time::Duration::from_secs(600);

impl std::fmt::Debug for Desk {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Desk").finish_non_exhaustive()
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Desk {
    /// Orders session `id` to checkpoint into `file`; its report comes on
    /// the receiver. A second order replaces the first (whose receiver
    /// then hears nothing).
    pub fn order(&self, id: u64, file: File, kind: OrderKind) -> Receiver<Done> {
        let (done, rx) = channel();
        lock(&self.orders).insert(id, Order { file: Arc::new(file.into()), kind, handed: Vec::new(), done });
        rx
    }

    /// Withdraws session `id`'s order (it timed out, or the session ended).
    pub fn withdraw(&self, id: u64) {
        lock(&self.orders).remove(&id);
    }

    /// Whether session `id` has an order waiting.
    pub fn has_order(&self, id: u64) -> bool {
        lock(&self.orders).contains_key(&id)
    }

    /// Session `id`'s order, if any: the file and what to do.
    pub fn take_order(&self, id: u64) -> Option<(Arc<OwnedFd>, OrderKind)> {
        lock(&self.orders).get(&id).map(|o| (o.file.clone(), o.kind))
    }

    /// Session `id`, checkpointing on an order that asks for it, hands a
    /// piece of its memory over: `Full` past [`MAX_HANDED`], `Unknown`
    /// without such an order.
    pub fn add_handed(&self, id: u64, fd: OwnedFd) -> Result<(), IpcError> {
        let mut orders = lock(&self.orders);
        let o = orders.get_mut(&id).filter(|o| o.kind.hand_over).ok_or(IpcError::Unknown)?;
        if o.handed.len() >= MAX_HANDED {
            return Err(IpcError::Full);
        }
        o.handed.push(fd);
        Ok(())
    }

    /// Session `id` reports its checkpoint, with the memory it handed over
    /// through [`Desk::add_handed`] (dropped if it failed: the session
    /// keeps its memory).
    pub fn report(&self, id: u64, report: Report) {
        if let Some(o) = lock(&self.orders).remove(&id) {
            let _ = o.done.send(report.map(|w| Written { bytes: w.bytes, token: w.token, held: w.held, handed: o.handed }));
        }
    }

    /// Keeps memory the session with `token` handed over in place until a
    /// backend restoring it takes it ([`Desk::take_handed`]).
    pub fn keep_handed(&self, token: Token, kept: Kept) {
        lock(&self.handed_out).insert(token, kept);
    }

    /// The memory the session with `token` handed over in place, once.
    pub fn take_handed(&self, token: &Token) -> Option<Kept> {
        lock(&self.handed_out).remove(token)
    }

    /// Puts back memory [`Desk::take_handed`] gave that did not reach its
    /// backend.
    pub fn put_back_handed(&self, token: Token, kept: Kept) {
        lock(&self.handed_out).entry(token).or_insert(kept);
    }

    /// Drops what this backend holds for the snapshot at `path`: a parked
    /// snapshot no program took, and device memory kept for a session that
    /// left (which then frees it). Returns whether a snapshot was parked,
    /// and the bytes of memory let go. The session's program cannot go on
    /// from that snapshot any more.
    pub fn discard(&self, path: &std::path::Path) -> (bool, u64) {
        let parked = {
            let mut p = lock(&self.parked);
            let before = p.len();
            p.retain(|_, s| s.path != path);
            before != p.len()
        };
        let mut kept = lock(&self.handed_out);
        let gone: Vec<Token> = kept.iter().filter(|(_, k)| k.path == path).map(|(t, _)| *t).collect();
        let bytes = gone.iter().filter_map(|t| kept.remove(t)).map(|k| k.bytes).sum();
        (parked, bytes)
    }

    /// Parks the snapshot at `path` (opened as `file`) of `peer`'s session
    /// under `token`; a snapshot parked under the same token before is
    /// replaced.
    /// `handed` is its memory handed over in place, if it was, of
    /// `handed_bytes`; `held` the device memory its session holds, as a
    /// quota counts it.
    pub fn park(&self, token: Token, peer: String, file: File, path: PathBuf, handed: (Vec<OwnedFd>, u64), held: u64) {
        let (handed, handed_bytes) = (handed.0.into_iter().map(Arc::new).collect(), handed.1);
        lock(&self.parked).insert(token, Parked { peer, file: Arc::new(file.into()), path, handed, handed_bytes, held });
    }

    /// The snapshots of `peer`'s sessions parked here (but `except`'s,
    /// which a new one would replace), and the device memory their
    /// sessions hold: what they take of the peer's quotas once their
    /// programs come back.
    pub fn parked_usage(&self, peer: &str, except: Option<&Token>) -> (usize, u64) {
        let parked = lock(&self.parked);
        let theirs = parked.iter().filter(|(t, p)| p.peer == peer && Some(*t) != except);
        theirs.fold((0, 0), |(n, bytes), (_, p)| (n + 1, bytes.saturating_add(p.held)))
    }

    /// The parked snapshots, then the memory kept for snapshots of
    /// sessions that left: token-free descriptions for operators.
    pub fn parked(&self) -> Vec<pvgpu_ctl::api::Waiting> {
        let show = |peer: &str, path: &std::path::Path, handed_bytes, kept| pvgpu_ctl::api::Waiting {
            peer: peer.to_string(),
            file: path.display().to_string(),
            handed_bytes,
            kept,
        };
        let parked = lock(&self.parked);
        let mut all: Vec<_> = parked.values().map(|p| show(&p.peer, &p.path, p.handed_bytes, false)).collect();
        all.extend(lock(&self.handed_out).values().map(|k| show(&k.peer, &k.path, k.bytes, true)));
        all
    }

    /// Records that `peer`'s session with `token` now lives at `to` (another
    /// backend took its snapshot): its guest's next `Resume` here is sent
    /// there. Kept until the backend stops (a guest may come late).
    pub fn record_move(&self, token: Token, peer: String, to: String) {
        tracing::info!(peer = %peer, to = %to, "a checkpointed session moved to another backend");
        lock(&self.moved).insert(token, (peer, to));
    }

    /// Where `scope`'s session with `token` moved, if it did.
    pub fn moved_to(&self, scope: &str, token: &Token) -> Option<String> {
        lock(&self.moved).get(token).filter(|(peer, _)| peer == scope).map(|(_, to)| to.clone())
    }

    /// Keeps a reference to a claimed snapshot until its worker releases
    /// it, and drops it then on a thread of its own: the last close of a
    /// snapshot nobody names any more (a migration's, removed once handed
    /// over; an upload) frees its memory, about 0.1 s per GiB, which the
    /// worker would otherwise spend just before its guest's first call.
    fn hold(&self, scope: &str, token: &Token, file: Arc<OwnedFd>, handed: Vec<Arc<OwnedFd>>) {
        let (done, wait) = channel::<()>();
        let spawned = std::thread::Builder::new().name("pvgpu-snapshot-hold".into()).spawn(move || {
            let _ = wait.recv_timeout(HOLD);
            drop(file);
        });
        if spawned.is_ok() {
            lock(&self.held).insert(*token, Held { scope: scope.to_string(), done, handed });
        }
    }

    /// Piece `index` of the memory handed over in place with the snapshot
    /// `scope`'s worker claimed for `token`.
    pub fn claimed_handed(&self, scope: &str, token: &Token, index: usize) -> Result<Arc<OwnedFd>, IpcError> {
        let held = lock(&self.held);
        let h = held.get(token).filter(|h| h.scope == scope).ok_or(IpcError::Unknown)?;
        h.handed.get(index).cloned().ok_or(IpcError::Unknown)
    }

    /// The worker of `scope`'s session with `token` is done with its
    /// snapshot (it closed its own descriptor first).
    pub fn release(&self, scope: &str, token: &Token) {
        let mut held = lock(&self.held);
        if held.get(token).is_some_and(|h| h.scope == scope)
            && let Some(h) = held.remove(token)
        {
            let _ = h.done.send(());
        }
    }

    /// Hands the snapshot parked under `token` to a session of `scope`,
    /// once, with how many pieces of memory were handed over in place with
    /// it ([`Desk::claimed_handed`]): `Unknown` for another peer's token
    /// (as for none).
    pub fn claim(&self, scope: &str, token: &Token) -> Result<(Arc<OwnedFd>, usize), IpcError> {
        let mut parked = lock(&self.parked);
        match parked.get(token) {
            Some(p) if p.peer == scope => {
                let p = parked.remove(token).ok_or(IpcError::Unknown)?;
                tracing::info!(peer = scope, path = %p.path.display(), "a guest took back its checkpointed session");
                let n = p.handed.len();
                self.hold(scope, token, p.file.clone(), p.handed);
                Ok((p.file, n))
            }
            Some(p) => {
                if crate::log_limit::peer_triggered() {
                    tracing::warn!(peer = scope, owner = %p.peer, "a resume presented another peer's session token; refused");
                }
                Err(IpcError::Unknown)
            }
            None => Err(IpcError::Unknown),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn memfile() -> File {
        File::from(nix::sys::memfd::memfd_create("pvgpu-test", nix::sys::memfd::MFdFlags::MFD_CLOEXEC).unwrap())
    }

    #[test]
    fn a_move_is_told_to_its_own_peer_only() {
        let desk = Desk::default();
        desk.record_move([3; 16], "uid:1000".into(), "local:/run/b.sock".into());
        assert_eq!(desk.moved_to("uid:1000", &[3; 16]).as_deref(), Some("local:/run/b.sock"));
        assert_eq!(desk.moved_to("uid:1000", &[3; 16]).as_deref(), Some("local:/run/b.sock"), "told again to a late retry");
        assert_eq!(desk.moved_to("uid:1001", &[3; 16]), None, "another peer");
        assert_eq!(desk.moved_to("uid:1000", &[4; 16]), None, "another token");
    }

    #[test]
    fn a_parked_snapshot_goes_to_its_own_peer_once() {
        let desk = Desk::default();
        desk.park([1; 16], "uid:1000".into(), memfile(), "/x".into(), (vec![], 0), 0);
        assert!(desk.claim("uid:1001", &[1; 16]).is_err(), "another peer");
        assert!(desk.claim("uid:1000", &[2; 16]).is_err(), "another token");
        assert!(desk.claim("uid:1000", &[1; 16]).is_ok());
        assert!(desk.claim("uid:1000", &[1; 16]).is_err(), "once");
    }

    #[test]
    fn a_peer_s_parked_snapshots_count_until_their_programs_take_them() {
        let desk = Desk::default();
        desk.park([1; 16], "uid:7".into(), memfile(), "/a".into(), (vec![], 0), 100);
        desk.park([2; 16], "uid:7".into(), memfile(), "/b".into(), (vec![], 0), 20);
        desk.park([3; 16], "uid:8".into(), memfile(), "/c".into(), (vec![], 0), 5);
        assert_eq!(desk.parked_usage("uid:7", None), (2, 120));
        assert_eq!(desk.parked_usage("uid:7", Some(&[2; 16])), (1, 100), "the snapshot a new one replaces");
        desk.claim("uid:7", &[1; 16]).unwrap();
        assert_eq!(desk.parked_usage("uid:7", None), (1, 20), "taken: a live session now, counted as one");
        assert_eq!(desk.parked_usage("uid:9", None), (0, 0));
    }

    #[test]
    fn a_claimed_snapshot_is_held_until_its_own_peer_releases_it() {
        let desk = Desk::default();
        desk.park([1; 16], "uid:1000".into(), memfile(), "/x".into(), (vec![memfile().into()], 1 << 20), 1 << 20);
        assert_eq!(desk.parked().iter().map(|w| (w.handed_bytes, w.kept)).collect::<Vec<_>>(), [(1 << 20, false)]);
        let (fd, handed) = desk.claim("uid:1000", &[1; 16]).unwrap();
        assert_eq!(handed, 1);
        let piece = desk.claimed_handed("uid:1000", &[1; 16], 0).unwrap();
        assert!(desk.claimed_handed("uid:1001", &[1; 16], 0).is_err(), "another peer's");
        assert!(desk.claimed_handed("uid:1000", &[1; 16], 1).is_err(), "no second piece");
        assert_eq!(Arc::strong_count(&fd), 2, "the desk holds one");
        desk.release("uid:1001", &[1; 16]);
        assert_eq!(Arc::strong_count(&fd), 2, "another peer releases nothing");
        desk.release("uid:1000", &[1; 16]);
        assert_eq!(Arc::strong_count(&piece), 1, "its memory released with it");
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while Arc::strong_count(&fd) > 1 {
            assert!(std::time::Instant::now() < deadline, "released");
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }

    #[test]
    fn an_order_is_taken_then_reported() {
        let desk = Desk::default();
        assert!(desk.take_order(3).is_none());
        let rx = desk.order(3, memfile(), OrderKind { stay: true, hand_over: false, skeleton: false });
        assert!(desk.take_order(3).is_some_and(|(_, kind)| kind.stay));
        assert!(desk.add_handed(3, memfile().into()).is_err(), "memory handed over only where the order asks");
        desk.report(3, Ok(Wrote { bytes: 42, token: [0; 16], held: std::time::Duration::from_millis(5) }));
        let w = rx.recv().unwrap().unwrap();
        assert_eq!((w.bytes, w.handed.len(), w.held.as_millis()), (42, 0, 5));
        assert!(desk.take_order(3).is_none());

        let rx = desk.order(4, memfile(), OrderKind { stay: false, hand_over: true, skeleton: false });
        desk.add_handed(4, memfile().into()).unwrap();
        desk.add_handed(4, memfile().into()).unwrap();
        desk.report(4, Ok(Wrote { bytes: 1, token: [9; 16], held: std::time::Duration::ZERO }));
        let w = rx.recv().unwrap().unwrap();
        assert_eq!((w.token, w.handed.len()), ([9; 16], 2), "the pieces handed before the report");
        desk.keep_handed(w.token, Kept { fds: w.handed, peer: "uid:7".into(), path: "/s".into(), bytes: 4 << 20 });
        let listed = desk.parked();
        assert_eq!((listed[0].peer.as_str(), listed[0].handed_bytes, listed[0].kept), ("uid:7", 4 << 20, true), "listed while kept");
        assert_eq!(desk.take_handed(&[9; 16]).map(|k| k.fds.len()), Some(2));
        assert!(desk.parked().is_empty());
        assert!(desk.take_handed(&[9; 16]).is_none(), "once");
    }

    #[test]
    fn what_a_snapshot_holds_here_is_discarded_by_its_path() {
        let desk = Desk::default();
        let piece: std::os::fd::OwnedFd = memfile().into();
        let probe = piece.try_clone().unwrap();
        desk.keep_handed([5; 16], Kept { fds: vec![piece], peer: "uid:7".into(), path: "/a".into(), bytes: 2 << 20 });
        desk.park([6; 16], "uid:7".into(), memfile(), "/b".into(), (vec![], 0), 0);
        assert_eq!(desk.discard(std::path::Path::new("/c")), (false, 0), "nothing of another file");
        assert_eq!(desk.parked().len(), 2);
        assert_eq!(desk.discard(std::path::Path::new("/a")), (false, 2 << 20), "the memory kept for it");
        assert!(desk.take_handed(&[5; 16]).is_none());
        drop(probe);
        assert_eq!(desk.discard(std::path::Path::new("/b")), (true, 0), "the parked snapshot");
        assert!(desk.claim("uid:7", &[6; 16]).is_err(), "gone");
        assert!(desk.parked().is_empty());
    }
}
