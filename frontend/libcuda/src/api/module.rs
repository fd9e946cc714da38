//! Modules and functions. Images are sent to the backend, whose driver
//! JIT-compiles PTX; each function's parameter layout comes back with it and
//! is kept here to pack `cuLaunchKernel` arguments.

use crate::state::objects::{DevAlloc, DevKind};
use crate::state::{self, Res, handle, id, objects, put, run};
use pvgpu_frontend::Module;
use pvgpu_ring::cuda::api::*;
use pvgpu_ring::cuda::api::{
    CU_FUNC_CACHE_PREFER_EQUAL, CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES, CU_JIT_INFO_LOG_BUFFER,
    CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES, CUfunc_cache, CUfunction_attribute, CUjit_option,
};
use pvgpu_ring::{CuError, CuResult};
use std::ffi::{c_char, c_int, c_uint, c_void};

const ELF_MAGIC: [u8; 4] = *b"\x7fELF";
const FATBIN_MAGIC: u32 = 0xBA55_ED50;
const FATBINC_MAGIC: u32 = 0x4662_43B1;
const MAX_IMAGE: usize = 1 << 30;

/// Reads a little-endian integer at `p + off`.
///
/// # Safety
/// `p + off .. p + off + N` must be readable.
unsafe fn le<const N: usize>(p: *const u8, off: usize) -> u64 {
    let mut b = [0u8; 8];
    // SAFETY: the caller guarantees the bytes are readable.
    unsafe { std::ptr::copy_nonoverlapping(p.add(off), b.as_mut_ptr(), N) };
    u64::from_le_bytes(b)
}

/// The length of an ELF64 image given by pointer: the end of the furthest
/// header table or section its headers name (read with `object`).
///
/// # Safety
/// `p` must point to a well-formed ELF image, as the driver API requires.
unsafe fn elf_len(p: *const u8) -> Result<usize, CuError> {
    use object::elf::{FileHeader64, SHT_NOBITS};
    use object::read::elf::{FileHeader, SectionHeader};
    let e = object::LittleEndian;
    let bad = |_| CuError::INVALID_IMAGE;
    // SAFETY: an ELF64 header is 64 bytes, part of the image.
    let head = unsafe { std::slice::from_raw_parts(p, 64) };
    let h = FileHeader64::<object::LittleEndian>::parse(head).map_err(bad)?;
    let table = |off: u64, num: u16, size: u16| off.checked_add(u64::from(num) * u64::from(size));
    let tables = table(h.e_shoff.get(e), h.e_shnum.get(e), h.e_shentsize.get(e))
        .zip(table(h.e_phoff.get(e), h.e_phnum.get(e), h.e_phentsize.get(e)))
        .map(|(s, p)| s.max(p).max(64))
        .filter(|&end| end <= MAX_IMAGE as u64)
        .ok_or(CuError::INVALID_IMAGE)?;
    // SAFETY: the header tables the header names are part of the image.
    let data = unsafe { std::slice::from_raw_parts(p, tables as usize) };
    let mut end = tables;
    for s in h.section_headers(e, data).map_err(bad)? {
        if s.sh_type(e) != SHT_NOBITS {
            end = end.max(s.sh_offset(e).checked_add(s.sh_size(e)).ok_or(CuError::INVALID_IMAGE)?);
        }
    }
    usize::try_from(end).map_err(|_| CuError::INVALID_IMAGE)
}

/// The bytes of a module image given by pointer only, as the driver API
/// passes it: an ELF cubin (its length from its headers), a fatbin (from
/// its header), a fatbin wrapper as nvcc emits it, or NUL-terminated PTX.
///
/// # Safety
/// `image` must point to a well-formed image of one of those kinds, as the
/// driver API requires.
pub unsafe fn image_bytes<'a>(image: *const c_void) -> Result<&'a [u8], CuError> {
    let p = image as *const u8;
    if p.is_null() {
        return Err(CuError::INVALID_VALUE);
    }
    let mut magic = [0u8; 4];
    // SAFETY: every image kind is at least 4 bytes long.
    unsafe { std::ptr::copy_nonoverlapping(p, magic.as_mut_ptr(), 4) };
    let m = u32::from_le_bytes(magic);
    let len = if magic == ELF_MAGIC {
        // SAFETY: a well-formed ELF image, per the caller.
        unsafe { elf_len(p) }?
    } else if m == FATBIN_MAGIC {
        // SAFETY: a fatbin header is 16 bytes.
        unsafe { (le::<2>(p, 6) + le::<8>(p, 8)) as usize }
    } else if m == FATBINC_MAGIC {
        // nvcc's wrapper: {magic, version, const void* data, ...}.
        // SAFETY: the wrapper holds the data pointer at offset 8.
        let data = unsafe { (p.add(8) as *const *const c_void).read_unaligned() };
        // SAFETY: the wrapper's data is a fatbin, per the caller.
        return unsafe { image_bytes(data) };
    } else {
        // SAFETY: PTX is NUL-terminated text, per the caller.
        unsafe { std::ffi::CStr::from_ptr(p.cast()) }.to_bytes().len()
    };
    if len == 0 || len > MAX_IMAGE {
        return Err(CuError::INVALID_IMAGE);
    }
    // SAFETY: the image spans `len` readable bytes (computed above).
    Ok(unsafe { std::slice::from_raw_parts(p, len) })
}

fn load(module: *mut *mut c_void, image: &[u8]) -> Res {
    if module.is_null() {
        return Err(CuError::INVALID_VALUE);
    }
    let ctx = state::current()?;
    let h = state::current_handle().ok_or(CuError::INVALID_CONTEXT)?;
    let m = state::client()?.module_load(ctx, &crate::image::for_context(image, h)?).map_err(state::cu)?;
    objects().modules.insert(m.0, h);
    // SAFETY: non-null and writable per the API.
    unsafe { put(module, handle(m.0)) }
}

/// `cuModuleLoadData`.
///
/// # Safety
/// `module` must be writable and `image` a valid image.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuModuleLoadData(module: *mut *mut c_void, image: *const c_void) -> CuResult {
    // SAFETY: the caller passes a valid image.
    run("cuModuleLoadData", || load(module, unsafe { image_bytes(image) }?))
}

/// `cuModuleLoadDataEx`: JIT options are left to the backend's driver; log
/// buffers come back empty.
///
/// # Safety
/// As for `cuModuleLoadData`; `options` and `values` hold `num_options`
/// entries.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuModuleLoadDataEx(
    module: *mut *mut c_void,
    image: *const c_void,
    num_options: c_uint,
    options: *mut CUjit_option,
    values: *mut *mut c_void,
) -> CuResult {
    run("cuModuleLoadDataEx", || {
        // SAFETY: the caller passes a valid image.
        let bytes = unsafe { image_bytes(image) }?;
        let r = load(module, bytes);
        if !options.is_null() && !values.is_null() {
            for i in 0..num_options.min(64) as usize {
                // SAFETY: `num_options` entries per the API.
                let (opt, val) = unsafe { (*options.add(i), values.add(i)) };
                match opt {
                    // SAFETY: the value of a log buffer option is a char buffer.
                    CU_JIT_INFO_LOG_BUFFER | CU_JIT_ERROR_LOG_BUFFER => unsafe {
                        let buf = *val as *mut c_char;
                        if !buf.is_null() {
                            buf.write(0);
                        }
                    },
                    // SAFETY: size options are in/out values stored in place.
                    CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES | CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES => unsafe { val.write(std::ptr::null_mut()) },
                    _ => {}
                }
            }
        }
        r
    })
}

/// `cuModuleLoadFatBinary`.
///
/// # Safety
/// As for `cuModuleLoadData`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuModuleLoadFatBinary(module: *mut *mut c_void, fat_cubin: *const c_void) -> CuResult {
    // SAFETY: the caller passes a valid fatbin.
    run("cuModuleLoadFatBinary", || load(module, unsafe { image_bytes(fat_cubin) }?))
}

/// `cuModuleLoad`: reads the file here and sends its bytes.
///
/// # Safety
/// `module` must be writable and `fname` NUL-terminated.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuModuleLoad(module: *mut *mut c_void, fname: *const c_char) -> CuResult {
    run("cuModuleLoad", || {
        // SAFETY: NUL-terminated per the API.
        let path = unsafe { state::name(fname) }?;
        let bytes = std::fs::read(path).map_err(|_| CuError::FILE_NOT_FOUND)?;
        load(module, &bytes)
    })
}

/// `cuModuleUnload`.
#[unsafe(no_mangle)]
pub extern "C" fn cuModuleUnload(module: *mut c_void) -> CuResult {
    run("cuModuleUnload", || {
        let m = id(module);
        if !objects().modules.contains_key(&m) {
            return Err(CuError::INVALID_HANDLE);
        }
        state::client_of(m)?.module_unload(Module(m)).map_err(state::cu)?;
        objects().drop_module(m);
        Ok(())
    })
}

/// `cuModuleGetFunction`: also learns the kernel's parameter layout.
///
/// # Safety
/// `hfunc` must be writable and `name` NUL-terminated.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuModuleGetFunction(hfunc: *mut *mut c_void, module: *mut c_void, name: *const c_char) -> CuResult {
    run("cuModuleGetFunction", || {
        // SAFETY: NUL-terminated per the API.
        let n = unsafe { state::name(name) }?;
        let fid = crate::library::module_function(id(module), n)?;
        // SAFETY: writable per the API.
        unsafe { put(hfunc, handle(fid)) }
    })
}

/// `cuModuleGetGlobal_v2`.
///
/// # Safety
/// `dptr` and `bytes` must each be null or writable; `name` NUL-terminated.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuModuleGetGlobal_v2(dptr: *mut u64, bytes: *mut usize, module: *mut c_void, name: *const c_char) -> CuResult {
    run("cuModuleGetGlobal_v2", || {
        // SAFETY: NUL-terminated per the API.
        let n = unsafe { state::name(name) }?;
        let m = id(module);
        let (p, size, managed) = state::client_of(m)?.module_global(Module(m), n).map_err(state::cu)?;
        // A `__managed__` variable is kept coherent with the program's
        // accesses through its pointer, as the runtime's are.
        if managed && !crate::managed::map_variable(p, size as usize) {
            tracing::warn!(name = n, ptr = p, "cuModuleGetGlobal: the managed variable's address is taken in this process");
            return Err(CuError::NOT_SUPPORTED);
        }
        {
            let mut o = objects();
            let ctx = o.modules.get(&m).copied().unwrap_or(0);
            o.device.entry(p).or_insert_with(|| DevAlloc::new(size, ctx, DevKind::Global(m)));
        }
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

/// A `CUfunction` or `CUkernel` as a function of the current context.
fn function(f: *mut c_void) -> Result<pvgpu_frontend::Function, CuError> {
    crate::library::function(id(f)).map(|(_, f)| f)
}

/// `cuFuncGetAttribute`.
///
/// # Safety
/// `pi` must be writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuFuncGetAttribute(pi: *mut c_int, attrib: CUfunction_attribute, hfunc: *mut c_void) -> CuResult {
    run("cuFuncGetAttribute", || {
        let f = function(hfunc)?;
        let v = state::client_of(f.id)?.func_get_attribute(&f, attrib.0 as i32).map_err(state::cu)?;
        // SAFETY: writable per the API.
        unsafe { put(pi, v) }
    })
}

/// `cuFuncSetAttribute`.
#[unsafe(no_mangle)]
pub extern "C" fn cuFuncSetAttribute(hfunc: *mut c_void, attrib: CUfunction_attribute, value: c_int) -> CuResult {
    run("cuFuncSetAttribute", || {
        let f = function(hfunc)?;
        state::client_of(f.id)?.func_set_attribute(&f, attrib.0 as i32, value).map_err(state::cu)
    })
}

/// `cuFuncSetCacheConfig`: a preference the driver may ignore; accepted and
/// not forwarded.
#[unsafe(no_mangle)]
pub extern "C" fn cuFuncSetCacheConfig(hfunc: *mut c_void, config: CUfunc_cache) -> CuResult {
    run("cuFuncSetCacheConfig", || {
        function(hfunc)?;
        if config > CU_FUNC_CACHE_PREFER_EQUAL {
            return Err(CuError::INVALID_VALUE);
        }
        Ok(())
    })
}

/// `cuFuncGetParamInfo`, from the layout learned at lookup.
///
/// # Safety
/// `offset` and `size` must each be null or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuFuncGetParamInfo(hfunc: *mut c_void, index: usize, offset: *mut usize, size: *mut usize) -> CuResult {
    run("cuFuncGetParamInfo", || {
        let f = function(hfunc)?;
        let p = f.params.get(index).ok_or(CuError::INVALID_VALUE)?;
        if !offset.is_null() {
            // SAFETY: non-null and writable per the API.
            unsafe { put(offset, p.offset as usize)? };
        }
        if !size.is_null() {
            // SAFETY: non-null and writable per the API.
            unsafe { put(size, p.size as usize)? };
        }
        Ok(())
    })
}

/// `cuFuncGetName`.
///
/// # Safety
/// `name` must be writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuFuncGetName(name: *mut *const c_char, hfunc: *mut c_void) -> CuResult {
    run("cuFuncGetName", || {
        let (fid, _) = crate::library::function(id(hfunc))?;
        let o = objects();
        let f = o.functions.get(&fid).ok_or(CuError::INVALID_HANDLE)?;
        // SAFETY: writable per the API; the string lives as long as the
        // function's module.
        unsafe { put(name, f.name.as_ptr()) }
    })
}

/// `cuFuncGetModule`.
///
/// # Safety
/// `module` must be writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuFuncGetModule(module: *mut *mut c_void, hfunc: *mut c_void) -> CuResult {
    run("cuFuncGetModule", || {
        let (fid, _) = crate::library::function(id(hfunc))?;
        let m = objects().functions.get(&fid).map(|f| f.module).ok_or(CuError::INVALID_HANDLE)?;
        // SAFETY: writable per the API.
        unsafe { put(module, handle(m)) }
    })
}

fn max_active_blocks(num: *mut c_int, hfunc: *mut c_void, block_size: c_int, dyn_smem: usize, flags: c_uint) -> Res {
    let f = function(hfunc)?;
    let n = state::client_of(f.id)?.occupancy_max_active_blocks(&f, block_size, dyn_smem as u64, flags).map_err(state::cu)?;
    // SAFETY: writable per the API.
    unsafe { put(num, n) }
}

/// `cuOccupancyMaxActiveBlocksPerMultiprocessor`.
///
/// # Safety
/// `num_blocks` must be writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuOccupancyMaxActiveBlocksPerMultiprocessor(
    num_blocks: *mut c_int,
    hfunc: *mut c_void,
    block_size: c_int,
    dyn_smem: usize,
) -> CuResult {
    run("cuOccupancyMaxActiveBlocksPerMultiprocessor", || max_active_blocks(num_blocks, hfunc, block_size, dyn_smem, 0))
}

/// `cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags`.
///
/// # Safety
/// `num_blocks` must be writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(
    num_blocks: *mut c_int,
    hfunc: *mut c_void,
    block_size: c_int,
    dyn_smem: usize,
    flags: c_uint,
) -> CuResult {
    run("cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags", || max_active_blocks(num_blocks, hfunc, block_size, dyn_smem, flags))
}

/// `CUoccupancyB2DSize`: dynamic shared memory for a block size.
type B2DSize = Option<unsafe extern "C" fn(c_int) -> usize>;

/// The driver's search for the block size with the highest occupancy, run
/// here when the program passes a block-size to shared-memory callback
/// (a host function the backend cannot call): every block size from the
/// largest allowed down, in warps, asking the backend for the blocks that
/// fit; ties keep the larger block.
fn potential_block_size(
    grid: *mut c_int,
    block: *mut c_int,
    hfunc: *mut c_void,
    b2d: B2DSize,
    dyn_smem: usize,
    limit: c_int,
    flags: c_uint,
) -> Res {
    if grid.is_null() || block.is_null() {
        return Err(CuError::INVALID_VALUE);
    }
    let f = function(hfunc)?;
    let c = state::client_of(f.id)?;
    let (g, b) = match b2d {
        None => c.occupancy_max_potential_block_size(&f, dyn_smem as u64, limit, flags).map_err(state::cu)?,
        Some(cb) => {
            let ctx = {
                let (fid, _) = crate::library::function(id(hfunc))?;
                let o = objects();
                let m = o.functions.get(&fid).map(|i| i.module).ok_or(CuError::INVALID_HANDLE)?;
                o.modules.get(&m).copied()
            };
            let ctx = ctx.map_or(Ok(0), crate::state::ctx::device_of)?;
            let sms = state::device_attribute(ctx, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)?;
            let warp = state::device_attribute(ctx, CU_DEVICE_ATTRIBUTE_WARP_SIZE)?.max(1);
            let mut max = c.func_get_attribute(&f, 0).map_err(state::cu)?;
            if limit > 0 {
                max = max.min(limit);
            }
            let (mut best_occ, mut best) = (0, (0, 0));
            let mut bs = max / warp * warp;
            if bs == 0 {
                bs = max;
            }
            while bs > 0 {
                // SAFETY: the program's callback, called as the driver would.
                let smem = unsafe { cb(bs) };
                let blocks = c.occupancy_max_active_blocks(&f, bs, smem as u64, flags).map_err(state::cu)?;
                if blocks * bs > best_occ {
                    best_occ = blocks * bs;
                    best = (blocks * sms, bs);
                }
                bs -= warp;
            }
            best
        }
    };
    // SAFETY: both non-null and writable per the API.
    unsafe {
        put(grid, g)?;
        put(block, b)
    }
}

/// `cuOccupancyMaxPotentialBlockSize`.
///
/// # Safety
/// `min_grid_size` and `block_size` must be writable; a callback must be
/// callable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuOccupancyMaxPotentialBlockSize(
    min_grid_size: *mut c_int,
    block_size: *mut c_int,
    hfunc: *mut c_void,
    b2d: B2DSize,
    dyn_smem: usize,
    limit: c_int,
) -> CuResult {
    run("cuOccupancyMaxPotentialBlockSize", || potential_block_size(min_grid_size, block_size, hfunc, b2d, dyn_smem, limit, 0))
}

/// `cuOccupancyMaxPotentialBlockSizeWithFlags`.
///
/// # Safety
/// As `cuOccupancyMaxPotentialBlockSize`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuOccupancyMaxPotentialBlockSizeWithFlags(
    min_grid_size: *mut c_int,
    block_size: *mut c_int,
    hfunc: *mut c_void,
    b2d: B2DSize,
    dyn_smem: usize,
    limit: c_int,
    flags: c_uint,
) -> CuResult {
    run("cuOccupancyMaxPotentialBlockSizeWithFlags", || potential_block_size(min_grid_size, block_size, hfunc, b2d, dyn_smem, limit, flags))
}

/// `cuOccupancyAvailableDynamicSMemPerBlock`.
///
/// # Safety
/// `size` must be writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuOccupancyAvailableDynamicSMemPerBlock(
    size: *mut usize,
    hfunc: *mut c_void,
    num_blocks: c_int,
    block_size: c_int,
) -> CuResult {
    run("cuOccupancyAvailableDynamicSMemPerBlock", || {
        let f = function(hfunc)?;
        let v = state::client_of(f.id)?.occupancy_available_dynamic_smem(&f, num_blocks, block_size).map_err(state::cu)?;
        // SAFETY: writable per the API.
        unsafe { put(size, v as usize) }
    })
}

#[cfg(test)]
mod tests {
    use super::image_bytes;

    #[test]
    fn image_lengths_come_from_headers() {
        let cubin = include_bytes!("../../../../tests/kernels/kernels.sm_90.cubin");
        let fatbin = include_bytes!("../../../../tests/kernels/kernels.fatbin");
        let mut ptx = include_bytes!("../../../../tests/kernels/kernels.ptx").to_vec();
        // SAFETY: each buffer holds a complete image.
        unsafe {
            assert_eq!(image_bytes(cubin.as_ptr().cast()).unwrap().len(), cubin.len());
            assert_eq!(image_bytes(fatbin.as_ptr().cast()).unwrap().len(), fatbin.len());
            let n = ptx.len();
            ptx.push(0);
            assert_eq!(image_bytes(ptx.as_ptr().cast()).unwrap().len(), n);
        }
    }
}
