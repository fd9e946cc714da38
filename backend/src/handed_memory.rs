//! Device memory handed over in place, from the backend a session left to
//! the backend that restores it on the same GPU (`pvgpu-ctl migrate` on
//! one host): the driver's descriptors of the memory travel from
//! supervisor to supervisor over a Unix socket beside the snapshot, never
//! in it.
//!
//! The source serves them once, at `<snapshot>.handed` (a `SOCK_SEQPACKET`
//! socket, owner-only, and only to a peer of its own user), for as long as
//! the checkpoint's timeout; the target fetches them when the snapshot is
//! restored there (`POST /v1/restore` with `handed_from`), after every
//! other check of the snapshot has passed. Memory nobody fetched stays with
//! the source, which restores the snapshot itself (`pvgpu-ctl restore` at
//! the source).
//!
//! Messages: the first holds the number of pieces (a little-endian `u32`),
//! each next one a piece's index and up to [`BATCH`] descriptors in order.

use crate::checkpoints::{Desk, MAX_HANDED};
use crate::ipc::Token;
use nix::sys::socket::{
    AddressFamily, Backlog, ControlMessage, ControlMessageOwned, MsgFlags, SockFlag, SockType, UnixAddr, accept, bind, connect, getsockopt,
    listen, recvmsg, sendmsg, socket, sockopt,
};
use std::io::{self, IoSlice, IoSliceMut};
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Descriptors per message.
const BATCH: usize = 64;
/// How long one side waits for the other's next message.
const STEP: Duration = Duration::from_secs(10);

/// Serves the memory `desk` keeps for `token` at `path`, once, for `life`;
/// removes the socket then.
pub fn serve(desk: Arc<Desk>, token: Token, path: PathBuf, life: Duration) -> io::Result<()> {
    let sock = socket(AddressFamily::Unix, SockType::SeqPacket, SockFlag::SOCK_CLOEXEC | SockFlag::SOCK_NONBLOCK, None)?;
    bind(sock.as_raw_fd(), &UnixAddr::new(&path)?)?;
    std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o600))?;
    listen(&sock, Backlog::new(4).map_err(io::Error::from)?)?;
    std::thread::Builder::new().name("pvgpu-handed".into()).spawn(move || {
        let deadline = Instant::now() + life;
        while Instant::now() < deadline {
            match accept(sock.as_raw_fd()) {
                Ok(raw) => {
                    // SAFETY: `accept` just opened this descriptor for us.
                    let conn = unsafe { OwnedFd::from_raw_fd(raw) };
                    if hand(&desk, &token, &conn) {
                        break;
                    }
                }
                Err(nix::errno::Errno::EAGAIN | nix::errno::Errno::EINTR) => std::thread::sleep(Duration::from_millis(2)),
                Err(e) => {
                    tracing::warn!(error = %e, "serving memory handed over in place failed");
                    break;
                }
            }
        }
        let _ = std::fs::remove_file(&path);
    })?;
    Ok(())
}

/// Sends the memory kept for `token` over `conn`; whether it is gone from
/// here (sent, or taken by a restore here before).
fn hand(desk: &Desk, token: &Token, conn: &OwnedFd) -> bool {
    match getsockopt(conn, sockopt::PeerCredentials) {
        Ok(c) if c.uid() == nix::unistd::geteuid().as_raw() => {}
        other => {
            tracing::warn!(peer = ?other.map(|c| c.uid()), "a process of another user asked for memory handed over in place; refused");
            return false;
        }
    }
    let Some(kept) = desk.take_handed(token) else { return true };
    match send_all(conn, &kept.fds) {
        Ok(()) => {
            tracing::info!(pieces = kept.fds.len(), "device memory handed over in place to the backend that restores it");
            true
        }
        Err(e) => {
            tracing::warn!(error = %e, "handing memory over in place failed; the backend keeps it");
            desk.put_back_handed(*token, kept);
            false
        }
    }
}

fn send_all(conn: &OwnedFd, fds: &[OwnedFd]) -> io::Result<()> {
    set_blocking(conn)?;
    send(conn, &(fds.len() as u32).to_le_bytes(), &[])?;
    for (i, batch) in fds.chunks(BATCH).enumerate() {
        let raw: Vec<RawFd> = batch.iter().map(|f| f.as_raw_fd()).collect();
        send(conn, &((i * BATCH) as u32).to_le_bytes(), &raw)?;
    }
    // The peer's answer: every piece arrived.
    let (got, _) = recv(conn)?;
    if got != fds.len() as u32 {
        return Err(io::Error::other(format!("the peer took {got} of {} pieces", fds.len())));
    }
    Ok(())
}

/// Fetches the `expected` pieces of memory handed over in place served at
/// `path`. Another count is refused before any piece is taken: the source
/// then keeps them all.
pub fn fetch(path: &Path, expected: usize) -> io::Result<Vec<OwnedFd>> {
    let sock = socket(AddressFamily::Unix, SockType::SeqPacket, SockFlag::SOCK_CLOEXEC, None)?;
    connect(sock.as_raw_fd(), &UnixAddr::new(path)?)?;
    set_blocking(&sock)?;
    let (total, none) = recv(&sock)?;
    if !none.is_empty() || total as usize > MAX_HANDED || total as usize != expected {
        return Err(io::Error::other(format!("{total} pieces served, of {expected}")));
    }
    let mut fds = Vec::with_capacity(total as usize);
    while fds.len() < total as usize {
        let (at, mut got) = recv(&sock)?;
        if at as usize != fds.len() || got.is_empty() || fds.len() + got.len() > total as usize {
            return Err(io::Error::other("pieces out of order"));
        }
        fds.append(&mut got);
    }
    send(&sock, &total.to_le_bytes(), &[])?;
    Ok(fds)
}

fn set_blocking(fd: &OwnedFd) -> io::Result<()> {
    use nix::fcntl::{FcntlArg, OFlag, fcntl};
    let flags = OFlag::from_bits_truncate(fcntl(fd.as_fd(), FcntlArg::F_GETFL)?);
    fcntl(fd.as_fd(), FcntlArg::F_SETFL(flags - OFlag::O_NONBLOCK))?;
    let t = nix::sys::time::TimeVal::new(STEP.as_secs() as i64, 0);
    nix::sys::socket::setsockopt(fd, sockopt::ReceiveTimeout, &t)?;
    nix::sys::socket::setsockopt(fd, sockopt::SendTimeout, &t)?;
    Ok(())
}

fn send(fd: &OwnedFd, word: &[u8; 4], fds: &[RawFd]) -> io::Result<()> {
    let cmsg: Vec<ControlMessage<'_>> = if fds.is_empty() { vec![] } else { vec![ControlMessage::ScmRights(fds)] };
    loop {
        match sendmsg::<()>(fd.as_raw_fd(), &[IoSlice::new(word)], &cmsg, MsgFlags::MSG_NOSIGNAL, None) {
            Err(nix::errno::Errno::EINTR) => continue,
            r => return r.map(drop).map_err(io::Error::from),
        }
    }
}

/// The next message's word and descriptors.
fn recv(fd: &OwnedFd) -> io::Result<(u32, Vec<OwnedFd>)> {
    let mut word = [0u8; 4];
    let mut space = nix::cmsg_space!([RawFd; BATCH]);
    loop {
        let mut iov = [IoSliceMut::new(&mut word)];
        let msg = match recvmsg::<()>(fd.as_raw_fd(), &mut iov, Some(&mut space), MsgFlags::MSG_CMSG_CLOEXEC) {
            Err(nix::errno::Errno::EINTR) => continue,
            r => r.map_err(io::Error::from)?,
        };
        let mut fds = Vec::new();
        for c in msg.cmsgs().map_err(io::Error::from)? {
            if let ControlMessageOwned::ScmRights(raw) = c {
                // SAFETY: the kernel just installed these descriptors in this
                // process for us; nothing else owns them.
                fds.extend(raw.into_iter().map(|r| unsafe { OwnedFd::from_raw_fd(r) }));
            }
        }
        if msg.bytes != 4 || msg.flags.intersects(MsgFlags::MSG_TRUNC | MsgFlags::MSG_CTRUNC) {
            return Err(io::Error::other("a malformed message"));
        }
        return Ok((u32::from_le_bytes(word), fds));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Seek, Write};

    fn socket_path(name: &str) -> PathBuf {
        let p = std::env::temp_dir().join(format!("pvgpu-handed-{}-{name}", std::process::id()));
        let _ = std::fs::remove_file(&p);
        p
    }

    fn kept(fds: Vec<OwnedFd>) -> crate::checkpoints::Kept {
        crate::checkpoints::Kept { fds, peer: "uid:1".into(), path: "/s".into(), bytes: 0 }
    }

    fn memfile(text: &str) -> OwnedFd {
        let fd = nix::sys::memfd::memfd_create("pvgpu-test", nix::sys::memfd::MFdFlags::MFD_CLOEXEC).unwrap();
        let mut f = std::fs::File::from(fd);
        f.write_all(text.as_bytes()).unwrap();
        f.into()
    }

    #[test]
    fn memory_handed_over_reaches_the_fetching_backend_once_and_in_order() {
        let path = socket_path("s");
        let desk = Arc::new(Desk::default());
        let n = BATCH + 3;
        desk.keep_handed([5; 16], kept((0..n).map(|i| memfile(&format!("piece {i}"))).collect()));
        serve(desk.clone(), [5; 16], path.clone(), Duration::from_secs(20)).unwrap();
        let mode = std::fs::metadata(&path).map(|m| std::os::unix::fs::PermissionsExt::mode(&m.permissions()) & 0o777).unwrap();
        assert_eq!(mode, 0o600);
        // A backend expecting other pieces takes none: they stay here.
        assert!(fetch(&path, n - 1).is_err(), "another count");
        let fds = fetch(&path, n).unwrap();
        assert_eq!(fds.len(), n);
        for (i, fd) in fds.into_iter().enumerate() {
            let mut f = std::fs::File::from(fd);
            let mut s = String::new();
            f.rewind().unwrap();
            f.read_to_string(&mut s).unwrap();
            assert_eq!(s, format!("piece {i}"));
        }
        assert!(desk.take_handed(&[5; 16]).is_none(), "gone from the source");
        let deadline = Instant::now() + Duration::from_secs(5);
        while path.exists() {
            assert!(Instant::now() < deadline, "the socket is removed once served");
            std::thread::sleep(Duration::from_millis(5));
        }
        assert!(fetch(&path, n).is_err(), "served once");
    }

    #[test]
    fn memory_a_restore_at_the_source_took_is_not_served() {
        let path = socket_path("t");
        let desk = Arc::new(Desk::default());
        desk.keep_handed([6; 16], kept(vec![memfile("x")]));
        serve(desk.clone(), [6; 16], path.clone(), Duration::from_secs(20)).unwrap();
        assert_eq!(desk.take_handed(&[6; 16]).map(|k| k.fds.len()), Some(1));
        assert!(fetch(&path, 1).is_err(), "nothing to hand over");
    }
}
