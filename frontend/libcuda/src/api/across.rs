//! Copies between the device memory of two backends (a program with
//! several, `PVGPU_BACKEND=a,b`; [`crate::state::backends`]): `cuMemcpyPeer`
//! and unified-addressing copies whose sides two backends hold.
//!
//! The bytes pass through the program: read from the source backend in
//! chunks and written to the destination backend, each chunk while the
//! next is read. Ordering follows the stream the program named: its work
//! before the copy finishes first, and the copy is complete when the call
//! returns, so the stream's later work follows it (an asynchronous copy
//! returns once done, which CUDA allows).

use crate::state::{self, Res};
use pvgpu_frontend::{Client, Stream};

/// Bytes read from the source backend at a time.
const CHUNK: usize = 8 << 20;

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
