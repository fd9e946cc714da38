//! The opening of a copy between two backends: the connection one backend
//! (the sender) opens to another (the receiver) to carry a program's bytes
//! from a session of the first to a session of the second, without the
//! program in between.
//!
//! The receiver's session asked its supervisor for a *ticket* first: 16
//! random bytes naming that session and the copy's length, good for one
//! connection and for a short time. The sender connects to the receiver's
//! listener (a local socket or a TCP port, where programs connect) and
//! presents the ticket instead of a hello:
//!
//! - **local**: the connection's first message is a [`PeerCopyHello`]
//!   with [`LOCAL_MAGIC`], the size of a session's hello and without a
//!   descriptor;
//! - **TCP**: the backend speaks first (its key challenge); the sender
//!   answers with a [`PeerCopyHello`] with [`TCP_MAGIC`], padded to the
//!   size of the client's answer ([`TCP_OPENING_LEN`]). The ticket takes
//!   the place of the key: it is what the receiver's session handed out.
//!
//! The receiver answers with a [`Verdict`]. Once accepted, the sender
//! writes exactly the ticket's length of bytes and the receiver answers
//! with one byte, 0 when they are all in device memory.

use std::io::{self, Read, Write};
use zerocopy::little_endian::{U32, U64};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout, Unaligned};

/// A [`PeerCopyHello`] on a local socket.
pub const LOCAL_MAGIC: u64 = u64::from_le_bytes(*b"PVGPULP1");
/// A [`PeerCopyHello`] on a TCP port (in place of the key answer).
pub const TCP_MAGIC: u64 = u64::from_le_bytes(*b"PVGPUTP1");
const VERDICT_MAGIC: u64 = u64::from_le_bytes(*b"PVGPUPV1");
/// Version of the opening.
pub const VERSION: u32 = 1;
/// Bytes the sender writes on a TCP port: the key answer's size.
pub const TCP_OPENING_LEN: usize = 80;

/// A copy's ticket.
pub type Ticket = [u8; 16];

/// The sender's first message.
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned, Clone, Copy, Debug)]
#[repr(C)]
pub struct PeerCopyHello {
    magic: U64,
    version: U32,
    reserved: U32,
    ticket: Ticket,
    len: U64,
}

/// What a [`PeerCopyHello`] asks for: the copy its ticket names, and how
/// many bytes the sender will write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Arrival {
    /// The ticket.
    pub ticket: Ticket,
    /// The bytes that follow.
    pub len: u64,
}

impl PeerCopyHello {
    fn new(magic: u64, a: Arrival) -> PeerCopyHello {
        PeerCopyHello { magic: magic.into(), version: VERSION.into(), reserved: 0.into(), ticket: a.ticket, len: a.len.into() }
    }

    /// The arrival `bytes` announce, if they are a hello with `magic` of
    /// this version.
    pub fn parse(bytes: &[u8], magic: u64) -> Option<Arrival> {
        let (h, _) = PeerCopyHello::read_from_prefix(bytes).ok()?;
        (h.magic.get() == magic && h.version.get() == VERSION).then_some(Arrival { ticket: h.ticket, len: h.len.get() })
    }
}

/// The receiver's answer.
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned, Clone, Copy, Debug)]
#[repr(C)]
struct Verdict {
    magic: U64,
    /// 0: accepted; 1: no such ticket (unknown, used, expired, or another
    /// length).
    status: U32,
    reserved: U32,
}

/// Why a copy's opening failed, at the sender.
#[derive(Debug, thiserror::Error)]
pub enum PeerCopyError {
    /// The connection failed.
    #[error("the connection to the other backend failed")]
    Io(#[from] io::Error),
    /// The other backend does not know the ticket.
    #[error("the other backend refused the copy's ticket (unknown, used or expired)")]
    Refused,
    /// The other end does not speak this opening.
    #[error("the other end is not a backend that takes copies from backends")]
    Malformed,
}

/// Sender, on a local socket: presents `a`; returns once accepted.
pub fn open_local<S: Read + Write>(s: &mut S, a: Arrival) -> Result<(), PeerCopyError> {
    s.write_all(PeerCopyHello::new(LOCAL_MAGIC, a).as_bytes())?;
    read_verdict(s)
}

/// Sender, on a TCP port: reads the backend's challenge, presents `a`;
/// returns once accepted.
pub fn open_tcp<S: Read + Write>(s: &mut S, a: Arrival) -> Result<(), PeerCopyError> {
    crate::tcp_auth::read_challenge(s).map_err(|e| match e {
        crate::tcp_auth::AuthError::Io(e) => PeerCopyError::Io(e),
        _ => PeerCopyError::Malformed,
    })?;
    let mut opening = [0u8; TCP_OPENING_LEN];
    let h = PeerCopyHello::new(TCP_MAGIC, a);
    opening[..size_of::<PeerCopyHello>()].copy_from_slice(h.as_bytes());
    s.write_all(&opening)?;
    read_verdict(s)
}

fn read_verdict<S: Read>(s: &mut S) -> Result<(), PeerCopyError> {
    let mut b = [0u8; size_of::<Verdict>()];
    s.read_exact(&mut b)?;
    let v = Verdict::read_from_bytes(&b).map_err(|_| PeerCopyError::Malformed)?;
    match (v.magic.get(), v.status.get()) {
        (VERDICT_MAGIC, 0) => Ok(()),
        (VERDICT_MAGIC, _) => Err(PeerCopyError::Refused),
        _ => Err(PeerCopyError::Malformed),
    }
}

/// Receiver: answers an opening.
pub fn answer<S: Write>(s: &mut S, accepted: bool) -> io::Result<()> {
    let v = Verdict { magic: VERDICT_MAGIC.into(), status: u32::from(!accepted).into(), reserved: 0.into() };
    s.write_all(v.as_bytes())?;
    // Over TLS the answer is a record to send now.
    s.flush()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::net::UnixStream;

    #[test]
    fn a_local_hello_is_a_session_hello_long_and_parses_back() {
        assert_eq!(size_of::<PeerCopyHello>(), 40);
        let a = Arrival { ticket: [9; 16], len: 1 << 33 };
        let h = PeerCopyHello::new(LOCAL_MAGIC, a);
        assert_eq!(PeerCopyHello::parse(h.as_bytes(), LOCAL_MAGIC), Some(a));
        assert_eq!(PeerCopyHello::parse(h.as_bytes(), TCP_MAGIC), None, "the other transport's magic");
        assert_eq!(PeerCopyHello::parse(&h.as_bytes()[..39], LOCAL_MAGIC), None, "short");
        let mut v2 = h;
        v2.version = 2.into();
        assert_eq!(PeerCopyHello::parse(v2.as_bytes(), LOCAL_MAGIC), None, "another version");
    }

    #[test]
    fn an_opening_is_accepted_or_refused_as_the_receiver_says() {
        for accepted in [true, false] {
            let (mut a, mut b) = UnixStream::pair().unwrap();
            let t = std::thread::spawn(move || {
                let mut h = [0u8; 40];
                b.read_exact(&mut h).unwrap();
                let got = PeerCopyHello::parse(&h, LOCAL_MAGIC);
                answer(&mut b, accepted).unwrap();
                got
            });
            let r = open_local(&mut a, Arrival { ticket: [1; 16], len: 5 });
            assert_eq!(t.join().unwrap(), Some(Arrival { ticket: [1; 16], len: 5 }));
            assert_eq!(r.is_ok(), accepted, "{r:?}");
        }
    }

    #[test]
    fn over_tcp_the_sender_reads_the_challenge_first() {
        let (mut a, mut b) = UnixStream::pair().unwrap();
        let t = std::thread::spawn(move || {
            // A backend's challenge: its magic and version 1, flags and
            // nonce left zero.
            let mut challenge = [0u8; 48];
            challenge[..8].copy_from_slice(b"PVGPUTS1");
            challenge[8] = 1;
            b.write_all(&challenge).unwrap();
            let mut o = [0u8; TCP_OPENING_LEN];
            b.read_exact(&mut o).unwrap();
            answer(&mut b, true).unwrap();
            PeerCopyHello::parse(&o, TCP_MAGIC)
        });
        open_tcp(&mut a, Arrival { ticket: [2; 16], len: 7 }).unwrap();
        assert_eq!(t.join().unwrap(), Some(Arrival { ticket: [2; 16], len: 7 }));

        let (mut a, mut b) = UnixStream::pair().unwrap();
        b.write_all(&[0u8; 48]).unwrap();
        assert!(matches!(open_tcp(&mut a, Arrival { ticket: [2; 16], len: 7 }), Err(PeerCopyError::Malformed)));
    }
}
