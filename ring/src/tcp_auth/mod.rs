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
//! A *tenant* key (issued by `pvgpu-ctl key issue`, [`TenantKey`]) opens
//! the same way, except that the client also names the key and the backend
//! checks the proof against a verifier instead of the key itself
//! ([`keys`] says how); the key decides the session's tenant.
//!
//! Nonces on both sides make every exchange unique, so a recorded one
//! cannot be replayed to either side. A client that holds a key insists on
//! the backend's proof, so a man in the middle cannot downgrade it to an
//! unauthenticated backend. What this does not give: confidentiality or
//! integrity of the traffic after the opening (an attacker on the path can
//! read it, or inject into it); on networks where that matters, carry the
//! connection over a tunnel that provides them (`docs/operations.md`).

mod keys;

pub use keys::{ClientKey, KeyId, KeyVerifier, MAX_KEY_LEN, MIN_KEY_LEN, TENANT_KEY_TAG, TcpKey, TenantKey, write_key_file};

use hmac::Mac;
use std::io::{self, Read, Write};
use std::path::PathBuf;
use subtle::ConstantTimeEq;
use zerocopy::little_endian::{U32, U64};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout, Unaligned};

const SERVER_MAGIC: u64 = u64::from_le_bytes(*b"PVGPUTS1");
const CLIENT_MAGIC: u64 = u64::from_le_bytes(*b"PVGPUTC1");
const VERDICT_MAGIC: u64 = u64::from_le_bytes(*b"PVGPUTV1");
/// Version of the opening exchange.
pub const AUTH_VERSION: u32 = 1;
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

// Another backend's copy answers the challenge in as many bytes as a
// client does (`crate::peer_copy`), so one read takes either.
const _: () = assert!(size_of::<ClientHello>() == crate::peer_copy::TCP_OPENING_LEN);

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
    #[error(
        "The backend refused our key (PVGPU_TCP_KEY names a file whose key is not the backend's --tcp-key, or a tenant key it does not know or has revoked)"
    )]
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

/// Bit 1 of [`ClientHello::flags`]: a tenant key's id ([`KeyIdMsg`])
/// follows, and `mac` is the tenant proof.
const FLAG_KEY_ID: u32 = 2;
const TENANT_CLIENT_LABEL: &[u8] = b"pvgpu-tcp-v1 tenant client";
const TENANT_SERVER_LABEL: &[u8] = b"pvgpu-tcp-v1 tenant server";

/// Client to backend, after a [`ClientHello`] with [`FLAG_KEY_ID`]: which
/// tenant key the proof is made with.
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned, Clone, Copy, Debug)]
#[repr(C)]
pub struct KeyIdMsg {
    id: [u8; 8],
    reserved: [u8; 8],
}

/// What a backend accepts in the opening.
pub struct Accepting<'a> {
    /// The operator's shared key (`--tcp-key`).
    pub shared: Option<&'a TcpKey>,
    /// Tenant keys: the verifier of a live key by its id.
    pub tenants: Option<&'a dyn Fn(KeyId) -> Option<KeyVerifier>>,
    /// Clients without a key are served too (a trusted network).
    pub keyless: bool,
}

impl Accepting<'_> {
    /// Every client, no key asked (a trusted network).
    pub const OPEN: Accepting<'static> = Accepting { shared: None, tenants: None, keyless: true };

    /// Clients holding `key` only.
    pub fn shared(key: &TcpKey) -> Accepting<'_> {
        Accepting { shared: Some(key), tenants: None, keyless: false }
    }
}

/// How a client proved itself.
#[derive(Debug)]
enum Proof {
    None,
    Shared(TcpKey),
    Tenant(KeyId, KeyVerifier),
    /// Not a session: another backend's copy ([`crate::peer_copy`]),
    /// whose ticket the caller checks.
    PeerCopy(crate::peer_copy::Arrival),
}

/// A client that passed (or did not need) the key check, waiting for the
/// backend's decision to serve it.
#[derive(Debug)]
pub struct Opened {
    server: [u8; 32],
    client: [u8; 32],
    proof: Proof,
}

impl Opened {
    /// Whether the client proved it holds a key.
    pub fn authenticated(&self) -> bool {
        matches!(self.proof, Proof::Shared(_) | Proof::Tenant(..))
    }

    /// Another backend's copy, not a session: what its ticket asks for.
    /// The caller answers it ([`crate::peer_copy::answer`]), never with
    /// [`accept`].
    pub fn peer_copy(&self) -> Option<crate::peer_copy::Arrival> {
        match self.proof {
            Proof::PeerCopy(a) => Some(a),
            _ => None,
        }
    }

    /// The tenant key the client proved it holds.
    pub fn tenant_key(&self) -> Option<KeyId> {
        match self.proof {
            Proof::Tenant(id, _) => Some(id),
            _ => None,
        }
    }
}

/// The transcript a tenant proof covers.
fn transcript<'a>(server: &'a [u8; 32], client: &'a [u8; 32], id: &'a KeyId) -> [&'a [u8]; 3] {
    [server, client, &id.0]
}

fn xor(a: [u8; 32], b: [u8; 32]) -> [u8; 32] {
    std::array::from_fn(|i| a[i] ^ b[i])
}

/// Backend side, steps 1 and 2: challenges the client and checks its
/// response against what `accepting` accepts. A client without a key it
/// accepts is told so and refused. The caller bounds the time this takes
/// (socket timeouts), then answers with [`accept`] or [`refuse`].
pub fn server_open<S: Read + Write>(s: &mut S, accepting: &Accepting<'_>) -> Result<Opened, AuthError> {
    let server = nonce()?;
    let hello = ServerHello {
        magic: SERVER_MAGIC.into(),
        version: AUTH_VERSION.into(),
        flags: if accepting.keyless { 0 } else { FLAG_KEY }.into(),
        nonce: server,
    };
    s.write_all(hello.as_bytes())?;
    let c: ClientHello = read_msg(s)?;
    if let Some(a) = crate::peer_copy::PeerCopyHello::parse(c.as_bytes(), crate::peer_copy::TCP_MAGIC) {
        return Ok(Opened { server, client: [0; 32], proof: Proof::PeerCopy(a) });
    }
    if c.magic.get() != CLIENT_MAGIC || c.version.get() != AUTH_VERSION {
        let _ = refuse(s, Status::Malformed);
        return Err(AuthError::Malformed);
    }
    let flags = c.flags.get();
    let refused = |s: &mut S, status, e| {
        let _ = refuse(s, status);
        Err(e)
    };
    let proof = if flags & FLAG_KEY_ID != 0 {
        let m: KeyIdMsg = read_msg(s)?;
        let id = KeyId(m.id);
        let verifier = accepting.tenants.and_then(|lookup| lookup(id));
        match verifier {
            Some(v) if tenant_proof_holds(&v, &server, &c, &id) => Proof::Tenant(id, v),
            _ => return refused(s, Status::WrongKey, AuthError::WrongKey),
        }
    } else if flags & FLAG_KEY != 0 {
        match accepting.shared {
            // verify_slice compares in constant time.
            Some(key) if key.mac(CLIENT_LABEL, &[&server, &c.nonce]).verify_slice(&c.mac).is_ok() => Proof::Shared(key.clone()),
            _ if accepting.keyless && accepting.shared.is_none() => Proof::None,
            _ => return refused(s, Status::WrongKey, AuthError::WrongKey),
        }
    } else if accepting.keyless {
        Proof::None
    } else {
        return refused(s, Status::KeyRequired, AuthError::KeyRequired);
    };
    Ok(Opened { server, client: c.nonce, proof })
}

/// Whether `c.mac` proves the client holds the tenant key `v` verifies.
fn tenant_proof_holds(v: &KeyVerifier, server: &[u8; 32], c: &ClientHello, id: &KeyId) -> bool {
    use sha2::Digest;
    let mask = keys::mac32(&v.stored_key, TENANT_CLIENT_LABEL, &transcript(server, &c.nonce, id));
    let client_key = xor(c.mac, mask);
    let hashed: [u8; 32] = sha2::Sha256::digest(client_key).into();
    hashed.ct_eq(&v.stored_key).into()
}

/// Backend side, step 3: the session starts.
pub fn accept<S: Write>(s: &mut S, opened: &Opened) -> Result<(), AuthError> {
    let mac = match &opened.proof {
        Proof::None | Proof::PeerCopy(_) => [0; 32],
        Proof::Shared(key) => key.mac(SERVER_LABEL, &[&opened.server, &opened.client]).finalize().into_bytes().into(),
        Proof::Tenant(id, v) => keys::mac32(&v.server_key, TENANT_SERVER_LABEL, &transcript(&opened.server, &opened.client, id)),
    };
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

/// Client side, step 1: the backend's challenge, checked to be one.
pub(crate) fn read_challenge<S: Read>(s: &mut S) -> Result<ServerHello, AuthError> {
    let h: ServerHello = read_msg(s)?;
    if h.magic.get() != SERVER_MAGIC || h.version.get() != AUTH_VERSION {
        return Err(AuthError::Malformed);
    }
    Ok(h)
}

/// Client side: answers the backend's challenge with `key` (if any) and
/// checks the backend's proof. Returns once the backend accepted.
pub fn client_open<S: Read + Write>(s: &mut S, key: Option<&ClientKey>) -> Result<(), AuthError> {
    let h = read_challenge(s)?;
    let client = nonce()?;
    let mut reply = ClientHello { magic: CLIENT_MAGIC.into(), version: AUTH_VERSION.into(), flags: 0.into(), nonce: client, mac: [0; 32] };
    match key {
        None => s.write_all(reply.as_bytes())?,
        Some(ClientKey::Shared(k)) => {
            reply.flags = FLAG_KEY.into();
            reply.mac = k.mac(CLIENT_LABEL, &[&h.nonce, &client]).finalize().into_bytes().into();
            s.write_all(reply.as_bytes())?;
        }
        Some(ClientKey::Tenant(k)) => {
            let id = k.id();
            let stored = k.verifier().stored_key;
            let mask = keys::mac32(&stored, TENANT_CLIENT_LABEL, &transcript(&h.nonce, &client, &id));
            reply.flags = (FLAG_KEY | FLAG_KEY_ID).into();
            reply.mac = xor(k.client_key(), mask);
            let m = KeyIdMsg { id: id.0, reserved: [0; 8] };
            let mut both = reply.as_bytes().to_vec();
            both.extend_from_slice(m.as_bytes());
            s.write_all(&both)?;
        }
    }
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
    // Without this a man in the middle could pose as a backend that
    // requires no key.
    let proven = match key {
        None => true,
        Some(ClientKey::Shared(k)) => k.mac(SERVER_LABEL, &[&h.nonce, &client]).verify_slice(&v.mac).is_ok(),
        Some(ClientKey::Tenant(k)) => {
            let expect = keys::mac32(&k.server_key(), TENANT_SERVER_LABEL, &transcript(&h.nonce, &client, &k.id()));
            expect.ct_eq(&v.mac).into()
        }
    };
    if !proven {
        return Err(AuthError::BackendNotAuthenticated);
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
        let (s, c) = open_with(server_key, vec![], client_key.map(ClientKey::Shared));
        (s.map(|o| o.is_some()), c)
    }

    /// What the backend's side of a test opening says: which key the
    /// client proved (`None`: none; `Some(None)`: the shared key).
    type Proved = Result<Option<Option<KeyId>>, AuthError>;

    /// Runs both sides with tenant keys `tenants` known to the backend.
    fn open_with(server_key: Option<TcpKey>, tenants: Vec<TenantKey>, client_key: Option<ClientKey>) -> (Proved, Result<(), AuthError>) {
        let (mut a, mut b) = UnixStream::pair().unwrap();
        let t = std::thread::spawn(move || {
            let lookup = |id: KeyId| tenants.iter().find(|k| k.id() == id).map(TenantKey::verifier);
            let accepting =
                Accepting { shared: server_key.as_ref(), tenants: Some(&lookup), keyless: server_key.is_none() && tenants.is_empty() };
            let o = server_open(&mut b, &accepting)?;
            accept(&mut b, &o)?;
            Ok(o.authenticated().then(|| o.tenant_key()))
        });
        let c = client_open(&mut a, client_key.as_ref());
        (t.join().unwrap(), c)
    }

    #[test]
    fn a_tenant_key_opens_and_names_itself() {
        let (k1, k2) = (TenantKey::generate().unwrap(), TenantKey::generate().unwrap());
        let (s, c) = open_with(Some(key(7)), vec![k1.clone(), k2.clone()], Some(ClientKey::Tenant(k2.clone())));
        assert_eq!(s.unwrap(), Some(Some(k2.id())));
        c.unwrap();
        // The shared key still opens beside tenant keys.
        let (s, c) = open_with(Some(key(7)), vec![k1.clone()], Some(ClientKey::Shared(key(7))));
        assert_eq!(s.unwrap(), Some(None));
        c.unwrap();
        // A key the backend does not know (revoked, or never issued).
        let (s, c) = open_with(None, vec![k1.clone()], Some(ClientKey::Tenant(k2)));
        assert!(matches!(s, Err(AuthError::WrongKey)));
        assert!(matches!(c, Err(AuthError::WrongKey)));
        // Keyless clients are refused once tenant keys are asked for.
        let (s, c) = open_with(None, vec![k1], None);
        assert!(matches!(s, Err(AuthError::KeyRequired)));
        assert!(matches!(c, Err(AuthError::KeyRequired)));
    }

    /// A proof made with the verifier alone (what a stolen database
    /// holds) does not open: it takes the client key.
    #[test]
    fn the_backends_verifier_cannot_open_a_session() {
        let k = TenantKey::generate().unwrap();
        let v = k.verifier();
        let (mut a, mut b) = UnixStream::pair().unwrap();
        let kc = k.clone();
        let t = std::thread::spawn(move || {
            let lookup = |id: KeyId| (id == kc.id()).then(|| kc.verifier());
            server_open(&mut b, &Accepting { shared: None, tenants: Some(&lookup), keyless: false }).map(|_| ())
        });
        let h: ServerHello = read_msg(&mut a).unwrap();
        let client = [3u8; 32];
        // The best a thief can do: a proof keyed by what the backend keeps.
        let mask = keys::mac32(&v.stored_key, TENANT_CLIENT_LABEL, &transcript(&h.nonce, &client, &k.id()));
        let forged = ClientHello {
            magic: CLIENT_MAGIC.into(),
            version: AUTH_VERSION.into(),
            flags: (FLAG_KEY | FLAG_KEY_ID).into(),
            nonce: client,
            mac: xor(v.stored_key, mask),
        };
        a.write_all(forged.as_bytes()).unwrap();
        a.write_all(KeyIdMsg { id: k.id().0, reserved: [0; 8] }.as_bytes()).unwrap();
        assert!(matches!(t.join().unwrap(), Err(AuthError::WrongKey)));
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
        let t = std::thread::spawn(move || server_open(&mut b, &Accepting::shared(&kc)).map(|_| ()));
        let h: ServerHello = read_msg(&mut a).unwrap();
        let client = [9u8; 32];
        let mut mac = [0u8; 32];
        mac.copy_from_slice(&k.mac(CLIENT_LABEL, &[&h.nonce, &client]).finalize().into_bytes());
        let recorded = ClientHello { magic: CLIENT_MAGIC.into(), version: AUTH_VERSION.into(), flags: FLAG_KEY.into(), nonce: client, mac };
        a.write_all(recorded.as_bytes()).unwrap();
        t.join().unwrap().unwrap();
        // Replay it to a new exchange.
        let (mut a, mut b) = UnixStream::pair().unwrap();
        let t = std::thread::spawn(move || server_open(&mut b, &Accepting::shared(&k)).map(|_| ()));
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
