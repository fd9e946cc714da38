//! The rsockets calls of `librdmacm.so.1`, resolved once at first use.

use crate::RdmaError;
use libc::{c_int, c_void, nfds_t, pollfd, size_t, sockaddr, socklen_t, ssize_t};
use std::sync::OnceLock;

/// The calls pvgpu makes, as `rsocket.h` declares them.
pub(crate) struct Rsockets {
    pub rsocket: unsafe extern "C" fn(c_int, c_int, c_int) -> c_int,
    pub rbind: unsafe extern "C" fn(c_int, *const sockaddr, socklen_t) -> c_int,
    pub rlisten: unsafe extern "C" fn(c_int, c_int) -> c_int,
    pub raccept: unsafe extern "C" fn(c_int, *mut sockaddr, *mut socklen_t) -> c_int,
    pub rconnect: unsafe extern "C" fn(c_int, *const sockaddr, socklen_t) -> c_int,
    pub rshutdown: unsafe extern "C" fn(c_int, c_int) -> c_int,
    pub rclose: unsafe extern "C" fn(c_int) -> c_int,
    pub rrecv: unsafe extern "C" fn(c_int, *mut c_void, size_t, c_int) -> ssize_t,
    pub rsend: unsafe extern "C" fn(c_int, *const c_void, size_t, c_int) -> ssize_t,
    pub rpoll: unsafe extern "C" fn(*mut pollfd, nfds_t, c_int) -> c_int,
    pub rsetsockopt: unsafe extern "C" fn(c_int, c_int, c_int, *const c_void, socklen_t) -> c_int,
    pub rgetpeername: unsafe extern "C" fn(c_int, *mut sockaddr, *mut socklen_t) -> c_int,
    pub rgetsockname: unsafe extern "C" fn(c_int, *mut sockaddr, *mut socklen_t) -> c_int,
    pub rfcntl: unsafe extern "C" fn(c_int, c_int, ...) -> c_int,
    /// Kept loaded for the life of the process: the pointers above point
    /// into it.
    _lib: libloading::Library,
}

/// The library, loaded at the first call; its error is kept.
pub(crate) fn library() -> Result<&'static Rsockets, RdmaError> {
    static LIB: OnceLock<Result<Rsockets, String>> = OnceLock::new();
    LIB.get_or_init(load).as_ref().map_err(|e| RdmaError::Library(e.clone()))
}

fn load() -> Result<Rsockets, String> {
    // SAFETY: librdmacm's initialisers only set up its own state (they
    // read its configuration files lazily, at the first rsocket).
    let lib = unsafe { libloading::Library::new("librdmacm.so.1") }.map_err(|e| e.to_string())?;
    macro_rules! sym {
        ($name:ident) => {
            // SAFETY: the type is the function's declaration in rdma-core's
            // `rsocket.h`, which has kept these signatures since rsockets
            // came (librdmacm 1.0.16); the pointer is used only while `lib`
            // lives in the same struct, for the life of the process.
            *unsafe { lib.get(concat!(stringify!($name), "\0").as_bytes()) }.map_err(|e| e.to_string())?
        };
    }
    Ok(Rsockets {
        rsocket: sym!(rsocket),
        rbind: sym!(rbind),
        rlisten: sym!(rlisten),
        raccept: sym!(raccept),
        rconnect: sym!(rconnect),
        rshutdown: sym!(rshutdown),
        rclose: sym!(rclose),
        rrecv: sym!(rrecv),
        rsend: sym!(rsend),
        rpoll: sym!(rpoll),
        rsetsockopt: sym!(rsetsockopt),
        rgetpeername: sym!(rgetpeername),
        rgetsockname: sym!(rgetsockname),
        rfcntl: sym!(rfcntl),
        _lib: lib,
    })
}
