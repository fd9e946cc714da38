//! `pvgpu-bench`: measures pvgpu against native CUDA.
fn main() {}
