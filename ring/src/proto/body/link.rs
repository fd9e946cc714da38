//! Linking: the description of a link (options and inputs) as the client
//! writes it and the backend reads it, and the `LinkModule` request.

use super::{Body, check_name, inline_len, with_tail};
use crate::proto::wire::*;
use crate::proto::{DecodeError, MAX_LINK_INPUTS, MAX_LINK_OPTIONS, MAX_PAYLOAD, Opcode};
use zerocopy::{FromBytes, IntoBytes};

/// `cuLinkComplete` of the inputs a program added: the description is
/// inline (empty when it is in the data area).
#[derive(Debug, Clone, PartialEq)]
pub struct LinkModule<'a> {
    /// Context and where the description is.
    pub head: LinkModuleHead,
    /// Inline description.
    pub blob: &'a [u8],
}

impl<'a> Body<'a> for LinkModule<'a> {
    fn head(&self) -> &[u8] {
        self.head.as_bytes()
    }
    fn tail(&self) -> &[u8] {
        self.blob
    }
    fn decode(op: Opcode, p: &'a [u8]) -> Result<Self, DecodeError> {
        let (head, blob) = with_tail::<LinkModuleHead, _>(op, p, |r| inline_len(&r.blob))?;
        Ok(LinkModule { head, blob })
    }
}

/// One input of a link.
#[derive(Debug, Clone, PartialEq)]
pub struct LinkInput<'a> {
    /// `CUjitInputType`: cubin, PTX, fatbin, object, library or NVVM IR.
    pub kind: u32,
    /// Its name for the logs (may be empty).
    pub name: &'a str,
    /// Its bytes.
    pub data: &'a [u8],
}

/// A link's options (with plain values) and inputs.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct LinkSpec<'a> {
    /// (`CUjit_option`, value) pairs.
    pub options: Vec<(u32, u64)>,
    /// The inputs, in the order the program added them.
    pub inputs: Vec<LinkInput<'a>>,
}

/// `CU_JIT_INPUT_NVVM`, the last input type.
const LAST_INPUT_KIND: u32 = 5;

impl<'a> LinkSpec<'a> {
    /// The description's bytes.
    pub fn encode(&self) -> Vec<u8> {
        let head = LinkBlobHead { option_count: (self.options.len() as u32).into(), input_count: (self.inputs.len() as u32).into() };
        let mut out = head.as_bytes().to_vec();
        for &(option, value) in &self.options {
            out.extend_from_slice(LinkOption { option: option.into(), reserved: 0.into(), value: value.into() }.as_bytes());
        }
        for i in &self.inputs {
            let h = LinkInputHead { kind: i.kind.into(), name_len: (i.name.len() as u32).into(), len: (i.data.len() as u64).into() };
            out.extend_from_slice(h.as_bytes());
            out.extend_from_slice(i.name.as_bytes());
            out.extend_from_slice(i.data);
        }
        out
    }

    /// Reads a description, checking every count, length, name and input
    /// type; nothing may follow it.
    pub fn decode(mut p: &'a [u8]) -> Result<Self, DecodeError> {
        let (head, rest) = LinkBlobHead::read_from_prefix(p).map_err(|_| DecodeError::Truncated)?;
        let (options, inputs) = (head.option_count.get() as usize, head.input_count.get() as usize);
        if options > MAX_LINK_OPTIONS || inputs > MAX_LINK_INPUTS {
            return Err(DecodeError::TooLarge(options.max(inputs)));
        }
        p = rest;
        let mut spec = LinkSpec { options: Vec::with_capacity(options), inputs: Vec::with_capacity(inputs) };
        for _ in 0..options {
            let (o, rest) = LinkOption::read_from_prefix(p).map_err(|_| DecodeError::Truncated)?;
            if o.reserved.get() != 0 {
                return Err(DecodeError::BadField("reserved"));
            }
            spec.options.push((o.option.get(), o.value.get()));
            p = rest;
        }
        for _ in 0..inputs {
            let (h, rest) = LinkInputHead::read_from_prefix(p).map_err(|_| DecodeError::Truncated)?;
            if h.kind.get() > LAST_INPUT_KIND {
                return Err(DecodeError::BadField("kind"));
            }
            let len = usize::try_from(h.len.get()).ok().filter(|&n| n <= MAX_PAYLOAD).ok_or(DecodeError::TooLarge(MAX_PAYLOAD + 1))?;
            let (name, rest) = rest.split_at_checked(h.name_len.get() as usize).ok_or(DecodeError::Truncated)?;
            let name = if name.is_empty() { "" } else { check_name(name)? };
            let (data, rest) = rest.split_at_checked(len).ok_or(DecodeError::Truncated)?;
            spec.inputs.push(LinkInput { kind: h.kind.get(), name, data });
            p = rest;
        }
        if !p.is_empty() {
            return Err(DecodeError::BadField("trailing bytes"));
        }
        Ok(spec)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_description_reads_back_as_written() {
        let spec = LinkSpec {
            options: vec![(7, 3), (8, 0)],
            inputs: vec![LinkInput { kind: 1, name: "a.ptx", data: b".version 8.0" }, LinkInput { kind: 0, name: "", data: &[1, 2, 3] }],
        };
        assert_eq!(LinkSpec::decode(&spec.encode()).unwrap(), spec);
    }

    #[test]
    fn a_bad_description_is_refused() {
        let good = LinkSpec { options: vec![(7, 3)], inputs: vec![LinkInput { kind: 1, name: "a", data: b"x" }] }.encode();
        // Truncated anywhere, or with a byte more.
        for n in 0..good.len() {
            assert!(LinkSpec::decode(&good[..n]).is_err(), "{n}");
        }
        let mut longer = good.clone();
        longer.push(0);
        assert!(LinkSpec::decode(&longer).is_err());
        // An unknown input type, a name with a NUL, a reserved field set.
        let mut bad_kind = good.clone();
        bad_kind[8 + 16] = 9;
        assert_eq!(LinkSpec::decode(&bad_kind), Err(DecodeError::BadField("kind")));
        let mut bad_name = good.clone();
        bad_name[8 + 16 + 16] = 0;
        assert_eq!(LinkSpec::decode(&bad_name), Err(DecodeError::BadName));
        let mut reserved = good;
        reserved[8 + 4] = 1;
        assert_eq!(LinkSpec::decode(&reserved), Err(DecodeError::BadField("reserved")));
        // Counts beyond the limits.
        let many = LinkBlobHead { option_count: 65.into(), input_count: 0.into() };
        assert!(matches!(LinkSpec::decode(many.as_bytes()), Err(DecodeError::TooLarge(_))));
    }

    proptest! {
        #[test]
        fn any_bytes_decode_or_fail_cleanly(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
            if let Ok(spec) = LinkSpec::decode(&bytes) {
                prop_assert_eq!(spec.encode(), bytes);
            }
        }
    }
}
