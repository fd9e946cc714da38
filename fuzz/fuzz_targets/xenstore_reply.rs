//! XenStore replies and watch events, as a hostile xenstored (or anything
//! that writes the guest-controlled nodes the backend reads) could send
//! them.
//!
//! The input is the byte stream the XenStore connection receives. It is
//! decoded message by message with `Message::decode` (whatever decodes must
//! re-encode to the bytes it used; each payload is also read as a xenbus
//! state and a permission), and then served, as is, to a real `XenStore`
//! client over a socket pair, which runs what the backend and `pvgpu-xl`
//! run: read the domain id and a domain path, list a directory, read
//! permissions, read xenbus states and numbers (`xenbus::read_state`,
//! `vgpu::read_num` at the types the backend reads), set a watch, run a
//! transaction (retried on `EAGAIN`), and read watch events. Replies must
//! match request ids the client chose (1, 2, 3...); events may come
//! between them. When the input runs out the peer's side is shut, so every
//! call ends at once.
//!
//! Checked: no panic, no hang.

#![no_main]

use libfuzzer_sys::fuzz_target;
use pvgpu_xen::vgpu::read_num;
use pvgpu_xen::xenbus::{XenbusState, read_state};
use pvgpu_xen::xenstore::{Message, Perm, XenStore, XsAccess};
use std::io::Write;
use std::os::unix::net::UnixStream;
use std::time::Duration;

fn decode_stream(mut data: &[u8]) {
    while let Ok(Some((m, used))) = Message::decode(data) {
        assert_eq!(m.encode().expect("a decoded payload fits").as_slice(), &data[..used], "message re-encodes differently");
        let _ = XenbusState::from_wire(&m.payload);
        if let Ok(s) = std::str::from_utf8(&m.payload) {
            if let Ok(p) = s.parse::<Perm>() {
                assert_eq!(p.to_string().parse::<Perm>().ok(), Some(p));
            }
        }
        data = &data[used..];
    }
}

/// What the backend, the frontend and `pvgpu-xl` ask XenStore, in one
/// session.
fn client_session(xs: &mut XenStore) {
    let dir = "/local/domain/5/device/vgpu/0";
    let _ = xs.domid();
    let _ = xs.domain_path(5);
    let _ = xs.directory("/local/domain/0/backend/vgpu");
    let _ = xs.get_perms(dir);
    let _ = read_state(xs, dir);
    let _ = read_num::<u32>(xs, dir, "req-size");
    let _ = read_num::<u64>(xs, dir, "data-size");
    let _ = read_num::<usize>(xs, dir, "page-count");
    let _ = xs.read_string(dir);
    let _ = xs.watch(dir, "pvgpu");
    let _ = xs.transaction(|tx| {
        let s = read_state(tx, dir)?;
        tx.write(&format!("{dir}/state"), s.as_wire().as_bytes())?;
        let _ = tx.try_read("/local/domain/5/device/vgpu/0/claim")?;
        read_num::<u16>(tx, dir, "backend-id")
    });
    for _ in 0..8 {
        if !matches!(xs.read_watch(Some(Duration::ZERO)), Ok(Some(_))) {
            break;
        }
    }
}

fuzz_target!(|data: &[u8]| {
    decode_stream(data);

    let (client, mut peer) = UnixStream::pair().expect("socketpair");
    // The whole reply stream is queued before the client asks anything
    // (the socket buffer holds far more than -max_len); the client's own
    // requests are never read.
    peer.write_all(data).expect("queueing the replies");
    peer.shutdown(std::net::Shutdown::Write).expect("shutdown");
    let mut xs = XenStore::over(client);
    xs.set_request_timeout(Some(Duration::from_secs(5)));
    client_session(&mut xs);
    drop(xs);
    drop(peer);
});
