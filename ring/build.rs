//! Writes the CUDA driver API's types (`pvgpu_ring::cuda::api`) from the
//! one declaration list, `pvgpu-cuda-decl`.

fn main() {
    let decls = pvgpu_cuda_decl::Decls::cuda();
    let out = std::path::Path::new(&std::env::var("OUT_DIR").expect("OUT_DIR")).join("cuda_api.rs");
    let mut text = pvgpu_cuda_decl::rust_types(&decls);
    text.push_str(&pvgpu_cuda_decl::rust_driver(&decls));
    std::fs::write(out, text).expect("writing cuda_api.rs");
}
