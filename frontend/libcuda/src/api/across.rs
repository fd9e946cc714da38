//! Copies between the device memory of two backends (a program with
//! several, `PVGPU_BACKEND=a,b`; [`crate::state::backends`]): `cuMemcpyPeer`
//! and unified-addressing copies whose sides two backends hold.
//!
//! A copy of [`DIRECT_FROM`] bytes or more goes from backend to backend
//! where the sending backend lists the receiving one as a peer (`--peer`)
//! and both speak it ([`direct`]): the program only orders it. Otherwise,
//! or if that fails, the bytes pass through the program: read from the
//! source backend in chunks and written to the destination backend, each
//! chunk while the next is read ([`relay`]). Ordering follows the stream
//! the program named: its work before the copy finishes first, and the
//! copy is complete when the call returns, so the stream's later work
//! follows it (an asynchronous copy returns once done, which CUDA allows).

use crate::state::{self, Res};
use pvgpu_frontend::{Client, CuError, Stream};
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Bytes read from the source backend at a time.
const CHUNK: usize = 8 << 20;
/// Copies this large or larger go from backend to backend where they can.
const DIRECT_FROM: usize = 1 << 20;
/// After a pair of backends could not copy directly, how long their
/// copies pass through the program before the next try.
const RETRY_AFTER: Duration = Duration::from_secs(60);

/// Pairs of backends (sending, receiving; their places in the list) that
/// could not copy directly, and when.
static NO_DIRECT: Mutex<Option<HashMap<(usize, usize), Instant>>> = Mutex::new(None);

/// Copies `n` bytes from `src` on backend `from` to `dst` on backend `to`,
/// after the work queued on `s` (of the calling thread's current context;
/// `None`: the default stream).
pub fn copy(dst: u64, to: &Client, src: u64, from: &Client, n: usize, s: Option<Stream>) -> Res {
    let st = s.unwrap_or(Stream::DEFAULT);
    crate::callback::gate(st);
    // The named stream's earlier work, on whichever backend it is.
    let c = state::client()?;
    match st {
        Stream::DEFAULT => c.ctx_synchronize(state::current()?),
        st => state::client_of(st.0)?.stream_synchronize(st),
    }
    .map_err(state::cu)?;
    if n == 0 {
        return Ok(());
    }
    let pair = (state::place_of(from), state::place_of(to));
    if n >= DIRECT_FROM && worth_trying(pair) {
        match direct(dst, to, src, from, n as u64) {
            Ok(()) => return Ok(()),
            Err(e) => {
                tracing::info!(from = pair.0, to = pair.1, error = %e, "libcuda: a copy between backends cannot go from backend to backend; it passes through the program (list the receiving backend with the sending one's --peer)");
                NO_DIRECT.lock().unwrap_or_else(|p| p.into_inner()).get_or_insert_default().insert(pair, Instant::now());
            }
        }
    }
    relay(dst, to, src, from, n)
}

fn worth_trying(pair: (usize, usize)) -> bool {
    let no = NO_DIRECT.lock().unwrap_or_else(|p| p.into_inner());
    no.as_ref().and_then(|m| m.get(&pair)).is_none_or(|t| t.elapsed() >= RETRY_AFTER)
}

/// From backend to backend: `to` opens the copy, `from` connects to `to`
/// with its ticket, then `from` sends while `to` receives.
fn direct(dst: u64, to: &Client, src: u64, from: &Client, n: u64) -> Result<(), pvgpu_frontend::Error> {
    let ticket = to.peer_copy_open(dst, n)?;
    // After the open: a session that moved is taken back at its first
    // call, and its address is then the new backend's.
    let address = to.address().ok_or(pvgpu_frontend::Error::Cuda(CuError::PEER_ACCESS_UNSUPPORTED))?;
    from.peer_copy_connect(&ticket, n, &address)?;
    let (sent, received) = std::thread::scope(|scope| {
        let receiver = scope.spawn(|| to.peer_copy_receive(&ticket));
        let sent = from.peer_copy_send(&ticket, src, n);
        (sent, receiver.join())
    });
    received.map_err(|_| pvgpu_frontend::Error::Cuda(CuError::UNKNOWN))??;
    sent
}

/// Through the program, in chunks.
fn relay(dst: u64, to: &Client, src: u64, from: &Client, n: usize) -> Res {
    let (mut a, mut b) = (vec![0u8; CHUNK.min(n)], vec![0u8; CHUNK.min(n)]);
    let mut done = 0usize;
    let first = CHUNK.min(n);
    from.memcpy_dtoh(&mut a[..first], src).map_err(state::cu)?;
    while done < n {
        let len = CHUNK.min(n - done);
        let next = CHUNK.min(n - done - len);
        // Write this chunk while the next is read.
        let (wrote, read) = std::thread::scope(|scope| {
            let chunk = &a[..len];
            let writer = scope.spawn(move || to.memcpy_htod(dst + done as u64, chunk));
            let read = if next > 0 { from.memcpy_dtoh(&mut b[..next], src + (done + len) as u64) } else { Ok(()) };
            (writer.join(), read)
        });
        wrote.map_err(|_| pvgpu_ring::CuError::UNKNOWN)?.map_err(state::cu)?;
        read.map_err(state::cu)?;
        std::mem::swap(&mut a, &mut b);
        done += len;
    }
    Ok(())
}
