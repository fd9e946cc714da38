//! The `xsd_sockmsg` wire format: messages, permissions and argument
//! encoding.

use crate::XenError;
use crate::abi::{XENSTORE_ABS_PATH_MAX, XENSTORE_PAYLOAD_MAX, XENSTORE_REL_PATH_MAX, XsdSockmsg};
use std::fmt;
use std::mem::size_of;

/// Length of the message header.
pub const HEADER_LEN: usize = size_of::<XsdSockmsg>();

/// One XenStore message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    /// Message type (an [`XsType`] number; unknown numbers are kept).
    pub ty: u32,
    /// Request id.
    pub req_id: u32,
    /// Transaction id.
    pub tx_id: u32,
    /// Payload.
    pub payload: Vec<u8>,
}

impl Message {
    /// Encodes the message; refuses a payload over
    /// [`XENSTORE_PAYLOAD_MAX`].
    pub fn encode(&self) -> Result<Vec<u8>, XenError> {
        if self.payload.len() > XENSTORE_PAYLOAD_MAX {
            return Err(XenError::InvalidArgument(format!(
                "XenStore message payload of {} bytes exceeds the {XENSTORE_PAYLOAD_MAX}-byte limit",
                self.payload.len()
            )));
        }
        let mut out = Vec::with_capacity(HEADER_LEN + self.payload.len());
        for v in [self.ty, self.req_id, self.tx_id, self.payload.len() as u32] {
            out.extend_from_slice(&v.to_ne_bytes());
        }
        out.extend_from_slice(&self.payload);
        Ok(out)
    }

    /// Decodes one message from the front of `buf`. Returns `None` if `buf`
    /// does not hold a whole message yet, else the message and the bytes it
    /// used. A payload length over [`XENSTORE_PAYLOAD_MAX`] is an error.
    pub fn decode(buf: &[u8]) -> Result<Option<(Message, usize)>, XenError> {
        let Some(hdr) = buf.get(..HEADER_LEN) else { return Ok(None) };
        let word = |i: usize| u32::from_ne_bytes([hdr[4 * i], hdr[4 * i + 1], hdr[4 * i + 2], hdr[4 * i + 3]]);
        let (ty, req_id, tx_id, len) = (word(0), word(1), word(2), word(3) as usize);
        if len > XENSTORE_PAYLOAD_MAX {
            return Err(XenError::Protocol(format!(
                "message of type {ty} announces a {len}-byte payload, over the {XENSTORE_PAYLOAD_MAX}-byte limit"
            )));
        }
        let Some(payload) = buf.get(HEADER_LEN..HEADER_LEN + len) else { return Ok(None) };
        Ok(Some((Message { ty, req_id, tx_id, payload: payload.to_vec() }, HEADER_LEN + len)))
    }
}

/// Access rights in a XenStore permission.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Access {
    /// `n`: none.
    None,
    /// `r`: read.
    Read,
    /// `w`: write.
    Write,
    /// `b`: read and write.
    Both,
}

/// One entry of a node's permission list, as in `"r5"`. The first entry of
/// a list names the owner (who can do anything) and the access of every
/// domain not listed; later entries grant `access` to `domid`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Perm {
    /// The domain.
    pub domid: u16,
    /// Its access.
    pub access: Access,
}

impl Perm {
    /// A permission entry.
    pub fn new(domid: u16, access: Access) -> Self {
        Perm { domid, access }
    }
}

impl std::str::FromStr for Perm {
    type Err = XenError;

    fn from_str(s: &str) -> Result<Self, XenError> {
        let bad =
            || XenError::BadValue { path: String::new(), value: truncate(s.as_bytes()), expected: "a permission like n0, r5, w3 or b1" };
        let mut chars = s.chars();
        let access = match chars.next() {
            Some('n') => Access::None,
            Some('r') => Access::Read,
            Some('w') => Access::Write,
            Some('b') => Access::Both,
            _ => return Err(bad()),
        };
        let rest = chars.as_str();
        if rest.is_empty() || !rest.bytes().all(|b| b.is_ascii_digit()) {
            return Err(bad());
        }
        let domid = rest.parse::<u16>().map_err(|_| bad())?;
        Ok(Perm { domid, access })
    }
}

impl fmt::Display for Perm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let c = match self.access {
            Access::None => 'n',
            Access::Read => 'r',
            Access::Write => 'w',
            Access::Both => 'b',
        };
        write!(f, "{c}{}", self.domid)
    }
}

/// The first 64 bytes of `v`, lossily decoded, for error messages.
pub(super) fn truncate(v: &[u8]) -> String {
    let mut s = String::from_utf8_lossy(&v[..v.len().min(64)]).into_owned();
    if v.len() > 64 {
        s.push('…');
    }
    s
}

/// The NUL-terminated path argument, validated.
pub(super) fn path_arg(path: &str) -> Result<Vec<u8>, XenError> {
    let max = if path.starts_with('/') || path.starts_with('@') { XENSTORE_ABS_PATH_MAX } else { XENSTORE_REL_PATH_MAX };
    if path.is_empty() || path.len() > max || path.contains('\0') {
        return Err(XenError::InvalidArgument(format!(
            "bad XenStore path {:?}: it must be 1 to {max} bytes without NUL",
            truncate(path.as_bytes())
        )));
    }
    let mut v = Vec::with_capacity(path.len() + 1);
    v.extend_from_slice(path.as_bytes());
    v.push(0);
    Ok(v)
}

/// The NUL-separated strings of a payload (a trailing NUL ends the last one;
/// empty strings are dropped).
pub(super) fn strings(payload: &[u8]) -> impl Iterator<Item = &[u8]> {
    payload.split(|b| *b == 0).filter(|s| !s.is_empty())
}

/// The first string of a request payload (its path), for error messages.
pub(super) fn first_string(payload: &[u8]) -> String {
    truncate(payload.split(|b| *b == 0).next().unwrap_or_default())
}

pub(super) fn watch_arg(path: &str, token: &str) -> Result<Vec<u8>, XenError> {
    let mut p = path_arg(path)?;
    if token.contains('\0') || p.len() + token.len() + 1 > XENSTORE_PAYLOAD_MAX {
        return Err(XenError::InvalidArgument(format!(
            "bad XenStore watch token {:?}: no NUL, and it must fit in one message",
            truncate(token.as_bytes())
        )));
    }
    p.extend_from_slice(token.as_bytes());
    p.push(0);
    Ok(p)
}

/// A decimal u32 from a XenStore value (surrounding whitespace and trailing
/// NULs allowed).
pub(crate) fn parse_u32(v: &[u8]) -> Option<u32> {
    let s = std::str::from_utf8(v).ok()?.trim_end_matches('\0').trim();
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

/// The errno name in an `XS_ERROR` payload, sanitised.
pub(super) fn errno_name(payload: &[u8]) -> String {
    let s = payload.split(|b| *b == 0).next().unwrap_or_default();
    if !s.is_empty() && s.len() <= 32 && s.iter().all(|b| b.is_ascii_alphanumeric()) {
        String::from_utf8_lossy(s).into_owned()
    } else {
        format!("unrecognised error {:?}", truncate(s))
    }
}
