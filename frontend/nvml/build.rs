//! Gives the library NVIDIA's SONAME, so that programs and `dlopen` calls
//! asking for `libnvidia-ml.so.1` accept it.

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libnvidia-ml.so.1");
}
