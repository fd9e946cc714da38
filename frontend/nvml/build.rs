//! Gives the library NVIDIA's SONAME, so that programs and `dlopen` calls
//! asking for `libnvidia-ml.so.1` accept it, and `$ORIGIN` as its RUNPATH,
//! so that its `dlopen("libcuda.so.1")` finds pvgpu's libcuda installed in
//! the same directory (after `LD_LIBRARY_PATH`, as RUNPATH comes).

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libnvidia-ml.so.1");
    println!("cargo:rustc-cdylib-link-arg=-Wl,-rpath,$ORIGIN");
    println!("cargo:rustc-cdylib-link-arg=-Wl,--enable-new-dtags");
}
