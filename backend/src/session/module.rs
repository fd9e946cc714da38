//! Modules: images copied out of shared memory and checked before the
//! driver parses them, kernels with their parameter layouts, and module
//! globals (which copies may then touch).

use super::{Alloc, AllocKind, FnEntry, Io, ModEntry, Session};
use crate::exec::{CuRes, ExecContext, Executor, Param};
use pvgpu_ring::CuError;
use pvgpu_ring::proto::{self, FunctionHead, FunctionRep, GlobalRep, HandleRep, NamesRep, ParamInfo};

pub(super) fn module_load<E: Executor>(s: &mut Session<E>, r: proto::ModuleLoad<'_>, io: &mut Io<'_>) -> CuRes<HandleRep> {
    let ctx = r.head.ctx.get();
    s.enter(ctx)?;
    let (p, len) = Session::<E>::source(&r.head.image, r.image, io.area)?;
    if len == 0 || len > s.limits.max_image {
        return Err(CuError::INVALID_IMAGE);
    }
    // Copy out of shared memory before anything parses it, and terminate it
    // so PTX text can never be read past its end.
    let mut image = Vec::with_capacity(len + 1);
    // SAFETY: `source` checked that [p, p+len) is inside the request payload
    // or the data area, both mapped for the duration of this call.
    unsafe { image.extend_from_slice(std::slice::from_raw_parts(p, len)) };
    image.push(0);
    crate::exec::image::check_bounds(&image[..len])?;
    let id = load_image(s, ctx, &image)?;
    if let Some((cache, owner)) = &s.images {
        cache.put(owner, &image[..len]);
    }
    Ok(HandleRep { handle: id.into() })
}

/// Loads `image` (checked, NUL-terminated) in context `ctx`.
/// Its code and globals count against the quota: a module that does not
/// fit is unloaded again (`CUDA_ERROR_OUT_OF_MEMORY`).
pub(super) fn load_image<E: Executor>(s: &mut Session<E>, ctx: u64, image: &[u8]) -> CuRes<u64> {
    let m = s.enter(ctx)?.module_load(image)?;
    if !s.remeasure() {
        s.enter(ctx)?.module_unload(m)?;
        s.remeasure();
        return Err(CuError::OUT_OF_MEMORY);
    }
    let seq = s.next_made();
    // Where sessions may leave this backend, what a checkpoint will need
    // of the image is read now, off the pause of a migration.
    let writable = s
        .exec
        .restores_addresses()
        .then(|| crate::exec::image::writable_globals(&image[..image.len().saturating_sub(1)]).unwrap_or_default().into());
    s.modules.insert(ModEntry { ctx, module: Some(m), image: image.into(), globals: Vec::new(), writable, seq })
}

/// A module from the image cache: only an image this guest sent before,
/// checked against its hash as it is read back. An image is cached only
/// after it passed `check_bounds` and loaded, so the same bytes are not
/// checked again.
pub(super) fn module_load_cached<E: Executor>(s: &mut Session<E>, r: proto::ModuleLoadCached, _: &mut Io<'_>) -> CuRes<HandleRep> {
    let (ctx, len) = (r.ctx.get(), r.len.get());
    s.enter(ctx)?;
    if len == 0 || len > s.limits.max_image as u64 {
        return Err(CuError::INVALID_IMAGE);
    }
    let (cache, owner) = s.images.as_ref().ok_or(CuError::NOT_FOUND)?;
    let mut image = cache.get(owner, &r.sha256, len).ok_or(CuError::NOT_FOUND)?;
    image.push(0);
    let id = load_image(s, ctx, &image)?;
    Ok(HandleRep { handle: id.into() })
}

pub(super) fn module_unload<E: Executor>(s: &mut Session<E>, r: proto::ModuleUnload, _: &mut Io<'_>) -> CuRes<()> {
    let id = r.module.get();
    let mut m = s.modules.remove(id).ok_or(CuError::INVALID_HANDLE)?;
    s.functions.drain_where(|f| f.module == id);
    s.function_ids.retain(|(mid, _), _| *mid != id);
    s.allocs.retain(|_, a| a.kind != AllocKind::Global(id));
    let r = match m.module.take() {
        Some(module) => s.enter(m.ctx)?.module_unload(module),
        None => Ok(()),
    };
    s.remeasure();
    r
}

pub(super) fn module_get_function<E: Executor>(s: &mut Session<E>, r: proto::ModuleGetFunction<'_>, _: &mut Io<'_>) -> CuRes<FunctionRep> {
    let (module, name) = (r.module(), r.name);
    if let Some(&fid) = s.function_ids.get(&(module, name.to_string())) {
        let f = s.functions.get(fid).ok_or(CuError::INVALID_HANDLE)?;
        return Ok(function_rep(fid, &f.layout, f.param_bytes));
    }
    let ctx = s.modules.get(module).ok_or(CuError::INVALID_HANDLE)?.ctx;
    s.enter(ctx)?;
    let m = s.modules.get(module).and_then(|e| e.module.as_ref()).ok_or(CuError::INVALID_HANDLE)?;
    let c = s.ctxs.get_mut(ctx).ok_or(CuError::INVALID_CONTEXT)?;
    let (func, layout) = c.ctx.function(m, name)?;
    if layout.len() > proto::MAX_PARAMS {
        return Err(CuError::NOT_SUPPORTED);
    }
    let param_bytes = layout.iter().map(|p| p.offset as usize + p.size as usize).max().unwrap_or(0);
    if param_bytes > proto::MAX_PARAM_BYTES {
        return Err(CuError::NOT_SUPPORTED);
    }
    let fid =
        s.functions.insert(FnEntry { ctx, module, func, layout: layout.clone().into(), param_bytes, attributes: Default::default() })?;
    s.function_ids.insert((module, name.to_string()), fid);
    Ok(function_rep(fid, &layout, param_bytes))
}

pub(super) fn module_function_names<E: Executor>(s: &mut Session<E>, r: proto::ModuleFunctionNames, _: &mut Io<'_>) -> CuRes<NamesRep> {
    let module = r.module.get();
    let ctx = s.modules.get(module).ok_or(CuError::INVALID_HANDLE)?.ctx;
    s.enter(ctx)?;
    let m = s.modules.get(module).and_then(|e| e.module.as_ref()).ok_or(CuError::INVALID_HANDLE)?;
    let c = s.ctxs.get_mut(ctx).ok_or(CuError::INVALID_CONTEXT)?;
    let all = c.ctx.function_names(m)?;
    if all.len() > proto::MAX_NAMES || all.iter().any(|n| proto::check_name(n.as_bytes()).is_err()) {
        return Err(CuError::NOT_SUPPORTED);
    }
    let (first, max_bytes) = (r.first.get() as usize, r.max_bytes.get() as usize);
    if max_bytes <= proto::MAX_NAME_LEN || first > all.len() {
        return Err(CuError::INVALID_VALUE);
    }
    let mut room = max_bytes;
    let names: Vec<String> = all[first..]
        .iter()
        .take_while(|n| {
            let fits = n.len() < room;
            room = room.saturating_sub(n.len() + 1);
            fits
        })
        .cloned()
        .collect();
    Ok(NamesRep { names, total: all.len() as u32 })
}

pub(super) fn module_get_global<E: Executor>(s: &mut Session<E>, r: proto::ModuleGetGlobal<'_>, _: &mut Io<'_>) -> CuRes<GlobalRep> {
    let module = r.module();
    let ctx = s.modules.get(module).ok_or(CuError::INVALID_HANDLE)?.ctx;
    s.enter(ctx)?;
    let m = s.modules.get(module).and_then(|e| e.module.as_ref()).ok_or(CuError::INVALID_HANDLE)?;
    let c = s.ctxs.get_mut(ctx).ok_or(CuError::INVALID_CONTEXT)?;
    let (dptr, size) = c.ctx.global(m, r.name)?;
    let managed = size > 0 && c.ctx.is_managed(dptr);
    if size > 0 && !s.allocs.contains_key(&dptr) {
        if s.allocs.len() >= s.limits.max_objects {
            return Err(CuError::OUT_OF_MEMORY);
        }
        s.allocs.insert(dptr, Alloc { len: size, ctx, kind: AllocKind::Global(module) });
    }
    if let Some(m) = s.modules.get_mut(module)
        && !m.globals.iter().any(|(n, ..)| n == r.name)
    {
        m.globals.push((r.name.to_string(), dptr, size));
    }
    let flags = if managed { proto::GLOBAL_MANAGED } else { 0 };
    Ok(GlobalRep { dptr: dptr.into(), size: size.into(), flags: flags.into(), reserved: 0.into() })
}

fn function_rep(fid: u64, layout: &[Param], param_bytes: usize) -> FunctionRep {
    FunctionRep {
        head: FunctionHead { function: fid.into(), param_count: (layout.len() as u32).into(), param_bytes: (param_bytes as u32).into() },
        params: layout.iter().map(|p| ParamInfo { offset: p.offset.into(), size: p.size.into() }).collect(),
    }
}
