//! # pvgpu-trace
//!
//! A development aid: a `libcuda.so.1` that forwards every call to another
//! driver library and records which entry points, which slots of the
//! driver's private tables, and which `cuGetProcAddress` lookups a program
//! uses, with their results. Put it in front of NVIDIA's driver on the GPU
//! machine to learn what a program needs, or in front of pvgpu's drop-in
//! library to see what pvgpu answers:
//!
//! ```sh
//! mkdir -p /tmp/trace && cp target/release/libpvgpu_trace.so /tmp/trace/libcuda.so.1
//! LD_LIBRARY_PATH=/tmp/trace PVGPU_TRACE_DRIVER=/usr/lib/x86_64-linux-gnu/libcuda.so.1 \
//!     PVGPU_TRACE_OUT=/tmp/trace.log ./program
//! ```
//!
//! Every exported symbol is a trampoline (`mov r11d, index; jmp common`):
//! the common code saves the argument registers, resolves the forwarded
//! function, calls it with the caller's register and stack arguments
//! unchanged (it copies 16 stack slots, more than any driver entry point
//! takes), and records the returned status. Pointers `cuGetProcAddress`
//! hands out are replaced by the matching trampolines; the slots of the
//! tables `cuGetExportTable` returns are patched in place with slot
//! trampolines (the tables keep their addresses, which NVIDIA's runtime
//! hashes), except the integrity check's, whose address is hashed too.
//!
//! Environment: `PVGPU_TRACE_DRIVER` (the library to forward to; default:
//! NVIDIA's usual install paths), `PVGPU_TRACE_OUT` (where the report goes
//! at exit; default standard error), `PVGPU_TRACE_CALLS=1` (also print
//! every call as it returns), `PVGPU_TRACE_TABLES=0` (leave the private
//! tables alone), `PVGPU_TRACE_SLOT_ARGS=N` (for the first N calls of each
//! table slot, its arguments and the memory they point at, before and
//! after).
//!
//! x86-64 Linux only, like the driver.

#![cfg(all(target_arch = "x86_64", target_os = "linux"))]

mod args;
mod driver;
mod entry;
mod report;
mod tables;
mod trampoline;

#[allow(non_snake_case, missing_docs, clippy::missing_safety_doc)]
mod stubs {
    include!(concat!(env!("OUT_DIR"), "/stubs.rs"));
}
