//! The exported NVML functions, by family. Each checks what it can
//! locally (initialisation, handles, null pointers, buffer sizes) and asks
//! libcuda, through [`crate::session`], for the rest.

pub mod device;
pub mod gauges;
pub mod link;
pub mod system;
