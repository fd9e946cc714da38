//! Linking (`cuLinkComplete`): the program's inputs go to the backend in
//! one request; the image and the driver's logs come back in pieces, as a
//! copy to the host does, and the backend forgets them.

use crate::client::Client;
use crate::error::{Error, Result, StagingError, TransportError};
use crate::handles::Context;
use pvgpu_ring::CuError;
use pvgpu_ring::proto::{FLAG_REPLY, LinkDestroy, LinkModule, LinkModuleHead, LinkRead, LinkSpec, Opcode};

/// What a link gave.
#[derive(Debug, Clone, PartialEq)]
pub struct Linked {
    /// The linked image, or the driver's error (the error log says why).
    pub image: std::result::Result<Vec<u8>, CuError>,
    /// The driver's info log.
    pub info_log: Vec<u8>,
    /// The driver's error log.
    pub error_log: Vec<u8>,
    /// Milliseconds the driver spent.
    pub wall_ms: f32,
}

impl Client {
    /// Links `spec`'s inputs for the device of `ctx`. A link the driver
    /// refuses is `Ok` with the error in [`Linked::image`] and its logs;
    /// `Err` is a request the backend refused (an option whose value is an
    /// address, an input type it does not link) or a transport failure.
    pub fn link(&self, ctx: Context, spec: &LinkSpec<'_>) -> Result<Linked> {
        let blob = spec.encode();
        let rep = {
            let mut c = self.conn();
            let staged = match c.t.stage(&blob) {
                Ok(s) => s,
                // Inputs larger than the data area: refused, nothing sent.
                Err(TransportError::Staging(StagingError::TooLarge { .. })) => return Err(Error::Cuda(CuError::OUT_OF_MEMORY)),
                Err(e) => return c.fail(e),
            };
            let req =
                LinkModule { head: LinkModuleHead { ctx: ctx.0.into(), blob: staged.dref }, blob: if staged.inline { &blob } else { &[] } };
            c.call(&req)?
        };
        let (link, size) = (rep.link.get(), rep.size.get() as usize);
        let (info, error) = (rep.info_len.get() as usize, rep.error_len.get() as usize);
        let mut run = vec![0u8; size + info + error];
        let read = self.link_read(link, &mut run);
        self.post(&LinkDestroy { link: link.into() })?;
        read?;
        let error_log = run.split_off(size + info);
        let info_log = run.split_off(size);
        let image = match rep.status.get() {
            0 => Ok(run),
            e => Err(CuError::new(e as u32).unwrap_or(CuError::UNKNOWN)),
        };
        Ok(Linked { image, info_log, error_log, wall_ms: f32::from_bits(rep.wall_ms.get()) })
    }

    /// Reads link `link`'s run of bytes into `dst`, a chunk at a time.
    fn link_read(&self, link: u64, dst: &mut [u8]) -> Result<()> {
        let mut c = self.conn();
        let chunk = c.t.max_chunk();
        for (i, piece) in dst.chunks_mut(chunk).enumerate() {
            let staged = match c.t.reserve(piece.len()) {
                Ok(s) => s,
                Err(e) => return c.fail(e),
            };
            let req = LinkRead { link: link.into(), offset: ((i * chunk) as u64).into(), data: staged.dref };
            let id = c.send(&req, FLAG_REPLY)?;
            if let Err(e) = c.reply(Opcode::LinkRead as u16, id)?.result() {
                c.t.discard(&staged);
                return Err(Error::Cuda(e));
            }
            let crate::rpc::Conn { t, buf, .. } = &mut *c;
            if let Err(e) = t.fetch(&staged, buf, piece) {
                return c.fail(e);
            }
        }
        Ok(())
    }
}
