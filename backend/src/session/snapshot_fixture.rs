//! Sessions of the host executor checkpointed into memory and restored
//! from a description a test changed: the unit tests of what snapshots
//! carry (`array_moves`, `pool`).

use super::{Io, Session, device};
use crate::config::SessionLimits;
use crate::exec::host::HostExecutor;
use pvgpu_ctl::snapshot::{Meta, Reader, Writer};
use pvgpu_ring::proto;
use std::sync::Arc;

/// A session with `cuInit` done and a context; the context's id. It has
/// a token, so it may be checkpointed.
pub(super) fn session() -> (Session<HostExecutor>, u64) {
    let mut s = Session::new(Arc::new(HostExecutor::new(64 << 20)), 1, SessionLimits::default());
    let mut out = Vec::new();
    device::init(&mut s, proto::Init {}, &mut Io::internal(&mut out)).unwrap();
    let ctx = device::ctx_create(&mut s, proto::CtxCreate { device: 0.into(), flags: 0.into() }, &mut Io::internal(&mut out))
        .unwrap()
        .handle
        .get();
    s.token = [7; 16];
    (s, ctx)
}

/// The session's snapshot, its description changed by `change`.
pub(super) fn snapshot(s: &mut Session<HostExecutor>, change: impl FnOnce(&mut Meta)) -> Vec<u8> {
    let file = checkpoint(s).unwrap();
    let (mut r, mut meta) = Reader::open(&file[..], file.len() as u64).unwrap();
    change(&mut meta);
    let blobs: Vec<Vec<u8>> = (0..r.blobs_left()).map(|_| r.blob().unwrap()).collect();
    let mut w = Writer::new(Vec::new(), &meta, blobs.len() as u32).unwrap();
    blobs.iter().for_each(|b| w.blob(b).unwrap());
    w.finish().unwrap()
}

/// The session's snapshot as it writes it into a file.
pub(super) fn checkpoint(s: &mut Session<HostExecutor>) -> Result<Vec<u8>, super::CheckpointError> {
    let file = std::fs::File::from(nix::sys::memfd::memfd_create("pvgpu-test", nix::sys::memfd::MFdFlags::MFD_CLOEXEC).unwrap());
    s.checkpoint(&file, "test", false, false)?;
    let mut bytes = Vec::new();
    std::io::Read::read_to_end(&mut &file, &mut bytes).unwrap();
    Ok(bytes)
}

/// A new session rebuilt from `file`.
pub(super) fn restore(file: &[u8]) -> Result<Session<HostExecutor>, super::RestoreError> {
    let mut s = Session::new(Arc::new(HostExecutor::new(64 << 20)), 2, SessionLimits::default());
    let (mut r, meta) = Reader::open(std::io::Cursor::new(file), file.len() as u64)?;
    s.restore(&meta, &mut r, None, None, Vec::new())?;
    r.finish()?;
    Ok(s)
}
