//! The opening of a TCP session: mutual challenge-response on a shared key.
//!
//! A TCP backend is reachable by anyone who reaches its port, so before it
//! starts a worker (and before the GPU is touched) the peer must prove that
//! it holds the operator's key, and the backend proves the same to the
//! client. The key never crosses the wire:
//!
//! 1. backend → client, [`ServerHello`]: a fresh 32-byte nonce and whether a
//!    key is required;
//! 2. client → backend, [`ClientHello`]: its own nonce and
//!    `HMAC-SHA256(key, "pvgpu-tcp-v1 client" ‖ server nonce ‖ client nonce)`;
//! 3. backend → client, [`Verdict`]: accepted (with
//!    `HMAC-SHA256(key, "pvgpu-tcp-v1 server" ‖ server nonce ‖ client nonce)`),
//!    or why not (wrong key, key required, busy).
//!
//! Nonces on both sides make every exchange unique, so a recorded one
//! cannot be replayed to either side. A client that holds a key insists on
//! the backend's proof, so a man in the middle cannot downgrade it to an
//! unauthenticated backend. What this does not give: confidentiality or
//! integrity of the traffic after the opening (an attacker on the path can
//! read it, or inject into it); on networks where that matters, carry the
//! connection over a tunnel that provides them (`docs/operations.md`).

use hmac::{Hmac, Mac};
use sha2::Sha256;
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use zerocopy::little_endian::{U32, U64};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout, Unaligned};

const SERVER_MAGIC: u64 = u64::from_le_bytes(*b"PVGPUTS1");
const CLIENT_MAGIC: u64 = u64::from_le_bytes(*b"PVGPUTC1");
const VERDICT_MAGIC: u64 = u64::from_le_bytes(*b"PVGPUTV1");
/// Version of the opening exchange.
pub const AUTH_VERSION: u32 = 1;
/// Shortest key accepted, in bytes.
pub const MIN_KEY_LEN: usize = 16;
/// Largest key file read, in bytes.
pub const MAX_KEY_LEN: usize = 4096;
const CLIENT_LABEL: &[u8] = b"pvgpu-tcp-v1 client";
const SERVER_LABEL: &[u8] = b"pvgpu-tcp-v1 server";
const FLAG_KEY: u32 = 1;

/// Backend to client: the challenge.
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned, Clone, Copy, Debug)]
#[repr(C)]
pub struct ServerHello {
    magic: U64,
    version: U32,
    /// Bit 0: a key is required.
    flags: U32,
    nonce: [u8; 32],
}

/// Client to backend: the response.
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned, Clone, Copy, Debug)]
#[repr(C)]
pub struct ClientHello {
    magic: U64,
    version: U32,
    /// Bit 0: `mac` is present.
    flags: U32,
    nonce: [u8; 32],
    mac: [u8; 32],
}

/// Backend to client: the outcome.
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned, Clone, Copy, Debug)]
#[repr(C)]
pub struct Verdict {
    magic: U64,
    status: U32,
    reserved: U32,
    /// The backend's proof (accepted with a key), else zero.
    mac: [u8; 32],
}

/// What the backend answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u32)]
pub enum Status {
    /// Authenticated (or no key required): the session starts.
    Accepted = 0,
    /// The client's proof does not match the backend's key.
    WrongKey = 1,
    /// The backend requires a key and the client sent none.
    KeyRequired = 2,
    /// The backend serves as many sessions as it may for this peer or
    /// this transport.
    Busy = 3,
    /// The client's message is not an opening.
    Malformed = 4,
}

impl Status {
    fn from_wire(v: u32) -> Status {
        match v {
            0 => Status::Accepted,
            1 => Status::WrongKey,
            2 => Status::KeyRequired,
            3 => Status::Busy,
            _ => Status::Malformed,
        }
    }
}

/// Why the opening failed.
#[derive(Debug, thiserror::Error)]
pub enum AuthError {
    /// The key file cannot be read.
    #[error("Cannot read the TCP key file {path}")]
    KeyFile {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// The key file is unusable.
    #[error("TCP key file {path}: {why}")]
    BadKeyFile {
        /// The file.
        path: PathBuf,
        /// What is wrong, and what to do.
        why: &'static str,
    },
    /// The backend refused the client's key.
    #[error("The backend refused our key (PVGPU_TCP_KEY names a file whose key differs from the backend's --tcp-key)")]
    WrongKey,
    /// The backend requires a key and the client has none.
    #[error("The backend requires a key: set PVGPU_TCP_KEY to the path of a file holding the backend's key")]
    KeyRequired,
    /// The backend could not prove it holds the key.
    #[error("The backend did not prove it holds our key (PVGPU_TCP_KEY); refusing to talk to it")]
    BackendNotAuthenticated,
    /// The backend is at its session limit.
    #[error("The backend serves as many sessions as it may for this client; try again when one ends")]
    Busy,
    /// The peer's message is not an opening of this protocol.
    #[error("The peer did not speak pvgpu's TCP opening (version {AUTH_VERSION})")]
    Malformed,
    /// The OS failed us, or the peer went away or took too long.
    #[error("The TCP opening failed")]
    Io(#[from] io::Error),
}

/// A key shared by a backend and its TCP clients. Its bytes are locked
/// in memory where the platform allows (kept out of swap) and zeroed when
/// the last copy is dropped.
#[derive(Clone)]
pub struct TcpKey(std::sync::Arc<Secret>);

/// Bytes of a key, in an allocation of their own.
struct Secret(Box<[u8]>);

impl Secret {
    fn new(bytes: &[u8]) -> Secret {
        let s = Secret(bytes.into());
        // SAFETY: locks the pages of our own live allocation; failure (a
        // low RLIMIT_MEMLOCK) only leaves them swappable.
        let _ = unsafe { libc::mlock(s.0.as_ptr().cast(), s.0.len()) };
        s
    }
}

impl Drop for Secret {
    fn drop(&mut self) {
        zeroize::Zeroize::zeroize(&mut *self.0);
        // SAFETY: unlocks the range locked in `new` (harmless if it was not).
        let _ = unsafe { libc::munlock(self.0.as_ptr().cast(), self.0.len()) };
    }
}

impl std::fmt::Debug for TcpKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TcpKey(..)")
    }
}

impl TcpKey {
    /// A key from bytes (at least [`MIN_KEY_LEN`]).
    pub fn new(bytes: &[u8]) -> Option<TcpKey> {
        (bytes.len() >= MIN_KEY_LEN).then(|| TcpKey(std::sync::Arc::new(Secret::new(bytes))))
    }

    /// Reads a key file: its contents, less trailing white space, are the
    /// key. Like ssh with its keys, a file that others can read is refused.
    pub fn from_file(path: &Path) -> Result<TcpKey, AuthError> {
        use std::os::unix::fs::MetadataExt;
        let err = |source| AuthError::KeyFile { path: path.to_path_buf(), source };
        let bad = |why| AuthError::BadKeyFile { path: path.to_path_buf(), why };
        let meta = std::fs::metadata(path).map_err(err)?;
        if meta.mode() & 0o077 != 0 {
            return Err(bad("group or others may read it; make it private (chmod 600)"));
        }
        if meta.len() > MAX_KEY_LEN as u64 {
            return Err(bad("larger than 4 KiB; a key is a short random string"));
        }
        let mut raw = zeroize::Zeroizing::new(std::fs::read(path).map_err(err)?);
        while raw.last().is_some_and(u8::is_ascii_whitespace) {
            raw.pop();
        }
        TcpKey::new(&raw).ok_or_else(|| bad("shorter than 16 bytes; make one with: head -c 32 /dev/urandom | base64 > FILE"))
    }

    fn mac(&self, label: &[u8], server: &[u8; 32], client: &[u8; 32]) -> Hmac<Sha256> {
        let mut m = <Hmac<Sha256> as Mac>::new_from_slice(&self.0.0).expect("HMAC takes keys of any length");
        m.update(label);
        m.update(server);
        m.update(client);
        m
    }
}

fn nonce() -> io::Result<[u8; 32]> {
    let mut n = [0u8; 32];
    let mut got = 0;
    while got < n.len() {
        // SAFETY: getrandom writes at most the given length into the valid,
        // writable tail of `n`.
        let r = unsafe { libc::getrandom(n[got..].as_mut_ptr().cast(), n.len() - got, 0) };
        if r < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        got += r as usize;
    }
    Ok(n)
}

fn read_msg<T: FromBytes + KnownLayout + Immutable>(s: &mut impl Read) -> Result<T, AuthError> {
    let mut b = vec![0u8; core::mem::size_of::<T>()];
    s.read_exact(&mut b)?;
    T::read_from_bytes(&b).map_err(|_| AuthError::Malformed)
}

/// A client that passed (or did not need) the key check, waiting for the
/// backend's decision to serve it.
#[derive(Debug)]
pub struct Opened {
    server: [u8; 32],
    client: [u8; 32],
    authenticated: bool,
}

impl Opened {
    /// Whether the client proved it holds the key.
    pub fn authenticated(&self) -> bool {
        self.authenticated
    }
}

/// Backend side, steps 1 and 2: challenges the client and checks its
/// response. With `key`, a client without the right key is told so and
/// refused; without, every client is accepted. The caller bounds the time
/// this takes (socket timeouts), then answers with [`accept`] or [`refuse`].
pub fn server_open<S: Read + Write>(s: &mut S, key: Option<&TcpKey>) -> Result<Opened, AuthError> {
    let server = nonce()?;
    let hello = ServerHello {
        magic: SERVER_MAGIC.into(),
        version: AUTH_VERSION.into(),
        flags: if key.is_some() { FLAG_KEY } else { 0 }.into(),
        nonce: server,
    };
    s.write_all(hello.as_bytes())?;
    let c: ClientHello = read_msg(s)?;
    if c.magic.get() != CLIENT_MAGIC || c.version.get() != AUTH_VERSION {
        let _ = refuse(s, Status::Malformed);
        return Err(AuthError::Malformed);
    }
    let Some(key) = key else {
        return Ok(Opened { server, client: c.nonce, authenticated: false });
    };
    if c.flags.get() & FLAG_KEY == 0 {
        let _ = refuse(s, Status::KeyRequired);
        return Err(AuthError::KeyRequired);
    }
    // verify_slice compares in constant time.
    if key.mac(CLIENT_LABEL, &server, &c.nonce).verify_slice(&c.mac).is_err() {
        let _ = refuse(s, Status::WrongKey);
        return Err(AuthError::WrongKey);
    }
    Ok(Opened { server, client: c.nonce, authenticated: true })
}

/// Backend side, step 3: the session starts.
pub fn accept<S: Write>(s: &mut S, opened: &Opened, key: Option<&TcpKey>) -> Result<(), AuthError> {
    let mut mac = [0u8; 32];
    if let (Some(key), true) = (key, opened.authenticated) {
        mac.copy_from_slice(&key.mac(SERVER_LABEL, &opened.server, &opened.client).finalize().into_bytes());
    }
    let v = Verdict { magic: VERDICT_MAGIC.into(), status: (Status::Accepted as u32).into(), reserved: 0.into(), mac };
    s.write_all(v.as_bytes())?;
    Ok(())
}

/// Backend side: turns the client down with `status`.
pub fn refuse<S: Write>(s: &mut S, status: Status) -> Result<(), AuthError> {
    let v = Verdict { magic: VERDICT_MAGIC.into(), status: (status as u32).into(), reserved: 0.into(), mac: [0; 32] };
    s.write_all(v.as_bytes())?;
    Ok(())
}

/// Client side: answers the backend's challenge with `key` (if any) and
/// checks the backend's proof. Returns once the backend accepted.
pub fn client_open<S: Read + Write>(s: &mut S, key: Option<&TcpKey>) -> Result<(), AuthError> {
    let h: ServerHello = read_msg(s)?;
    if h.magic.get() != SERVER_MAGIC || h.version.get() != AUTH_VERSION {
        return Err(AuthError::Malformed);
    }
    let client = nonce()?;
    let mut reply = ClientHello { magic: CLIENT_MAGIC.into(), version: AUTH_VERSION.into(), flags: 0.into(), nonce: client, mac: [0; 32] };
    if let Some(key) = key {
        reply.flags = FLAG_KEY.into();
        reply.mac.copy_from_slice(&key.mac(CLIENT_LABEL, &h.nonce, &client).finalize().into_bytes());
    }
    s.write_all(reply.as_bytes())?;
    let v: Verdict = read_msg(s)?;
    if v.magic.get() != VERDICT_MAGIC {
        return Err(AuthError::Malformed);
    }
    match Status::from_wire(v.status.get()) {
        Status::Accepted => {}
        Status::WrongKey => return Err(AuthError::WrongKey),
        Status::KeyRequired => return Err(AuthError::KeyRequired),
        Status::Busy => return Err(AuthError::Busy),
        Status::Malformed => return Err(AuthError::Malformed),
    }
    if let Some(key) = key {
        // Without this a man in the middle could pose as a backend that
        // requires no key.
        if key.mac(SERVER_LABEL, &h.nonce, &client).verify_slice(&v.mac).is_err() {
            return Err(AuthError::BackendNotAuthenticated);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::net::UnixStream;

    fn key(b: u8) -> TcpKey {
        TcpKey::new(&[b; 32]).unwrap()
    }

    /// Runs both sides; the backend accepts whatever passes its check.
    fn open(server_key: Option<TcpKey>, client_key: Option<TcpKey>) -> (Result<bool, AuthError>, Result<(), AuthError>) {
        let (mut a, mut b) = UnixStream::pair().unwrap();
        let t = std::thread::spawn(move || {
            let o = server_open(&mut b, server_key.as_ref())?;
            accept(&mut b, &o, server_key.as_ref())?;
            Ok(o.authenticated())
        });
        let c = client_open(&mut a, client_key.as_ref());
        (t.join().unwrap(), c)
    }

    #[test]
    fn same_key_opens_both_ways() {
        let (s, c) = open(Some(key(7)), Some(key(7)));
        assert!(s.unwrap());
        c.unwrap();
    }

    #[test]
    fn wrong_or_missing_key_is_refused_with_a_reason() {
        let (s, c) = open(Some(key(7)), Some(key(8)));
        assert!(matches!(s, Err(AuthError::WrongKey)));
        assert!(matches!(c, Err(AuthError::WrongKey)));
        let (s, c) = open(Some(key(7)), None);
        assert!(matches!(s, Err(AuthError::KeyRequired)));
        assert!(matches!(c, Err(AuthError::KeyRequired)));
    }

    #[test]
    fn a_client_with_a_key_refuses_a_backend_that_cannot_prove_it() {
        let (s, c) = open(None, Some(key(7)));
        assert!(!s.unwrap());
        assert!(matches!(c, Err(AuthError::BackendNotAuthenticated)));
        // No keys anywhere: a trusted network.
        let (s, c) = open(None, None);
        assert!(!s.unwrap());
        c.unwrap();
    }

    /// A response recorded from one exchange does not open another: the
    /// backend's nonce is fresh each time.
    #[test]
    fn a_replayed_response_is_refused() {
        let k = key(7);
        let (mut a, mut b) = UnixStream::pair().unwrap();
        let kc = k.clone();
        let t = std::thread::spawn(move || server_open(&mut b, Some(&kc)).map(|_| ()));
        let h: ServerHello = read_msg(&mut a).unwrap();
        let client = [9u8; 32];
        let mut mac = [0u8; 32];
        mac.copy_from_slice(&k.mac(CLIENT_LABEL, &h.nonce, &client).finalize().into_bytes());
        let recorded = ClientHello { magic: CLIENT_MAGIC.into(), version: AUTH_VERSION.into(), flags: FLAG_KEY.into(), nonce: client, mac };
        a.write_all(recorded.as_bytes()).unwrap();
        t.join().unwrap().unwrap();
        // Replay it to a new exchange.
        let (mut a, mut b) = UnixStream::pair().unwrap();
        let t = std::thread::spawn(move || server_open(&mut b, Some(&k)).map(|_| ()));
        let _: ServerHello = read_msg(&mut a).unwrap();
        a.write_all(recorded.as_bytes()).unwrap();
        assert!(matches!(t.join().unwrap(), Err(AuthError::WrongKey)));
    }

    #[test]
    fn key_files_must_be_private_and_long_enough() {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("pvgpu-key-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("key");
        std::fs::write(&p, b"0123456789abcdef0123\n").unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert!(matches!(TcpKey::from_file(&p), Err(AuthError::BadKeyFile { .. })));
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert_eq!(&*TcpKey::from_file(&p).unwrap().0.0, b"0123456789abcdef0123");
        std::fs::write(&p, b"short\n").unwrap();
        assert!(matches!(TcpKey::from_file(&p), Err(AuthError::BadKeyFile { .. })));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
