//! Module globals the program never looked up, in snapshots: a kernel may
//! keep state in a `__device__` variable the host never names (a counter,
//! a table it fills), and a restore that loaded the module afresh would
//! hand the program its initial bytes instead.
//!
//! A checkpoint takes the variables in global memory each module image
//! declares (its symbol table's `.nv.global` sections, or its PTX's
//! `.global` declarations; not constants, which only the host can change,
//! through a lookup), and looks up, at the driver, those the program did
//! not; their bytes go in the snapshot. Where sessions may leave the
//! backend (`--device-memory placed`), the image is read when the module
//! is loaded, so that a migration's pause does not; elsewhere, at the
//! checkpoint. A restore writes them back once every module is loaded, so
//! the lookups happen after the loads in both processes, in the same
//! order; a global the driver placed elsewhere fails the restore by name.

use super::Session;
use super::restore::RestoreError;
use crate::exec::{ExecContext, Executor};
use pvgpu_ctl::snapshot::Global;
use std::collections::HashMap;

/// Globals not looked up, by module id: name, address, size.
pub(super) type Unlooked = HashMap<u64, Vec<(String, u64, u64)>>;

/// Looks up, for every module of the session, the globals its image
/// declares that the program did not look up; those the driver does not
/// know (symbols that are not variables of the program) are left out.
pub(super) fn look_up<E: Executor>(s: &mut Session<E>) -> Unlooked {
    let mut out = Unlooked::new();
    let ids: Vec<u64> = s.modules.iter().map(|(id, _)| id).collect();
    for id in ids {
        let Some(m) = s.modules.get(id) else { continue };
        let ctx = m.ctx;
        let all: Vec<String> = match &m.writable {
            Some(names) => names.to_vec(),
            None => match crate::exec::image::writable_globals(&m.image[..m.image.len().saturating_sub(1)]) {
                Ok(names) => names,
                Err(_) => continue,
            },
        };
        let mut names: Vec<String> = all.into_iter().filter(|n| !m.globals.iter().any(|(looked, _, _)| looked == n)).collect();
        names.sort();
        if names.is_empty() || s.enter(ctx).is_err() {
            continue;
        }
        let (Some(m), Some(c)) = (s.modules.get(id).and_then(|e| e.module.as_ref()), s.ctxs.get_mut(ctx)) else { continue };
        let found: Vec<(String, u64, u64)> = names
            .into_iter()
            .filter_map(|n| c.ctx.global(m, &n).ok().filter(|&(_, len)| len > 0).map(|(addr, len)| (n, addr, len)))
            .collect();
        if !found.is_empty() {
            out.insert(id, found);
        }
    }
    out
}

impl<E: Executor> Session<E> {
    /// Writes back the bytes of globals the program never looked up, every
    /// module loaded.
    pub(super) fn restore_unlooked(
        &mut self,
        modules: &[pvgpu_ctl::snapshot::Module],
        mut take: impl FnMut(u32) -> Result<Vec<u8>, RestoreError>,
    ) -> Result<(), RestoreError> {
        for m in modules {
            for g in &m.unlooked {
                let bytes = take(g.blob)?;
                self.put_global(m.id, m.ctx, g, &bytes)?;
            }
        }
        Ok(())
    }

    /// Writes `bytes` into global `g` of module `module` (of context
    /// `ctx`), once the driver says it is where the snapshot says, of its
    /// size, and `bytes` are as many.
    pub(super) fn put_global(&mut self, module: u64, ctx: u64, g: &Global, bytes: &[u8]) -> Result<(), RestoreError> {
        let loaded = self.modules.get(module).and_then(|e| e.module.as_ref());
        let found = match (loaded, self.ctxs.get_mut(ctx)) {
            (Some(loaded), Some(c)) => c.ctx.global(loaded, &g.name),
            _ => return Err(RestoreError::Inconsistent(format!("module {module:#x} gone, or in no context"))),
        };
        let (addr, len) = found.map_err(|error| RestoreError::Rebuild { what: format!("global {}", g.name), error })?;
        if addr != g.address || len != g.length {
            return Err(RestoreError::Moved { name: g.name.clone(), from: g.address, to: addr });
        }
        if bytes.len() as u64 != len {
            return Err(RestoreError::Inconsistent(format!("global {}: {} bytes for {len}", g.name, bytes.len())));
        }
        self.write_device(ctx, addr, bytes, &g.name)
    }
}

#[cfg(test)]
mod tests {
    use super::super::module;
    use super::super::snapshot_fixture::{restore, session, snapshot};

    const PTX: &str = ".version 7.0\n.target sm_50\n.address_size 64\n\
        .visible .global .align 4 .u32 pvgpu_calls = 40;\n\
        .visible .entry pvgpu_count_calls(.param .u64 out)\n{\n\tret;\n}\n";

    #[test]
    fn a_global_never_looked_up_comes_back_with_its_bytes() {
        let (mut s, ctx) = session();
        let mut image = PTX.as_bytes().to_vec();
        image.push(0);
        let id = module::load_image(&mut s, ctx, &image).unwrap();
        let names = s.modules.get(id).and_then(|m| m.writable.clone());
        assert_eq!(names.as_deref(), Some(&["pvgpu_calls".to_string()][..]), "read at the load, where sessions may leave");
        let file = snapshot(&mut s, |meta| assert_eq!(meta.state.modules[0].unlooked.len(), 1));
        let back = restore(&file).unwrap();
        assert_eq!(back.modules.get(id).and_then(|m| m.writable.clone()), names, "a restored module's, from the snapshot");
        // Elsewhere the image is read at the checkpoint.
        if let Some(m) = s.modules.get_mut(id) {
            m.writable = None;
        }
        let file = snapshot(&mut s, |meta| assert_eq!(meta.state.modules[0].unlooked.len(), 1));
        restore(&file).unwrap();
    }
}
