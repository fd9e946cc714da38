//! # pvgpu-xen
//!
//! The Xen side of pvgpu's plumbing: the `/dev/xen` devices and XenStore,
//! written directly on `ioctl(2)`, `mmap(2)` and the XenStore wire protocol
//! (no libxen C libraries are linked).
//!
//! - [`gntalloc`]: the guest grants pages to Dom0 ([`gntalloc::GntAlloc`],
//!   [`gntalloc::GrantedPages`]);
//! - [`gntdev`]: Dom0 maps the guest's grants ([`gntdev::GntDev`],
//!   [`gntdev::MappedGrants`]);
//! - [`evtchn`]: event channels, and [`evtchn::EvtchnNotifier`], the ring's
//!   doorbell over one;
//! - [`xenstore`]: a XenStore client over xenstored's socket or
//!   `/dev/xen/xenbus`, with transactions and watches;
//! - [`xenbus`]: the xenbus device states of the frontend/backend
//!   handshake;
//! - [`vgpu`]: the vgpu device's XenStore paths and keys, and creating and
//!   removing devices as the toolstack does (`pvgpu-xl`);
//! - [`abi`]: the kernel and XenStore structs, ioctl numbers and message
//!   types, checked against Debian's libxen-dev headers by
//!   `tests/headers.rs`.
//!
//! Both page types implement [`pvgpu_ring::region::Mapping`], so a ring is
//! laid over grant pages exactly as over a local memfd:
//!
//! ```no_run
//! use pvgpu_ring::region::SharedRegion;
//! use pvgpu_xen::{gntalloc::GntAlloc, gntdev::GntDev};
//!
//! # fn main() -> Result<(), pvgpu_xen::XenError> {
//! // Guest: grant 16 pages to Dom0.
//! let pages = GntAlloc::open()?.share(0, 16, true)?;
//! let refs = pages.refs().to_vec(); // published through XenStore
//! let guest_region = SharedRegion::new(pages);
//!
//! // Dom0: map them (the guest is domain 5).
//! let backend_region = GntDev::open()?.map(5, &refs, true)?.into_region()?;
//! # Ok(()) }
//! ```
//!
//! Everything a peer controls (shared pages, XenStore values it writes,
//! replies on the XenStore connection) is treated as hostile: bad input is
//! an error value, never a panic. Errors are one [`XenError`] type whose
//! messages say what failed and what to do.
//!
//! The crate assumes 4 KiB kernel pages (x86, and arm64 kernels built with
//! 4 KiB pages) and refuses to open the grant devices otherwise.

pub mod abi;
mod error;
pub mod evtchn;
pub mod gntalloc;
pub mod gntdev;
mod sys;
pub mod vgpu;
pub mod xenbus;
pub mod xenstore;

pub use error::XenError;
pub use evtchn::{EvtChn, EvtchnNotifier};
pub use gntalloc::{GntAlloc, GrantedPages};
pub use gntdev::{GntDev, MappedGrants};
pub use xenbus::XenbusState;
pub use xenstore::{XenStore, XsAccess};
