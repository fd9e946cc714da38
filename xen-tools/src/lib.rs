//! # pvgpu-xen
//!
//! The Xen side of pvgpu: the `/dev/xen` device layer (grant sharing and
//! mapping, event channels, XenStore) and the xenbus handshake. The Xen
//! transport is its own piece of work; this crate is a placeholder in the
//! workspace layout until it lands and provides nothing yet.
