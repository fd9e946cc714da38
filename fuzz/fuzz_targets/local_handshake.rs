//! The backend's side of the local transport's handshake
//! (`pvgpu_ring::local::server_handshake`) against a hostile frontend on a
//! Unix socket pair.
//!
//! The input chooses what rides along as `SCM_RIGHTS` (none to three
//! descriptors, each a memfd of a chosen size, sealed or not, whose first
//! bytes are a control page for the geometry of the hello or chosen bytes;
//! an eventfd; either end of a pipe; `/dev/null`), and the hello's bytes,
//! sent in one message or split so that the backend reads the rest after
//! the message that carried the descriptors. The client then shuts its
//! writing side, so a short hello ends in an error at once instead of the
//! handshake's timeout.
//!
//! The fd logic does not depend on which descriptors the handshake expects,
//! only on its public signature, so it keeps working when the handshake
//! changes what it takes.
//!
//! Checked: no panic; a handshake that succeeds hands back a geometry that
//! validates against `max_data` and a region at least that large; and after
//! every iteration the process holds exactly the descriptors it held before
//! and no mapping of a memfd made here (nothing leaks, on success or on any
//! refusal).

#![no_main]

use libfuzzer_sys::arbitrary::{Result as ArbResult, Unstructured};
use libfuzzer_sys::fuzz_target;
use nix::fcntl::{FcntlArg, SealFlag, fcntl};
use nix::sys::eventfd::{EfdFlags, EventFd};
use nix::sys::memfd::{MFdFlags, memfd_create};
use nix::sys::socket::{ControlMessage, MsgFlags, sendmsg};
use pvgpu_ring::local::server_handshake;
use std::fs::File;
use std::io::{IoSlice, Read, Write};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::FileExt;
use std::os::unix::net::UnixStream;

/// Largest data area the backend accepts here.
const MAX_DATA: u64 = 1 << 20;
/// The name our memfds carry, to find their mappings in /proc/self/maps.
const MEMFD_NAME: &core::ffi::CStr = c"pvgpu-fuzz-handshake";

/// The hello's layout as version 2 of the handshake has it, for building a
/// matching control page: magic, version, req_size, rsp_size, reserved,
/// data_size, region_addr.
fn hello_geometry(hello: &[u8]) -> Option<(u32, u32, u64)> {
    let u32_at = |at: usize| Some(u32::from_le_bytes(hello.get(at..at + 4)?.try_into().ok()?));
    let u64_at = |at: usize| Some(u64::from_le_bytes(hello.get(at..at + 8)?.try_into().ok()?));
    Some((u32_at(12)?, u32_at(16)?, u64_at(24)?))
}

/// A control page for the geometry the hello states (what an honest
/// frontend writes; `pvgpu_ring::layout::init_region` on a mapping).
fn control_page(hello: &[u8]) -> Vec<u8> {
    let mut p = Vec::with_capacity(32);
    let (req, rsp, data) = hello_geometry(hello).unwrap_or((4096, 4096, 4096));
    p.extend_from_slice(&pvgpu_ring::layout::LAYOUT_MAGIC.to_le_bytes());
    p.extend_from_slice(&pvgpu_ring::layout::LAYOUT_VERSION.to_le_bytes());
    p.extend_from_slice(&((req as u64) | ((rsp as u64) << 32)).to_le_bytes());
    p.extend_from_slice(&data.to_le_bytes());
    p
}

/// One descriptor the frontend sends, as the input chooses it.
fn make_fd(u: &mut Unstructured, hello: &[u8]) -> ArbResult<OwnedFd> {
    Ok(match u.int_in_range(0..=4u8)? {
        0 => {
            let fd = memfd_create(MEMFD_NAME, MFdFlags::MFD_CLOEXEC | MFdFlags::MFD_ALLOW_SEALING).expect("memfd_create");
            let file = File::from(fd);
            // Sizes around the geometries that validate (sparse: no memory
            // is used until written).
            let size = if u.arbitrary::<bool>()? { u.int_in_range(0..=64u64)? * 4096 } else { u.int_in_range(0..=(40u64 << 20))? };
            file.set_len(size).expect("sizing a memfd");
            if u.arbitrary::<bool>()? {
                let page = if u.ratio(3u8, 4)? { control_page(hello) } else { u.bytes(32)?.to_vec() };
                if size >= page.len() as u64 {
                    file.write_all_at(&page, 0).expect("writing the control page");
                }
            }
            let seals = match u.int_in_range(0..=3u8)? {
                0 => SealFlag::empty(),
                1 => SealFlag::F_SEAL_SHRINK,
                2 => SealFlag::F_SEAL_SHRINK | SealFlag::F_SEAL_GROW,
                _ => SealFlag::F_SEAL_SHRINK | SealFlag::F_SEAL_GROW | SealFlag::F_SEAL_SEAL,
            };
            if !seals.is_empty() {
                fcntl(&file, FcntlArg::F_ADD_SEALS(seals)).expect("sealing a memfd");
            }
            OwnedFd::from(file)
        }
        1 => OwnedFd::from(EventFd::from_value_and_flags(0, EfdFlags::EFD_CLOEXEC | EfdFlags::EFD_NONBLOCK).expect("eventfd")),
        2 | 3 => {
            let (r, w) = nix::unistd::pipe().expect("pipe");
            if u.arbitrary::<bool>()? { r } else { w }
        }
        _ => OwnedFd::from(File::open("/dev/null").expect("/dev/null")),
    })
}

fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").expect("/proc/self/fd").count()
}

fn memfd_mappings() -> usize {
    let mut maps = String::new();
    File::open("/proc/self/maps").and_then(|mut f| f.read_to_string(&mut maps)).expect("/proc/self/maps");
    maps.lines().filter(|l| l.contains("pvgpu-fuzz-handshake")).count()
}

fn run(data: &[u8]) -> ArbResult<()> {
    let mut u = Unstructured::new(data);
    let nfds = u.int_in_range(0..=3usize)?;
    let split = u.arbitrary::<u8>()?;
    let hello_len = u.int_in_range(0..=64usize)?;
    let hello = u.bytes(hello_len.min(u.len()))?.to_vec();
    let fds = (0..nfds).map(|_| make_fd(&mut u, &hello)).collect::<ArbResult<Vec<_>>>()?;

    let (client, server) = UnixStream::pair().expect("socketpair");
    // The descriptors ride with the first part of the hello (at least one
    // byte: a stream socket carries no ancillary data without data).
    let first = if hello.is_empty() { 0 } else { 1 + split as usize % hello.len() };
    if first > 0 {
        let raw: Vec<_> = fds.iter().map(|f| f.as_raw_fd()).collect();
        let cmsg = [ControlMessage::ScmRights(&raw)];
        let cmsgs: &[ControlMessage] = if raw.is_empty() { &[] } else { &cmsg };
        sendmsg::<()>(client.as_raw_fd(), &[IoSlice::new(&hello[..first])], cmsgs, MsgFlags::MSG_NOSIGNAL, None).expect("sendmsg");
        (&client).write_all(&hello[first..]).expect("the rest of the hello");
    }
    drop(fds);
    client.shutdown(std::net::Shutdown::Write).expect("shutdown");

    if let Ok(side) = server_handshake(server, MAX_DATA, false) {
        side.geometry.validate(MAX_DATA).expect("an accepted geometry validates");
        assert!(side.region.len() >= side.geometry.total_len(), "region smaller than its geometry");
        assert!(!side.same_address, "mapped at the frontend's address without being asked to");
    }
    drop(client);
    Ok(())
}

fuzz_target!(|data: &[u8]| {
    let before = open_fds();
    let _ = run(data);
    assert_eq!(open_fds(), before, "descriptors leaked");
    assert_eq!(memfd_mappings(), 0, "a memfd mapping leaked");
});
