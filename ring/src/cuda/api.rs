//! The CUDA driver API's types, generated from NVIDIA's `cuda.h` through
//! `pvgpu-cuda-decl`: every enum as a transparent newtype with its named
//! values (so a number a peer sends is always a valid value, and code reads
//! by name: `CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES`, not `8`),
//! every typedef, every struct and union (their size and alignment checked
//! against what gcc gives them), `PFN_name`, the type of each entry
//! point, and [`Driver`], every entry point as a typed function pointer
//! looked up in a loaded driver (the backend's one way to call what
//! takes enums or structs). Names are cuda.h's.

#![allow(non_camel_case_types, non_snake_case, non_upper_case_globals, missing_docs)]
#![allow(clippy::all)]

pub use super::CuResult as CUresult;
pub use std::ffi::{c_char, c_int, c_long, c_uint, c_ulong, c_void};

include!(concat!(env!("OUT_DIR"), "/cuda_api.rs"));
