//! The keys of the TCP opening: the operator's shared key (`--tcp-key`),
//! and tenant keys, which the backend knows only by a verifier.
//!
//! A tenant key is a public id and a 32-byte secret, kept by its holder in
//! a file `pvgpu-key-1 ID SECRET` (hex). The backend stores what SCRAM
//! (RFC 5802) stores for a password, never the secret:
//!
//! ```text
//! client key = HMAC(secret, "pvgpu client key")   (only the holder can make it)
//! stored key = SHA-256(client key)                (the backend keeps this)
//! server key = HMAC(secret, "pvgpu server key")   (and this)
//! ```
//!
//! In the opening the client sends `client key XOR HMAC(stored key,
//! transcript)`; the backend removes the mask it can make itself and checks
//! that the result hashes to the stored key. Someone who reads the
//! backend's database therefore cannot open a session with a key (that
//! takes the client key, a preimage of the stored key); they could only
//! pose as the backend to that key's holders.

use super::AuthError;
use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};
use std::io;
use std::path::{Path, PathBuf};

/// Shortest shared key accepted, in bytes.
pub const MIN_KEY_LEN: usize = 16;
/// Largest key file read, in bytes.
pub const MAX_KEY_LEN: usize = 4096;
/// First word of a tenant key file.
pub const TENANT_KEY_TAG: &str = "pvgpu-key-1";
const CLIENT_KEY_LABEL: &[u8] = b"pvgpu client key";
const SERVER_KEY_LABEL: &[u8] = b"pvgpu server key";

/// A key shared by a backend and its TCP clients. Its bytes are locked
/// in memory where the platform allows (kept out of swap) and zeroed when
/// the last copy is dropped.
#[derive(Clone)]
pub struct TcpKey(pub(super) std::sync::Arc<Secret>);

/// Bytes of a key, in an allocation of their own.
pub(super) struct Secret(pub(super) Box<[u8]>);

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

    /// Reads a shared key file: its contents, less trailing white space,
    /// are the key. Like ssh with its keys, a file that others can read is
    /// refused.
    pub fn from_file(path: &Path) -> Result<TcpKey, AuthError> {
        let raw = read_private(path)?;
        TcpKey::new(&raw).ok_or_else(|| bad(path, "shorter than 16 bytes; make one with: head -c 32 /dev/urandom | base64 > FILE"))
    }

    /// Whether `other` is this key's bytes, compared in constant time (a
    /// bearer token).
    pub fn matches(&self, other: &[u8]) -> bool {
        use subtle::ConstantTimeEq;
        self.0.0.ct_eq(other).into()
    }

    pub(super) fn mac(&self, label: &[u8], parts: &[&[u8]]) -> Hmac<Sha256> {
        mac(&self.0.0, label, parts)
    }
}

pub(super) fn mac(key: &[u8], label: &[u8], parts: &[&[u8]]) -> Hmac<Sha256> {
    let mut m = <Hmac<Sha256> as Mac>::new_from_slice(key).expect("HMAC takes keys of any length");
    m.update(label);
    for p in parts {
        m.update(p);
    }
    m
}

pub(super) fn mac32(key: &[u8], label: &[u8], parts: &[&[u8]]) -> [u8; 32] {
    mac(key, label, parts).finalize().into_bytes().into()
}

fn bad(path: &Path, why: &'static str) -> AuthError {
    AuthError::BadKeyFile { path: path.to_path_buf(), why }
}

/// A key file's contents, less trailing white space; refused if others
/// may read it or it is too large to be a key.
fn read_private(path: &Path) -> Result<zeroize::Zeroizing<Vec<u8>>, AuthError> {
    use std::os::unix::fs::MetadataExt;
    let err = |source| AuthError::KeyFile { path: path.to_path_buf(), source };
    let meta = std::fs::metadata(path).map_err(err)?;
    if meta.mode() & 0o077 != 0 {
        return Err(bad(path, "group or others may read it; make it private (chmod 600)"));
    }
    if meta.len() > MAX_KEY_LEN as u64 {
        return Err(bad(path, "larger than 4 KiB; a key is a short random string"));
    }
    let mut raw = zeroize::Zeroizing::new(std::fs::read(path).map_err(err)?);
    while raw.last().is_some_and(u8::is_ascii_whitespace) {
        raw.pop();
    }
    Ok(raw)
}

/// The public name of a tenant key: 8 random bytes, written as 16 hex
/// digits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct KeyId(pub [u8; 8]);

impl std::fmt::Display for KeyId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.iter().try_for_each(|b| write!(f, "{b:02x}"))
    }
}

impl std::str::FromStr for KeyId {
    type Err = ();
    fn from_str(s: &str) -> Result<KeyId, ()> {
        let v = from_hex(s).ok_or(())?;
        Ok(KeyId(v.as_slice().try_into().map_err(|_| ())?))
    }
}

fn from_hex(s: &str) -> Option<Vec<u8>> {
    if s.len() % 2 != 0 || !s.is_ascii() {
        return None;
    }
    (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).ok()).collect()
}

/// What a backend keeps of a tenant key: enough to check a proof, not
/// enough to make one.
#[derive(Clone, PartialEq, Eq)]
pub struct KeyVerifier {
    /// SHA-256 of the client key.
    pub stored_key: [u8; 32],
    /// The key the backend proves itself with.
    pub server_key: [u8; 32],
}

impl std::fmt::Debug for KeyVerifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("KeyVerifier(..)")
    }
}

/// A tenant key as its holder has it.
#[derive(Clone)]
pub struct TenantKey {
    id: KeyId,
    secret: TcpKey,
}

impl std::fmt::Debug for TenantKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "TenantKey({})", self.id)
    }
}

impl TenantKey {
    /// A fresh key from the kernel's random source.
    pub fn generate() -> io::Result<TenantKey> {
        let bytes = zeroize::Zeroizing::new(super::nonce()?);
        let id = super::nonce()?;
        let secret = TcpKey::new(&bytes[..]).expect("32 bytes is long enough");
        Ok(TenantKey { id: KeyId(id[..8].try_into().expect("8 of 32 bytes")), secret })
    }

    /// Its public id.
    pub fn id(&self) -> KeyId {
        self.id
    }

    /// The key file's text: `pvgpu-key-1 ID SECRET`.
    pub fn file_text(&self) -> zeroize::Zeroizing<String> {
        let mut s = format!("{TENANT_KEY_TAG} {} ", self.id);
        for b in self.secret.0.0.iter() {
            s.push_str(&format!("{b:02x}"));
        }
        s.push('\n');
        zeroize::Zeroizing::new(s)
    }

    /// Parses a key file's text (trailing white space removed).
    fn parse(text: &[u8]) -> Option<TenantKey> {
        let text = std::str::from_utf8(text).ok()?;
        let mut words = text.split_ascii_whitespace();
        if words.next()? != TENANT_KEY_TAG {
            return None;
        }
        let id = words.next()?.parse().ok()?;
        let secret = zeroize::Zeroizing::new(from_hex(words.next()?)?);
        if words.next().is_some() || secret.len() != 32 {
            return None;
        }
        Some(TenantKey { id, secret: TcpKey::new(&secret)? })
    }

    /// What the backend stores of it.
    pub fn verifier(&self) -> KeyVerifier {
        KeyVerifier { stored_key: Sha256::digest(self.client_key()).into(), server_key: self.server_key() }
    }

    pub(super) fn client_key(&self) -> [u8; 32] {
        mac32(&self.secret.0.0, CLIENT_KEY_LABEL, &[])
    }

    pub(super) fn server_key(&self) -> [u8; 32] {
        mac32(&self.secret.0.0, SERVER_KEY_LABEL, &[])
    }
}

/// The key a client opens with: the operator's shared key, or a tenant's.
#[derive(Debug, Clone)]
pub enum ClientKey {
    /// The backend's `--tcp-key`.
    Shared(TcpKey),
    /// A key issued to a tenant (`pvgpu-ctl key issue`).
    Tenant(TenantKey),
}

impl ClientKey {
    /// Reads a key file: a tenant key if it starts with
    /// [`TENANT_KEY_TAG`], otherwise a shared key.
    pub fn from_file(path: &Path) -> Result<ClientKey, AuthError> {
        let raw = read_private(path)?;
        if raw.starts_with(TENANT_KEY_TAG.as_bytes()) {
            return TenantKey::parse(&raw).map(ClientKey::Tenant).ok_or_else(|| {
                bad(path, "a tenant key file must be one line: pvgpu-key-1 ID SECRET (as `pvgpu-ctl key issue` writes it)")
            });
        }
        TcpKey::new(&raw)
            .map(ClientKey::Shared)
            .ok_or_else(|| bad(path, "shorter than 16 bytes; make one with: head -c 32 /dev/urandom | base64 > FILE"))
    }

    /// Where the key came from, for messages.
    pub fn describe(&self) -> String {
        match self {
            ClientKey::Shared(_) => "the shared key".into(),
            ClientKey::Tenant(k) => format!("tenant key {}", k.id),
        }
    }
}

/// Writes a new key file at `path`, readable by its owner only; an
/// existing file is left alone.
pub fn write_key_file(path: &Path, text: &str) -> io::Result<PathBuf> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(path)?;
    f.write_all(text.as_bytes())?;
    f.sync_all()?;
    Ok(path.to_path_buf())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tenant_key_files_round_trip_and_the_verifier_is_not_the_secret() {
        let k = TenantKey::generate().unwrap();
        let text = k.file_text();
        let back = TenantKey::parse(text.trim_end().as_bytes()).unwrap();
        assert_eq!(back.id(), k.id());
        assert!(back.verifier() == k.verifier());
        let v = k.verifier();
        assert_ne!(v.stored_key, k.client_key(), "the backend keeps a hash of the client key");
        assert_ne!(k.id(), TenantKey::generate().unwrap().id());
        assert!(TenantKey::parse(b"pvgpu-key-1 00 11").is_none());
        assert!(TenantKey::parse(format!("{} extra", text.trim_end()).as_bytes()).is_none());
        assert_eq!(k.id().to_string().parse::<KeyId>(), Ok(k.id()));
        assert!("xyz".parse::<KeyId>().is_err());
    }
}
