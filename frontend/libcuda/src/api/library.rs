//! The library API (`cuLibrary*`, `cuKernel*`), the loading mode, the
//! enumeration of a module's functions, and host functions on streams.
//! See [`crate::library`] and [`crate::callback`].

use crate::callback::{self, Call, HostFn, StreamCallback};
use crate::library;
use crate::state::objects::{DevAlloc, DevKind};
use crate::state::{self, Res, handle, id, objects, put, run};
use pvgpu_frontend::{Function, Module};
use pvgpu_ring::cuda::api::{
    CU_FUNC_CACHE_PREFER_EQUAL, CU_MODULE_EAGER_LOADING, CU_MODULE_LAZY_LOADING, CUfunc_cache, CUfunction_attribute, CUjit_option,
    CUlibraryOption, CUmoduleLoadingMode,
};
use pvgpu_ring::{CuError, CuResult};
use std::ffi::{c_char, c_int, c_uint, c_void};

/// `cuModuleGetLoadingMode`: lazy (libraries are loaded into a context at
/// the first use of one of their kernels), unless `CUDA_MODULE_LOADING=EAGER`
/// asks programs to load everything up front.
///
/// # Safety
/// `mode` must be writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuModuleGetLoadingMode(mode: *mut CUmoduleLoadingMode) -> CuResult {
    run("cuModuleGetLoadingMode", || {
        let eager = std::env::var("CUDA_MODULE_LOADING").is_ok_and(|v| v.eq_ignore_ascii_case("EAGER"));
        // SAFETY: writable per the API.
        unsafe { put(mode, if eager { CU_MODULE_EAGER_LOADING } else { CU_MODULE_LAZY_LOADING }) }
    })
}

fn load(lib: *mut *mut c_void, image: &[u8]) -> Res {
    if lib.is_null() {
        return Err(CuError::INVALID_VALUE);
    }
    let h = library::load(image)?;
    // SAFETY: non-null and writable per the API.
    unsafe { put(lib, handle(h)) }
}

/// `cuLibraryLoadData`: keeps a copy of the image (PTX, cubin, fatbin or
/// nvcc's fatbin wrapper); JIT and library options are left to the
/// backend's driver.
///
/// # Safety
/// `lib` must be writable and `code` a valid image.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuLibraryLoadData(
    lib: *mut *mut c_void,
    code: *const c_void,
    _jit_options: *mut CUjit_option,
    _jit_values: *mut *mut c_void,
    _num_jit: c_uint,
    _lib_options: *mut CUlibraryOption,
    _lib_values: *mut *mut c_void,
    _num_lib: c_uint,
) -> CuResult {
    // SAFETY: the caller passes a valid image.
    run("cuLibraryLoadData", || load(lib, unsafe { crate::api::module::image_bytes(code) }?))
}

/// `cuLibraryLoadFromFile`: reads the file here.
///
/// # Safety
/// `lib` must be writable and `file` NUL-terminated.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuLibraryLoadFromFile(
    lib: *mut *mut c_void,
    file: *const c_char,
    _jit_options: *mut CUjit_option,
    _jit_values: *mut *mut c_void,
    _num_jit: c_uint,
    _lib_options: *mut CUlibraryOption,
    _lib_values: *mut *mut c_void,
    _num_lib: c_uint,
) -> CuResult {
    run("cuLibraryLoadFromFile", || {
        // SAFETY: NUL-terminated per the API.
        let path = unsafe { state::name(file) }?;
        let bytes = std::fs::read(path).map_err(|_| CuError::FILE_NOT_FOUND)?;
        load(lib, &bytes)
    })
}

/// `cuLibraryUnload`.
#[unsafe(no_mangle)]
pub extern "C" fn cuLibraryUnload(lib: *mut c_void) -> CuResult {
    run("cuLibraryUnload", || library::unload(id(lib)))
}

/// `cuLibraryGetKernel`.
///
/// # Safety
/// `kernel` must be writable and `name` NUL-terminated.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuLibraryGetKernel(kernel: *mut *mut c_void, lib: *mut c_void, name: *const c_char) -> CuResult {
    run("cuLibraryGetKernel", || {
        // SAFETY: NUL-terminated per the API.
        let k = library::kernel(id(lib), unsafe { state::name(name) }?)?;
        // SAFETY: writable per the API.
        unsafe { put(kernel, handle(k)) }
    })
}

/// `cuLibraryGetModule`: the library's module in the current context.
///
/// # Safety
/// `module` must be writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuLibraryGetModule(module: *mut *mut c_void, lib: *mut c_void) -> CuResult {
    run("cuLibraryGetModule", || {
        let cur = state::current_handle().ok_or(CuError::INVALID_CONTEXT)?;
        let m = library::module(id(lib), cur)?;
        // SAFETY: writable per the API.
        unsafe { put(module, handle(m)) }
    })
}

/// `cuLibraryGetGlobal`: a device variable of the library in the current
/// context.
///
/// # Safety
/// `dptr` and `bytes` must each be null or writable; `name` NUL-terminated.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuLibraryGetGlobal(dptr: *mut u64, bytes: *mut usize, lib: *mut c_void, name: *const c_char) -> CuResult {
    run("cuLibraryGetGlobal", || {
        // SAFETY: NUL-terminated per the API.
        let n = unsafe { state::name(name) }?;
        let cur = state::current_handle().ok_or(CuError::INVALID_CONTEXT)?;
        let m = library::module(id(lib), cur)?;
        let (p, size) = state::client_of(m)?.module_get_global(Module(m), n).map_err(state::cu)?;
        objects().device.entry(p).or_insert_with(|| DevAlloc::new(size, cur, DevKind::Global(m)));
        if !dptr.is_null() {
            // SAFETY: non-null and writable per the API.
            unsafe { put(dptr, p)? };
        }
        if !bytes.is_null() {
            // SAFETY: non-null and writable per the API.
            unsafe { put(bytes, size as usize)? };
        }
        Ok(())
    })
}

/// `cuLibraryGetManaged`: a `__managed__` variable of the library (NVIDIA's
/// runtime finds them so), in the current context; its pages in this
/// process are kept coherent with the device ([`crate::managed`]).
///
/// # Safety
/// `name` must be NUL-terminated; `dptr` and `bytes` null or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuLibraryGetManaged(dptr: *mut u64, bytes: *mut usize, lib: *mut c_void, name: *const c_char) -> CuResult {
    run("cuLibraryGetManaged", || {
        // SAFETY: NUL-terminated per the API.
        let n = unsafe { state::name(name) }?;
        let cur = match state::current_handle() {
            Some(h) => h,
            // The runtime asks before any context is current; managed
            // variables belong to no context natively. Here they live in
            // device 0's primary context, held for them from now on.
            None => state::ctx::primary_held(0)?,
        };
        let m = library::module(id(lib), cur)?;
        let (p, size) = state::client_of(m)?.module_get_global(Module(m), n).map_err(state::cu)?;
        if !crate::managed::map_variable(p, size as usize) {
            tracing::warn!(name = n, ptr = p, "cuLibraryGetManaged: the variable's address is taken in this process");
            return Err(CuError::NOT_SUPPORTED);
        }
        objects().device.entry(p).or_insert_with(|| DevAlloc::new(size, cur, DevKind::Global(m)));
        if !dptr.is_null() {
            // SAFETY: non-null and writable per the API.
            unsafe { put(dptr, p)? };
        }
        if !bytes.is_null() {
            // SAFETY: non-null and writable per the API.
            unsafe { put(bytes, size as usize)? };
        }
        Ok(())
    })
}

/// `cuLibraryGetKernelCount`.
///
/// # Safety
/// `count` must be writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuLibraryGetKernelCount(count: *mut c_uint, lib: *mut c_void) -> CuResult {
    run("cuLibraryGetKernelCount", || {
        let n = library::kernel_names(id(lib))?.len();
        // SAFETY: writable per the API.
        unsafe { put(count, n as c_uint) }
    })
}

/// `cuLibraryEnumerateKernels`.
///
/// # Safety
/// `kernels` must hold `num` writable handles.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuLibraryEnumerateKernels(kernels: *mut *mut c_void, num: c_uint, lib: *mut c_void) -> CuResult {
    run("cuLibraryEnumerateKernels", || {
        if kernels.is_null() {
            return Err(CuError::INVALID_VALUE);
        }
        let names = library::kernel_names(id(lib))?;
        for (i, n) in names.iter().take(num as usize).enumerate() {
            let k = library::kernel(id(lib), n)?;
            // SAFETY: `num` writable handles, per the API.
            unsafe { kernels.add(i).write(handle(k)) };
        }
        Ok(())
    })
}

/// `cuModuleGetFunctionCount`.
///
/// # Safety
/// `count` must be writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuModuleGetFunctionCount(count: *mut c_uint, module: *mut c_void) -> CuResult {
    run("cuModuleGetFunctionCount", || {
        let n = state::client_of(id(module))?.module_function_names(Module(id(module))).map_err(state::cu)?.len();
        // SAFETY: writable per the API.
        unsafe { put(count, n as c_uint) }
    })
}

/// `cuModuleEnumerateFunctions`.
///
/// # Safety
/// `functions` must hold `num` writable handles.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuModuleEnumerateFunctions(functions: *mut *mut c_void, num: c_uint, module: *mut c_void) -> CuResult {
    run("cuModuleEnumerateFunctions", || {
        if functions.is_null() {
            return Err(CuError::INVALID_VALUE);
        }
        let names = state::client_of(id(module))?.module_function_names(Module(id(module))).map_err(state::cu)?;
        for (i, n) in names.iter().take(num as usize).enumerate() {
            let f = library::module_function(id(module), n)?;
            // SAFETY: `num` writable handles, per the API.
            unsafe { functions.add(i).write(handle(f)) };
        }
        Ok(())
    })
}

/// `cuKernelGetFunction`: the kernel's function in the current context.
///
/// # Safety
/// `func` must be writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuKernelGetFunction(func: *mut *mut c_void, kernel: *mut c_void) -> CuResult {
    run("cuKernelGetFunction", || {
        let (fid, _) = library::function(id(kernel))?;
        // SAFETY: writable per the API.
        unsafe { put(func, handle(fid)) }
    })
}

/// `cuKernelGetLibrary`.
///
/// # Safety
/// `lib` must be writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuKernelGetLibrary(lib: *mut *mut c_void, kernel: *mut c_void) -> CuResult {
    run("cuKernelGetLibrary", || {
        let l = objects().kernels.get(&id(kernel)).map(|k| k.library).ok_or(CuError::INVALID_HANDLE)?;
        // SAFETY: writable per the API.
        unsafe { put(lib, handle(l)) }
    })
}

/// `cuKernelGetName`.
///
/// # Safety
/// `name` must be writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuKernelGetName(name: *mut *const c_char, kernel: *mut c_void) -> CuResult {
    run("cuKernelGetName", || {
        let o = objects();
        let k = o.kernels.get(&id(kernel)).ok_or(CuError::INVALID_HANDLE)?;
        // SAFETY: writable per the API; the name lives as long as the
        // kernel's library.
        unsafe { put(name, k.name.as_ptr()) }
    })
}

/// `cuKernelGetParamInfo`.
///
/// # Safety
/// `offset` and `size` must each be null or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuKernelGetParamInfo(kernel: *mut c_void, index: usize, offset: *mut usize, size: *mut usize) -> CuResult {
    // SAFETY: the same contract.
    unsafe { crate::api::module::cuFuncGetParamInfo(kernel, index, offset, size) }
}

fn kernel_function(kernel: *mut c_void) -> Result<Function, CuError> {
    library::function(id(kernel)).map(|(_, f)| f)
}

/// `cuKernelGetAttribute`, in the current context.
///
/// # Safety
/// `pi` must be writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuKernelGetAttribute(pi: *mut c_int, attrib: CUfunction_attribute, kernel: *mut c_void, _dev: c_int) -> CuResult {
    run("cuKernelGetAttribute", || {
        let f = kernel_function(kernel)?;
        let v = state::client_of(f.id)?.func_get_attribute(&f, attrib.0 as i32).map_err(state::cu)?;
        // SAFETY: writable per the API.
        unsafe { put(pi, v) }
    })
}

/// `cuKernelSetAttribute`: set on the kernel's functions in every context
/// it was used in, and on those it is resolved in later.
#[unsafe(no_mangle)]
pub extern "C" fn cuKernelSetAttribute(attrib: CUfunction_attribute, value: c_int, kernel: *mut c_void, _dev: c_int) -> CuResult {
    run("cuKernelSetAttribute", || {
        let attrib = attrib.0 as i32;
        let k = id(kernel);
        let fids: Vec<u64> = {
            let mut o = objects();
            let info = o.kernels.get_mut(&k).ok_or(CuError::INVALID_HANDLE)?;
            info.attrs.retain(|(a, _)| *a != attrib);
            info.attrs.push((attrib, value));
            info.functions.values().copied().collect()
        };
        for fid in fids {
            let f = objects().functions.get(&fid).map(|f| f.func.clone());
            if let Some(f) = f {
                state::client_of(fid)?.func_set_attribute(&f, attrib, value).map_err(state::cu)?;
            }
        }
        Ok(())
    })
}

/// `cuKernelSetCacheConfig`: a preference the driver may ignore; accepted.
#[unsafe(no_mangle)]
pub extern "C" fn cuKernelSetCacheConfig(kernel: *mut c_void, config: CUfunc_cache, _dev: c_int) -> CuResult {
    run("cuKernelSetCacheConfig", || {
        objects().kernels.get(&id(kernel)).ok_or(CuError::INVALID_HANDLE)?;
        if config > CU_FUNC_CACHE_PREFER_EQUAL {
            return Err(CuError::INVALID_VALUE);
        }
        Ok(())
    })
}

/// The context of a stream handle (the current one for a default stream).
fn stream_context(s: *mut c_void) -> Result<pvgpu_frontend::Context, CuError> {
    let st = state::stream(s);
    let h = if st == pvgpu_frontend::Stream::DEFAULT {
        state::current_handle().ok_or(CuError::INVALID_CONTEXT)?
    } else {
        objects().streams.get(&st.0).map(|i| i.ctx).ok_or(CuError::INVALID_HANDLE)?
    };
    state::ctx::backend(h)
}

/// `cuLaunchHostFunc`: `f(data)` runs in this process after the work before
/// it on the stream, and the work after it waits for it.
#[unsafe(no_mangle)]
pub extern "C" fn cuLaunchHostFunc(s: *mut c_void, f: Option<HostFn>, data: *mut c_void) -> CuResult {
    run("cuLaunchHostFunc", || {
        let f = f.ok_or(CuError::INVALID_VALUE)?;
        callback::enqueue(stream_context(s)?, state::stream(s), Call::Host(f, data as usize))
    })
}

/// `cuStreamAddCallback`: as [`cuLaunchHostFunc`], with the stream and its
/// status passed to the callback.
#[unsafe(no_mangle)]
pub extern "C" fn cuStreamAddCallback(s: *mut c_void, f: Option<StreamCallback>, data: *mut c_void, flags: c_uint) -> CuResult {
    run("cuStreamAddCallback", || {
        let f = f.ok_or(CuError::INVALID_VALUE)?;
        if flags != 0 {
            return Err(CuError::INVALID_VALUE);
        }
        callback::enqueue(stream_context(s)?, state::stream(s), Call::Stream(f, s as usize, data as usize))
    })
}
