//! `cuLinkCreate` .. `cuLinkDestroy`: a link's options and inputs are
//! gathered here, in the program, and linked by the backend's driver at
//! `cuLinkComplete`; the image, the logs and the wall time come back to
//! where the program asked for them.
//!
//! Options with plain values go to the driver; the log buffers, their
//! sizes and the wall time are filled here. Options whose value is a table
//! of the program's (global symbols, referenced names) and per-input
//! options are not supported. Inputs are PTX, cubins and fatbins; a host
//! object or library (`libcudadevrt.a`) goes as the fatbins nvcc embedded
//! in it, its host code staying here.

use crate::state::{self, Res, ctx, handle, id, local_handle, put, run};
use pvgpu_frontend::Context;
use pvgpu_ring::cuda::api::*;
use pvgpu_ring::proto::{LinkInput, LinkSpec};
use pvgpu_ring::{CuError, CuResult};
use std::collections::HashMap;
use std::ffi::{c_char, c_uint, c_void};
use std::sync::Mutex;

/// Where the program wants a link's logs and wall time: addresses it
/// passed to `cuLinkCreate` (null where it passed none), valid for the
/// life of the link state. A log goes to its buffer, whose size is in the
/// size option's slot.
struct Outputs {
    info: *mut c_char,
    info_size: *mut *mut c_void,
    error: *mut c_char,
    error_size: *mut *mut c_void,
    wall: *mut *mut c_void,
}

impl Default for Outputs {
    fn default() -> Self {
        let null: *mut *mut c_void = std::ptr::null_mut();
        Outputs { info: null.cast(), info_size: null, error: null.cast(), error_size: null, wall: null }
    }
}

/// A link state.
struct Link {
    ctx: Context,
    options: Vec<(u32, u64)>,
    outputs: Outputs,
    /// (type, name, bytes) of each input.
    inputs: Vec<(u32, String, Vec<u8>)>,
    /// The image, once complete: the program reads it until it destroys
    /// the state.
    image: Option<Vec<u8>>,
}

// SAFETY: the raw pointers are the program's, which the API says stay
// valid for the state's life; they are used only under `LINKS`' lock.
unsafe impl Send for Link {}

static LINKS: Mutex<Option<HashMap<u64, Link>>> = Mutex::new(None);

fn with<T>(state: *mut c_void, f: impl FnOnce(&mut Link) -> Result<T, CuError>) -> Result<T, CuError> {
    let mut g = LINKS.lock().unwrap_or_else(|p| p.into_inner());
    f(g.get_or_insert_with(HashMap::new).get_mut(&id(state)).ok_or(CuError::INVALID_HANDLE)?)
}

/// Reads the options of `cuLinkCreate`.
///
/// # Safety
/// `options` and `values` hold `n` entries (or `n` is 0).
unsafe fn read_options(n: c_uint, options: *mut CUjit_option, values: *mut *mut c_void) -> Result<(Vec<(u32, u64)>, Outputs), CuError> {
    let (mut plain, mut out) = (Vec::new(), Outputs::default());
    if n == 0 {
        return Ok((plain, out));
    }
    if options.is_null() || values.is_null() || n as usize > pvgpu_ring::proto::MAX_LINK_OPTIONS {
        return Err(CuError::INVALID_VALUE);
    }
    for i in 0..n as usize {
        // SAFETY: `n` entries, per the caller.
        let (o, slot) = unsafe { (options.add(i).read_unaligned(), values.add(i)) };
        // SAFETY: as above.
        let v = unsafe { slot.read_unaligned() };
        match o {
            CU_JIT_INFO_LOG_BUFFER => out.info = v.cast(),
            CU_JIT_ERROR_LOG_BUFFER => out.error = v.cast(),
            CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES => out.info_size = slot,
            CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES => out.error_size = slot,
            CU_JIT_WALL_TIME => out.wall = slot,
            CU_JIT_GLOBAL_SYMBOL_NAMES
            | CU_JIT_GLOBAL_SYMBOL_ADDRESSES
            | CU_JIT_GLOBAL_SYMBOL_COUNT
            | CU_JIT_REFERENCED_KERNEL_NAMES
            | CU_JIT_REFERENCED_KERNEL_COUNT
            | CU_JIT_REFERENCED_VARIABLE_NAMES
            | CU_JIT_REFERENCED_VARIABLE_COUNT => {
                tracing::warn!(option = ?o, "cuLinkCreate: option not supported by pvgpu");
                return Err(CuError::NOT_SUPPORTED);
            }
            _ => plain.push((o.0, v as usize as u64)),
        }
    }
    Ok((plain, out))
}

/// `cuLinkCreate_v2`: a link for the current context's device.
///
/// # Safety
/// `options` and `values` hold `n` entries and stay valid until
/// `cuLinkDestroy`; `state` is writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuLinkCreate_v2(
    n: c_uint,
    options: *mut CUjit_option,
    values: *mut *mut c_void,
    state: *mut CUlinkState,
) -> CuResult {
    run("cuLinkCreate", || {
        state::client()?;
        let ctx = ctx::current()?;
        // SAFETY: per the caller.
        let (options, outputs) = unsafe { read_options(n, options, values) }?;
        let h = local_handle();
        let link = Link { ctx, options, outputs, inputs: Vec::new(), image: None };
        LINKS.lock().unwrap_or_else(|p| p.into_inner()).get_or_insert_with(HashMap::new).insert(h, link);
        // SAFETY: writable per the API.
        unsafe { put(state, handle(h)) }
    })
}

/// `cuLinkCreate`: the same.
///
/// # Safety
/// As for `cuLinkCreate_v2`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuLinkCreate(
    n: c_uint,
    options: *mut CUjit_option,
    values: *mut *mut c_void,
    state: *mut CUlinkState,
) -> CuResult {
    // SAFETY: the same contract.
    unsafe { cuLinkCreate_v2(n, options, values, state) }
}

/// Adds an input of `kind` to a link: a host object or library as the
/// fatbins it embeds ([`super::link_objects`]).
fn add(state: *mut c_void, kind: CUjitInputType, name: String, bytes: Vec<u8>) -> Res {
    let inputs = match kind {
        CU_JIT_INPUT_PTX | CU_JIT_INPUT_CUBIN | CU_JIT_INPUT_FATBINARY => vec![(kind, bytes)],
        CU_JIT_INPUT_OBJECT | CU_JIT_INPUT_LIBRARY => super::link_objects::device_code(&bytes, kind == CU_JIT_INPUT_LIBRARY)?
            .into_iter()
            .map(|f| (CU_JIT_INPUT_FATBINARY, f))
            .collect(),
        _ => {
            tracing::warn!(kind = ?kind, "cuLinkAddData: input type not supported by pvgpu (PTX, cubins, fatbins, host objects and libraries are)");
            return Err(CuError::NOT_SUPPORTED);
        }
    };
    with(state, |l| {
        if l.inputs.len() + inputs.len() > pvgpu_ring::proto::MAX_LINK_INPUTS {
            return Err(CuError::INVALID_VALUE);
        }
        l.inputs.extend(inputs.into_iter().map(|(k, b)| (k.0, name.clone(), b)));
        Ok(())
    })
}

/// `cuLinkAddData_v2`: per-input options are not passed on.
///
/// # Safety
/// `data` holds `size` readable bytes; `name` is null or NUL-terminated.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuLinkAddData_v2(
    state: CUlinkState,
    kind: CUjitInputType,
    data: *mut c_void,
    size: usize,
    name: *const c_char,
    _n: c_uint,
    _options: *mut CUjit_option,
    _values: *mut *mut c_void,
) -> CuResult {
    run("cuLinkAddData", || {
        if data.is_null() || size == 0 {
            return Err(CuError::INVALID_VALUE);
        }
        // SAFETY: `size` readable bytes, per the API.
        let bytes = unsafe { std::slice::from_raw_parts(data.cast::<u8>(), size) }.to_vec();
        // SAFETY: NUL-terminated per the API.
        let name = if name.is_null() { String::new() } else { unsafe { state::name(name) }?.to_string() };
        add(state, kind, name, bytes)
    })
}

/// `cuLinkAddData`: the same.
///
/// # Safety
/// As for `cuLinkAddData_v2`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuLinkAddData(
    state: CUlinkState,
    kind: CUjitInputType,
    data: *mut c_void,
    size: usize,
    name: *const c_char,
    n: c_uint,
    options: *mut CUjit_option,
    values: *mut *mut c_void,
) -> CuResult {
    // SAFETY: the same contract.
    unsafe { cuLinkAddData_v2(state, kind, data, size, name, n, options, values) }
}

/// `cuLinkAddFile_v2`: reads the file here.
///
/// # Safety
/// `path` is NUL-terminated.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuLinkAddFile_v2(
    state: CUlinkState,
    kind: CUjitInputType,
    path: *const c_char,
    _n: c_uint,
    _options: *mut CUjit_option,
    _values: *mut *mut c_void,
) -> CuResult {
    run("cuLinkAddFile", || {
        // SAFETY: NUL-terminated per the API.
        let path = unsafe { state::name(path) }?;
        let bytes = std::fs::read(path).map_err(|_| CuError::FILE_NOT_FOUND)?;
        add(state, kind, path.to_string(), bytes)
    })
}

/// `cuLinkAddFile`: the same.
///
/// # Safety
/// As for `cuLinkAddFile_v2`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuLinkAddFile(
    state: CUlinkState,
    kind: CUjitInputType,
    path: *const c_char,
    n: c_uint,
    options: *mut CUjit_option,
    values: *mut *mut c_void,
) -> CuResult {
    // SAFETY: the same contract.
    unsafe { cuLinkAddFile_v2(state, kind, path, n, options, values) }
}

/// Copies `log` into the program's buffer of the size its size option
/// holds (NUL-terminated, cut to fit) and stores the bytes written there.
///
/// # Safety
/// The pointers are the program's log options, valid per the API.
unsafe fn write_log(buf: *mut c_char, size: *mut *mut c_void, log: &[u8]) {
    if buf.is_null() || size.is_null() {
        return;
    }
    // SAFETY: the size option's slot, per the caller.
    let cap = unsafe { size.read_unaligned() } as usize;
    if cap == 0 {
        return;
    }
    let n = log.len().min(cap - 1);
    // SAFETY: the buffer holds `cap` bytes, per the API.
    unsafe {
        std::ptr::copy_nonoverlapping(log.as_ptr(), buf.cast::<u8>(), n);
        buf.add(n).write(0);
        size.write_unaligned((n + 1) as *mut c_void);
    }
}

/// `cuLinkComplete`: links in the backend; the image stays valid until
/// `cuLinkDestroy`.
///
/// # Safety
/// `image` and `size` are writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuLinkComplete(state: CUlinkState, image: *mut *mut c_void, size: *mut usize) -> CuResult {
    run("cuLinkComplete", || {
        if image.is_null() || size.is_null() {
            return Err(CuError::INVALID_VALUE);
        }
        let (ctx, options, inputs) = with(state, |l| Ok((l.ctx, l.options.clone(), l.inputs.clone())))?;
        let spec = LinkSpec { options, inputs: inputs.iter().map(|(kind, name, data)| LinkInput { kind: *kind, name, data }).collect() };
        let linked = state::client()?.link(ctx, &spec).map_err(state::cu)?;
        with(state, |l| {
            // SAFETY: the program's log and wall-time options, valid for the
            // state's life per the API.
            unsafe {
                let o = &l.outputs;
                write_log(o.info, o.info_size, &linked.info_log);
                write_log(o.error, o.error_size, &linked.error_log);
                if !o.wall.is_null() {
                    o.wall.cast::<f32>().write_unaligned(linked.wall_ms);
                }
            }
            let img = l.image.insert(linked.image.clone()?);
            // SAFETY: writable per the API; the image lives in the state.
            unsafe {
                put(image, img.as_mut_ptr().cast())?;
                put(size, img.len())
            }
        })
    })
}

/// `cuLinkDestroy`.
///
/// # Safety
/// `state` is a link state (or anything: unknown ones are refused).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuLinkDestroy(state: CUlinkState) -> CuResult {
    run("cuLinkDestroy", || {
        let mut g = LINKS.lock().unwrap_or_else(|p| p.into_inner());
        g.get_or_insert_with(HashMap::new).remove(&id(state)).map(drop).ok_or(CuError::INVALID_HANDLE)
    })
}
