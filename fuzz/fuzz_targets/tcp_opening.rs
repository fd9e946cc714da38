//! The TCP opening (`pvgpu_ring::tcp_auth`) against a hostile peer, on
//! both sides: the backend's `server_open` reading what a stranger sends
//! after the backend's challenge, and the client's `client_open` reading
//! what a hostile backend sends.
//!
//! Input: one byte of choices (bit 0: the side under test holds a key;
//! bit 1: test the client instead of the backend; bits 2-4: how many
//! bytes each read returns at most, less one, 0 meaning all; bit 5: the
//! key is a tenant key, which the backend knows by its verifier), then the
//! peer's bytes.
//!
//! Checked: no panic; a peer that must prove a key never passes without
//! it (the proof is an HMAC over a nonce the side under test chose afresh,
//! so no input can hold it); an opening of another backend's copy (a
//! ticket in place of the key, `pvgpu_ring::peer_copy`) is told apart,
//! never counts as a key, and is not answered before its ticket is
//! checked; whatever the backend writes is one of its own messages (a
//! challenge, then at most one verdict).

#![no_main]

use libfuzzer_sys::fuzz_target;
use pvgpu_ring::tcp_auth::{Accepting, ClientKey, KeyId, Status, TcpKey, TenantKey, client_open, refuse, server_open};
use std::io::{Read, Write};

/// A peer that has sent `input`, in pieces of at most `piece` bytes, and
/// hears what we write.
struct Peer<'a> {
    input: &'a [u8],
    piece: usize,
    heard: Vec<u8>,
}

impl Read for Peer<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = buf.len().min(self.input.len()).min(self.piece);
        buf[..n].copy_from_slice(&self.input[..n]);
        self.input = &self.input[n..];
        Ok(n)
    }
}

impl Write for Peer<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.heard.extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&choice, input)) = data.split_first() else { return };
    let holds_key = choice & 1 != 0;
    let tenant = (holds_key && choice & 0x20 != 0).then(|| TenantKey::generate().expect("the kernel's random source"));
    let shared = (holds_key && tenant.is_none()).then(|| TcpKey::new(&[0x5a; 32]).expect("a 32-byte key"));
    let piece = match (choice >> 2) & 7 {
        0 => usize::MAX,
        n => n as usize,
    };
    let mut peer = Peer { input, piece, heard: Vec::new() };
    if choice & 2 != 0 {
        // A hostile backend: a client with a key never accepts it.
        let key = shared.clone().map(ClientKey::Shared).or_else(|| tenant.clone().map(ClientKey::Tenant));
        let r = client_open(&mut peer, key.as_ref());
        assert!(key.is_none() || r.is_err(), "a client accepted a backend that cannot know its key");
        return;
    }
    let lookup = |id: KeyId| tenant.as_ref().filter(|k| k.id() == id).map(TenantKey::verifier);
    let accepting = Accepting { shared: shared.as_ref(), tenants: Some(&lookup), keyless: !holds_key };
    match server_open(&mut peer, &accepting) {
        // Another backend's copy: not a session, and not past the key
        // check; its ticket is the caller's to check, and nothing is
        // answered yet.
        Ok(opened) if opened.peer_copy().is_some() => {
            assert!(!opened.authenticated(), "a copy's opening counted as a key");
            assert_eq!(peer.heard.len(), 48, "answered before its ticket was checked");
        }
        Ok(opened) => {
            assert!(!holds_key && !opened.authenticated(), "a stranger passed the key check");
            let _ = refuse(&mut peer, Status::Busy);
            // The challenge (48 bytes) and one verdict (48 bytes).
            assert_eq!(peer.heard.len(), 96);
        }
        Err(_) => assert!(peer.heard.len() == 48 || peer.heard.len() == 96, "{} bytes written", peer.heard.len()),
    }
    assert_eq!(&peer.heard[..8], b"PVGPUTS1");
});
