//! Wire protocol, version 1.
//!
//! Every message is a 24-byte [`Header`] followed by `payload_len` bytes of
//! payload. The payload of each opcode starts with one fixed-layout struct
//! (all fields little-endian and unaligned, so any byte offset decodes) and
//! may be followed by a variable tail whose length the struct declares: a
//! symbol name, kernel parameters, or bulk data carried inline.
//!
//! The same encoding travels in ring records (local shared memory, Xen
//! grants) and in TCP frames. Bulk data is either inline (TCP) or lives in the
//! shared data area and is named by a [`DataRef`].
//!
//! The module is split by concern:
//!
//! - this file: the [`Header`], flags, limits and [`DecodeError`];
//! - [`wire`]: the fixed-layout structs of every request and reply;
//! - [`body`]: how each payload decodes (exact lengths, tails, field checks)
//!   and encodes;
//! - [`commands`]: the command table. Each request type declares its
//!   [`Opcode`] and its reply type ([`Command`]); the table generates the
//!   [`Request`] enum the backend decodes, and the [`Handler`] trait whose
//!   typed replies [`Request::dispatch`] encodes in one place.
//!
//! Decoding never trusts the peer: [`Request::decode`] checks the version,
//! the opcode, that the payload is exactly as long as the struct plus its
//! declared tail, and that names are plain NUL-free UTF-8 of bounded length.
//! Anything else is a [`DecodeError`]. See `docs/protocol.md` for the
//! sequence diagrams, the versioning rules and how to add a command.

pub mod body;
pub mod commands;
pub mod wire;

pub use body::*;
pub use commands::{Command, Handler, Opcode, Request};
pub use wire::*;

use crate::cuda::CuResult;
use zerocopy::little_endian::{U16, U32, U64};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout, Unaligned};

/// The protocol version this crate speaks.
pub const PROTOCOL_VERSION: u16 = 1;

/// Size of [`Header`] on the wire.
pub const HEADER_LEN: usize = 24;

/// Largest payload a peer may send in one message (64 MiB of bulk data plus
/// room for the fixed part). Larger copies are split by the frontend.
pub const MAX_PAYLOAD: usize = (64 << 20) + 4096;

/// Largest kernel or global name accepted.
pub const MAX_NAME_LEN: usize = 4096;

/// Most options and inputs of one link.
pub const MAX_LINK_OPTIONS: usize = 64;
/// See [`MAX_LINK_OPTIONS`].
pub const MAX_LINK_INPUTS: usize = 256;

/// Most bytes of each log a link returns.
pub const MAX_LINK_LOG: usize = 64 * 1024;

/// Largest kernel parameter buffer accepted (CUDA's own limit is 32 764
/// bytes on Volta and later).
pub const MAX_PARAM_BYTES: usize = 32 * 1024;

/// Largest number of kernel parameters described in a function reply.
pub const MAX_PARAMS: usize = 1024;

/// Largest number of names in a names reply.
pub const MAX_NAMES: usize = 65536;

/// Largest number of attributes in a device-properties reply.
pub const MAX_ATTRS: usize = 4096;

/// Request flag: the sender waits for a reply. Without it the backend sends
/// none, and an error is kept for the next request that has it.
pub const FLAG_REPLY: u32 = 1;
/// Set on every reply.
pub const FLAG_IS_REPLY: u32 = 2;
/// A message from the backend that is not a reply: the program's output
/// (what its kernels printed), sent before the reply of the call that
/// waited for them. Its request id is 0 and its opcode 0.
pub const FLAG_OUTPUT: u32 = 4;
/// The status of an output message ([`FLAG_OUTPUT`]) for the program's
/// standard error (what the driver writes there: device assertions);
/// 0 is its standard output.
pub const OUTPUT_STDERR: u32 = 2;
/// A message from the backend that is not a reply: a host function due in
/// the program ([`HostCallMsg`]), sent only while the program waits in
/// `HostCallWait`. Its request id is 0 and its opcode 0.
pub const FLAG_HOST_CALL: u32 = 8;
/// Reply flag: the session was checkpointed at this call and left this
/// backend; the frontend sends its next request on a new connection that
/// opens with [`Resume`] (the session's token from [`HelloRep`]).
pub const FLAG_DETACHED: u32 = 16;
/// A message from the backend that is not a reply, sent over the stream
/// transports (TCP, TLS, RDMA) to a frontend that announced
/// [`FEATURE_LEAVE_FRAMES`]: a checkpoint is ordered while the session
/// waits for a request, and the backend asks for a call that waits for a
/// reply, at which the checkpoint is taken. Its request id is 0, its
/// opcode 0 and it has no payload. A frontend skips one that arrives while
/// a call of its own waits (that call is where the checkpoint is taken).
/// Over the rings the same request is the control page's
/// [`LEAVE_WANTED`](crate::layout::LEAVE_WANTED) byte.
pub const FLAG_LEAVE_WANTED: u32 = 32;

/// [`Hello::features`] bit: the frontend reads [`FLAG_LEAVE_WANTED`]
/// messages while its program makes no call, and answers one with a call.
/// A backend sends them to no other frontend.
pub const FEATURE_LEAVE_FRAMES: u16 = 1;

/// Reply status of a [`Resume`] whose session moved to another backend
/// (`pvgpu-ctl migrate`): the payload is that backend's address, as
/// `PVGPU_BACKEND` writes it (at most [`MOVED_ADDRESS_MAX`] bytes of
/// UTF-8); the frontend presents its token there. Outside CUDA's own
/// statuses (all below 1000).
pub const STATUS_MOVED: u32 = 0x5056_0001;
/// The longest address a [`STATUS_MOVED`] reply carries.
pub const MOVED_ADDRESS_MAX: usize = 64;

/// Copy flag: the copy is ordered on its stream and need not be complete
/// when the backend moves on (the `*Async` driver calls).
pub const COPY_ASYNC: u32 = 1;
/// Copy flag: the host side is page-locked memory the program allocated in
/// the data area (`cuMemAllocHost`); with [`COPY_ASYNC`] the backend only
/// queues the copy, and the program owns the bytes until its stream is
/// synchronised, as with CUDA's own pinned memory.
pub const COPY_PINNED: u32 = 2;

/// Message header.
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned, Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(C)]
pub struct Header {
    /// [`PROTOCOL_VERSION`].
    pub version: U16,
    /// An [`Opcode`]; a reply repeats its request's opcode.
    pub opcode: U16,
    /// [`FLAG_REPLY`], [`FLAG_IS_REPLY`].
    pub flags: U32,
    /// Chosen by the frontend, echoed in the reply.
    pub request_id: U64,
    /// Bytes of payload after the header.
    pub payload_len: U32,
    /// Replies: the `CUresult` of the call. Requests: zero.
    pub status: U32,
}

const _: () = assert!(core::mem::size_of::<Header>() == HEADER_LEN);

impl Header {
    /// A request header.
    pub fn request(opcode: Opcode, request_id: u64, flags: u32, payload_len: usize) -> Self {
        Header {
            version: PROTOCOL_VERSION.into(),
            opcode: (opcode as u16).into(),
            flags: flags.into(),
            request_id: request_id.into(),
            payload_len: (payload_len as u32).into(),
            status: 0.into(),
        }
    }

    /// The reply header to `self`.
    pub fn reply(&self, status: CuResult, payload_len: usize) -> Self {
        Header {
            version: PROTOCOL_VERSION.into(),
            opcode: self.opcode,
            flags: FLAG_IS_REPLY.into(),
            request_id: self.request_id,
            payload_len: (payload_len as u32).into(),
            status: status.0.into(),
        }
    }

    /// An output message carrying `payload_len` bytes of program output
    /// for its standard output.
    pub fn output(payload_len: usize) -> Self {
        Header {
            version: PROTOCOL_VERSION.into(),
            opcode: 0.into(),
            flags: (FLAG_IS_REPLY | FLAG_OUTPUT).into(),
            request_id: 0.into(),
            payload_len: (payload_len as u32).into(),
            status: 0.into(),
        }
    }

    /// An output message carrying `payload_len` bytes for the program's
    /// standard error (status [`OUTPUT_STDERR`]; a frontend that predates
    /// it prints them on its standard output).
    pub fn output_stderr(payload_len: usize) -> Self {
        Header { status: OUTPUT_STDERR.into(), ..Header::output(payload_len) }
    }

    /// Whether this output message is for the program's standard error.
    pub fn is_stderr(&self) -> bool {
        self.is_output() && self.status.get() == OUTPUT_STDERR
    }

    /// A host-call message carrying a [`HostCallMsg`].
    pub fn host_call() -> Self {
        Header {
            version: PROTOCOL_VERSION.into(),
            opcode: 0.into(),
            flags: (FLAG_IS_REPLY | FLAG_HOST_CALL).into(),
            request_id: 0.into(),
            payload_len: (core::mem::size_of::<HostCallMsg>() as u32).into(),
            status: 0.into(),
        }
    }

    /// Whether this is a host-call message.
    pub fn is_host_call(&self) -> bool {
        self.flags.get() & FLAG_HOST_CALL != 0
    }

    /// A [`FLAG_LEAVE_WANTED`] message.
    pub fn leave_wanted() -> Self {
        Header {
            version: PROTOCOL_VERSION.into(),
            opcode: 0.into(),
            flags: (FLAG_IS_REPLY | FLAG_LEAVE_WANTED).into(),
            request_id: 0.into(),
            payload_len: 0.into(),
            status: 0.into(),
        }
    }

    /// Whether this is a [`FLAG_LEAVE_WANTED`] message.
    pub fn is_leave_wanted(&self) -> bool {
        self.flags.get() & FLAG_LEAVE_WANTED != 0
    }

    /// Whether this is an output message.
    pub fn is_output(&self) -> bool {
        self.flags.get() & FLAG_OUTPUT != 0
    }

    /// Whether this reply says the session left the connection
    /// ([`FLAG_DETACHED`]).
    pub fn is_detached(&self) -> bool {
        self.flags.get() & FLAG_DETACHED != 0
    }

    /// Whether the sender waits for a reply.
    pub fn wants_reply(&self) -> bool {
        self.flags.get() & FLAG_REPLY != 0
    }

    /// Parses a header from the first [`HEADER_LEN`] bytes of `bytes`.
    pub fn parse(bytes: &[u8]) -> Result<Self, DecodeError> {
        let (h, _) = Header::read_from_prefix(bytes).map_err(|_| DecodeError::Truncated)?;
        if h.version.get() != PROTOCOL_VERSION {
            return Err(DecodeError::Version(h.version.get()));
        }
        if h.payload_len.get() as usize > MAX_PAYLOAD {
            return Err(DecodeError::TooLarge(h.payload_len.get() as usize));
        }
        Ok(h)
    }
}

/// Why a message did not decode.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// The opcode is not one this version knows.
    #[error("Unknown opcode {0}")]
    UnknownOpcode(u16),
    /// The header names another protocol version.
    #[error("Unsupported protocol version {0}; this side speaks version {PROTOCOL_VERSION}")]
    Version(u16),
    /// Fewer bytes than a header, or fewer than the header declares.
    #[error("Message shorter than its header declares")]
    Truncated,
    /// The payload is larger than [`MAX_PAYLOAD`] or a declared limit.
    #[error("Payload of {0} bytes is over the limit")]
    TooLarge(usize),
    /// The payload length does not match what the opcode's struct declares.
    #[error("Payload of {opcode:?} is {got} bytes, expected {expected}")]
    Length {
        /// The message's opcode.
        opcode: Opcode,
        /// Payload bytes received.
        got: usize,
        /// Payload bytes the opcode's struct and its declared tail need.
        expected: usize,
    },
    /// A name is empty, too long, contains NUL or is not UTF-8.
    #[error("Symbol name is empty, over {MAX_NAME_LEN} bytes, contains NUL or is not UTF-8")]
    BadName,
    /// A [`DataRef`] has an unknown location or an impossible length.
    #[error("Bad data reference (location {0})")]
    BadDataRef(u32),
    /// A field holds a value outside its domain.
    #[error("Field {0} is out of range")]
    BadField(&'static str),
}

#[cfg(test)]
mod tests;
