//! Texture and surface objects (`cuTexObjectCreate`, `cuSurfObjectCreate`
//! and their queries). The object's value is the backend driver's, which
//! kernels receive as it is; the library keeps the descriptors the program
//! gave to answer the queries without a round trip.

use super::array;
use crate::state::{self, Res, ctx, put, run};
use pvgpu_frontend::TexSampling;
use pvgpu_ring::cuda::api::{
    CU_RESOURCE_TYPE_ARRAY, CU_RESOURCE_TYPE_LINEAR, CU_RESOURCE_TYPE_MIPMAPPED_ARRAY, CU_RESOURCE_TYPE_PITCH2D, CUDA_RESOURCE_DESC,
    CUDA_RESOURCE_VIEW_DESC, CUDA_TEXTURE_DESC, CUsurfObject, CUtexObject,
};
use pvgpu_ring::proto::{self, ResourceView};
use pvgpu_ring::{CuError, CuResult};
use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};

/// The descriptors an object was made from, and its context.
struct Descs {
    ctx: pvgpu_frontend::Context,
    res: CUDA_RESOURCE_DESC,
    tex: Option<CUDA_TEXTURE_DESC>,
    view: Option<CUDA_RESOURCE_VIEW_DESC>,
}

// SAFETY: the descriptors are plain numbers and array handles, which are
// ids the library never dereferences.
unsafe impl Send for Descs {}

static OBJECTS: Mutex<Option<HashMap<u64, Descs>>> = Mutex::new(None);

fn objects() -> MutexGuard<'static, Option<HashMap<u64, Descs>>> {
    OBJECTS.lock().unwrap_or_else(|p| p.into_inner())
}

/// The wire form of a resource descriptor, its array named by id.
fn resource(r: &CUDA_RESOURCE_DESC) -> Result<proto::ResourceDesc, CuError> {
    let mut d = proto::ResourceDesc { flags: r.flags.into(), ..Default::default() };
    match r.resType {
        CU_RESOURCE_TYPE_ARRAY => {
            d.kind = proto::RESOURCE_ARRAY.into();
            // SAFETY: the member `resType` names, as the API defines the
            // descriptor; every member is plain data.
            d.addr = array::array(unsafe { r.res.array.hArray })?.0.into();
        }
        CU_RESOURCE_TYPE_MIPMAPPED_ARRAY => {
            d.kind = proto::RESOURCE_MIPMAPPED.into();
            // SAFETY: as above.
            d.addr = array::mipmapped(unsafe { r.res.mipmap.hMipmappedArray })?.0.into();
        }
        CU_RESOURCE_TYPE_LINEAR => {
            // SAFETY: as above.
            let l = unsafe { r.res.linear };
            d.kind = proto::RESOURCE_LINEAR.into();
            (d.addr, d.format, d.channels, d.bytes) =
                (l.devPtr.into(), l.format.0.into(), l.numChannels.into(), (l.sizeInBytes as u64).into());
        }
        CU_RESOURCE_TYPE_PITCH2D => {
            // SAFETY: as above.
            let p = unsafe { r.res.pitch2D };
            d.kind = proto::RESOURCE_PITCH2D.into();
            (d.addr, d.format, d.channels) = (p.devPtr.into(), p.format.0.into(), p.numChannels.into());
            (d.width, d.height, d.bytes) = ((p.width as u64).into(), (p.height as u64).into(), (p.pitchInBytes as u64).into());
        }
        _ => return Err(CuError::INVALID_VALUE),
    }
    Ok(d)
}

fn sampling(t: &CUDA_TEXTURE_DESC, v: Option<&CUDA_RESOURCE_VIEW_DESC>) -> TexSampling {
    let b = |f: f32| f.to_bits();
    let words = [
        t.addressMode[0].0,
        t.addressMode[1].0,
        t.addressMode[2].0,
        t.filterMode.0,
        t.flags,
        t.maxAnisotropy,
        t.mipmapFilterMode.0,
        b(t.mipmapLevelBias),
        b(t.minMipmapLevelClamp),
        b(t.maxMipmapLevelClamp),
        b(t.borderColor[0]),
        b(t.borderColor[1]),
        b(t.borderColor[2]),
    ];
    let view = v.map(|v| ResourceView {
        format: v.format.0.into(),
        first_level: v.firstMipmapLevel.into(),
        last_level: v.lastMipmapLevel.into(),
        first_layer: v.firstLayer.into(),
        last_layer: v.lastLayer.into(),
        reserved: 0.into(),
        width: (v.width as u64).into(),
        height: (v.height as u64).into(),
        depth: (v.depth as u64).into(),
    });
    TexSampling { words, view }
}

fn create(
    out: *mut u64,
    r: *const CUDA_RESOURCE_DESC,
    t: *const CUDA_TEXTURE_DESC,
    v: *const CUDA_RESOURCE_VIEW_DESC,
    surface: bool,
) -> Res {
    // SAFETY: readable descriptors per the API (null refused; the view
    // and, for a surface, the texture descriptor are optional).
    let (r, t, v) = unsafe { (r.as_ref().ok_or(CuError::INVALID_VALUE)?, t.as_ref(), v.as_ref()) };
    if out.is_null() || !surface && t.is_none() {
        return Err(CuError::INVALID_VALUE);
    }
    let res = resource(r)?;
    let s = t.map(|t| sampling(t, v));
    let c = ctx::current()?;
    let o = state::client()?.tex_object_create(c, res, if surface { None } else { s.as_ref() }).map_err(state::cu)?;
    objects().get_or_insert_with(HashMap::new).insert(o, Descs { ctx: c, res: *r, tex: t.copied(), view: v.copied() });
    // SAFETY: non-null and writable per the API.
    unsafe { put(out, o) }
}

fn destroy(o: u64, surface: bool) -> Res {
    // The context the object was made in (the library's record), else the
    // current one, whose driver refuses a value it does not know.
    let c = match objects().as_ref().and_then(|m| m.get(&o)).map(|d| d.ctx) {
        Some(c) => c,
        None => ctx::current()?,
    };
    state::client()?.tex_object_destroy(c, o, surface).map_err(state::cu)?;
    if let Some(m) = objects().as_mut() {
        m.remove(&o);
    }
    Ok(())
}

/// Writes what `f` takes of object `o`'s descriptors to `out`.
fn query<T>(out: *mut T, o: u64, f: impl FnOnce(&Descs) -> Option<T>) -> Res {
    let v = objects().as_ref().and_then(|m| m.get(&o)).map(f).ok_or(CuError::INVALID_VALUE)?;
    // SAFETY: writable per the API (null refused).
    unsafe { put(out, v.ok_or(CuError::INVALID_VALUE)?) }
}

/// `cuTexObjectCreate`.
///
/// # Safety
/// `out` writable; the descriptors readable (the view may be null).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuTexObjectCreate(
    out: *mut CUtexObject,
    r: *const CUDA_RESOURCE_DESC,
    t: *const CUDA_TEXTURE_DESC,
    v: *const CUDA_RESOURCE_VIEW_DESC,
) -> CuResult {
    run("cuTexObjectCreate", || create(out, r, t, v, false))
}

/// `cuTexObjectDestroy`.
#[unsafe(no_mangle)]
pub extern "C" fn cuTexObjectDestroy(o: CUtexObject) -> CuResult {
    run("cuTexObjectDestroy", || destroy(o, false))
}

/// `cuTexObjectGetResourceDesc`.
///
/// # Safety
/// `out` writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuTexObjectGetResourceDesc(out: *mut CUDA_RESOURCE_DESC, o: CUtexObject) -> CuResult {
    run("cuTexObjectGetResourceDesc", || query(out, o, |d| d.tex.map(|_| d.res)))
}

/// `cuTexObjectGetTextureDesc`.
///
/// # Safety
/// `out` writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuTexObjectGetTextureDesc(out: *mut CUDA_TEXTURE_DESC, o: CUtexObject) -> CuResult {
    run("cuTexObjectGetTextureDesc", || query(out, o, |d| d.tex))
}

/// `cuTexObjectGetResourceViewDesc`: the view the object was made with
/// (`CUDA_ERROR_INVALID_VALUE` when it had none, as the driver answers).
///
/// # Safety
/// `out` writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuTexObjectGetResourceViewDesc(out: *mut CUDA_RESOURCE_VIEW_DESC, o: CUtexObject) -> CuResult {
    run("cuTexObjectGetResourceViewDesc", || query(out, o, |d| d.tex.and(d.view)))
}

/// `cuSurfObjectCreate`.
///
/// # Safety
/// `out` writable; `r` readable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuSurfObjectCreate(out: *mut CUsurfObject, r: *const CUDA_RESOURCE_DESC) -> CuResult {
    run("cuSurfObjectCreate", || create(out, r, std::ptr::null(), std::ptr::null(), true))
}

/// `cuSurfObjectDestroy`.
#[unsafe(no_mangle)]
pub extern "C" fn cuSurfObjectDestroy(o: CUsurfObject) -> CuResult {
    run("cuSurfObjectDestroy", || destroy(o, true))
}

/// `cuSurfObjectGetResourceDesc`.
///
/// # Safety
/// `out` writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuSurfObjectGetResourceDesc(out: *mut CUDA_RESOURCE_DESC, o: CUsurfObject) -> CuResult {
    run("cuSurfObjectGetResourceDesc", || query(out, o, |d| d.tex.is_none().then_some(d.res)))
}
