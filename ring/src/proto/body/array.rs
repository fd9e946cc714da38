//! Bodies of the array and texture-object requests: a copy with an array
//! side carries the host side's bytes as its tail; the others are fixed
//! heads whose closed fields are checked here.

use super::*;

/// A copy with a CUDA array on one side or both, with the host side's
/// bytes inline when they go to the device over TCP.
#[derive(Debug, Clone, PartialEq)]
pub struct ArrayCopy<'a> {
    /// Sides, extent, stream and the host data.
    pub head: ArrayCopyHead,
    /// Inline host bytes (host to array, inline only).
    pub data: &'a [u8],
}

fn side_kind(s: &ArraySide, name: &'static str) -> Result<u32, DecodeError> {
    match s.kind.get() {
        k @ (SIDE_DEVICE | SIDE_HOST | SIDE_ARRAY) if s.reserved.get() == 0 => Ok(k),
        _ => Err(DecodeError::BadField(name)),
    }
}

impl<'a> Body<'a> for ArrayCopy<'a> {
    fn head(&self) -> &[u8] {
        self.head.as_bytes()
    }
    fn tail(&self) -> &[u8] {
        self.data
    }
    fn decode(op: Opcode, p: &'a [u8]) -> Result<Self, DecodeError> {
        let (head, data) = with_tail::<ArrayCopyHead, _>(op, p, |h| {
            let (dst, src) = (side_kind(&h.dst, "dst")?, side_kind(&h.src, "src")?);
            if dst != SIDE_ARRAY && src != SIDE_ARRAY || dst == SIDE_HOST && src == SIDE_HOST {
                return Err(DecodeError::BadField("sides"));
            }
            if h.flags.get() > 3 || h.reserved.get() != 0 {
                return Err(DecodeError::BadField("flags"));
            }
            if dst != SIDE_HOST && src != SIDE_HOST {
                return if h.data.len.get() == 0 { Ok(0) } else { Err(DecodeError::BadDataRef(h.data.loc.get())) };
            }
            let bytes = h.width.get().checked_mul(h.height.get()).and_then(|v| v.checked_mul(h.depth.get()));
            if bytes.is_none_or(|b| b > MAX_PAYLOAD as u64 || h.data.len.get() != b) {
                return Err(DecodeError::BadDataRef(h.data.loc.get()));
            }
            if src == SIDE_HOST { inline_len(&h.data) } else { h.data.location().map(|_| 0) }
        })?;
        Ok(ArrayCopy { head, data })
    }
}

impl Validate for ArrayCreate {
    fn validate(&self) -> Result<(), DecodeError> {
        match self.channels.get() {
            1 | 2 | 4 => Ok(()),
            _ => Err(DecodeError::BadField("channels")),
        }
    }
}

impl Validate for ArrayDestroy {
    fn validate(&self) -> Result<(), DecodeError> {
        flag(self.mipmapped.get(), "mipmapped")
    }
}

impl Validate for TexObjectCreate {
    fn validate(&self) -> Result<(), DecodeError> {
        flag(self.surface.get(), "surface")?;
        flag(self.has_view.get(), "has_view")?;
        if self.res.kind.get() > RESOURCE_PITCH2D {
            return Err(DecodeError::BadField("resource"));
        }
        Ok(())
    }
}

impl Validate for TexObjectDestroy {
    fn validate(&self) -> Result<(), DecodeError> {
        flag(self.surface.get(), "surface")
    }
}
