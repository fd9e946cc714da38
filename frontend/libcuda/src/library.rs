//! Libraries and kernels (`CUlibrary`, `CUkernel`), the way NVIDIA's
//! runtime loads and launches every kernel of a program.
//!
//! A library is context-independent. Its image is kept here and loaded as a
//! module into a context the first time one of its kernels or globals is
//! used there (lazy loading, what `cuModuleGetLoadingMode` reports), so a
//! program's fatbins reach the backend only when needed. A kernel handle
//! resolves to the function of the current context; every entry point that
//! takes a `CUfunction` also takes a `CUkernel`.

use crate::state::objects::{FnInfo, KernelInfo, LibInfo};
use crate::state::{self, client, ctx, local_handle, objects};
use pvgpu_frontend::{CuError, Function, Module};
use std::collections::HashMap;
use std::ffi::CString;

/// Keeps `image` as a new library; returns its handle.
pub fn load(image: &[u8]) -> Result<u64, CuError> {
    client()?;
    if image.is_empty() {
        return Err(CuError::INVALID_IMAGE);
    }
    let h = local_handle();
    objects().libraries.insert(h, LibInfo { image: image.into(), modules: HashMap::new() });
    Ok(h)
}

/// Unloads a library from every context it was loaded into and forgets its
/// kernels.
pub fn unload(lib: u64) -> Result<(), CuError> {
    let info = objects().libraries.remove(&lib).ok_or(CuError::INVALID_HANDLE)?;
    objects().kernels.retain(|_, k| k.library != lib);
    for (_, m) in info.modules {
        // A module of a context destroyed since is gone with it.
        if objects().modules.contains_key(&m) {
            state::client_of(m)?.module_unload(Module(m)).map_err(state::cu)?;
            objects().drop_module(m);
        }
    }
    Ok(())
}

/// The library's module in context `ctx`, loading it there on first use.
pub fn module(lib: u64, ctx: u64) -> Result<u64, CuError> {
    let image = {
        let o = objects();
        let l = o.libraries.get(&lib).ok_or(CuError::INVALID_HANDLE)?;
        if let Some(&m) = l.modules.get(&ctx) {
            return Ok(m);
        }
        l.image.clone()
    };
    let backend = ctx::backend(ctx)?;
    let m = state::client_of_ctx(ctx)?.module_load(backend, &crate::image::for_context(&image, ctx)?).map_err(state::cu)?;
    let mut o = objects();
    o.modules.insert(m.0, ctx);
    match o.libraries.get_mut(&lib) {
        Some(l) => {
            l.modules.insert(ctx, m.0);
            Ok(m.0)
        }
        // Unloaded by another thread meanwhile.
        None => Err(CuError::INVALID_HANDLE),
    }
}

/// Looks a kernel up by name in module `m` and records it.
pub fn module_function(m: u64, name: &str) -> Result<u64, CuError> {
    let f = state::client_of(m)?.module_get_function(Module(m), name).map_err(state::cu)?;
    let fid = f.id;
    let cname = CString::new(name).map_err(|_| CuError::INVALID_VALUE)?;
    // The first name stays: `cuFuncGetName` handed out its address.
    objects().functions.entry(fid).or_insert(FnInfo { func: f, module: m, name: cname });
    Ok(fid)
}

/// `cuLibraryGetKernel`: a handle for kernel `name` of the library, checked
/// in the current context when there is one.
pub fn kernel(lib: u64, name: &str) -> Result<u64, CuError> {
    let cname = CString::new(name).map_err(|_| CuError::INVALID_VALUE)?;
    {
        let o = objects();
        o.libraries.get(&lib).ok_or(CuError::INVALID_HANDLE)?;
        if let Some((&h, _)) = o.kernels.iter().find(|(_, k)| k.library == lib && k.name == cname) {
            return Ok(h);
        }
    }
    let h = local_handle();
    objects().kernels.insert(h, KernelInfo { library: lib, name: cname, functions: HashMap::new(), attrs: Vec::new() });
    if let Some(cur) = ctx::current_handle().filter(|&c| ctx::backend(c).is_ok()) {
        if let Err(e) = kernel_function(h, cur) {
            objects().kernels.remove(&h);
            return Err(e);
        }
    }
    Ok(h)
}

/// The function of kernel `k` in context `ctx`, resolved on first use
/// (with the attributes set on the kernel so far).
pub fn kernel_function(k: u64, ctx: u64) -> Result<u64, CuError> {
    let (lib, name, attrs) = {
        let o = objects();
        let info = o.kernels.get(&k).ok_or(CuError::INVALID_HANDLE)?;
        if let Some(&f) = info.functions.get(&ctx) {
            return Ok(f);
        }
        (info.library, info.name.to_str().map_err(|_| CuError::INVALID_VALUE)?.to_string(), info.attrs.clone())
    };
    let m = module(lib, ctx)?;
    let fid = module_function(m, &name)?;
    let c = state::client_of_ctx(ctx)?;
    let f = objects().functions.get(&fid).map(|f| f.func.clone()).ok_or(CuError::INVALID_HANDLE)?;
    for (attr, value) in attrs {
        c.func_set_attribute(&f, attr, value).map_err(state::cu)?;
    }
    if let Some(info) = objects().kernels.get_mut(&k) {
        info.functions.insert(ctx, fid);
    }
    Ok(fid)
}

/// A `CUfunction` or `CUkernel` the program passed, as a function of the
/// current context: (function id, layout).
pub fn function(h: u64) -> Result<(u64, Function), CuError> {
    if let Some(f) = objects().functions.get(&h) {
        return Ok((h, f.func.clone()));
    }
    if !objects().kernels.contains_key(&h) {
        return Err(CuError::INVALID_HANDLE);
    }
    let cur = ctx::current_handle().ok_or(CuError::INVALID_CONTEXT)?;
    let fid = kernel_function(h, cur)?;
    let f = objects().functions.get(&fid).map(|f| f.func.clone()).ok_or(CuError::INVALID_HANDLE)?;
    Ok((fid, f))
}

/// The kernel names of a library, as the backend's driver lists them in
/// the current context.
pub fn kernel_names(lib: u64) -> Result<Vec<String>, CuError> {
    let cur = ctx::current_handle().ok_or(CuError::INVALID_CONTEXT)?;
    let m = module(lib, cur)?;
    state::client_of(m)?.module_function_names(Module(m)).map_err(state::cu)
}
