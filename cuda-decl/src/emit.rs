//! The Rust a declaration list turns into: types (enums as transparent
//! newtypes, records, typedefs, `PFN_` types) and the typed driver table.

use crate::{Decls, Enum, Record};
use std::fmt::Write;

/// Rust for every type of the list, for a module that has `CUresult` in
/// scope (the crate's own status type) and `std::ffi::*`. Enums become
/// transparent newtypes with module-level constants; each entry point
/// gets a `PFN_name` function-pointer type.
pub fn rust_types(d: &Decls) -> String {
    let mut out = String::new();
    for e in d.enums.values().filter(|e| e.name != "cudaError_enum") {
        rust_enum(&mut out, e);
    }
    for o in &d.opaque {
        let _ = writeln!(out, "/// `{o}`, only ever behind a pointer.\n#[repr(C)]\npub struct {o} {{\n    _opaque: [u8; 0],\n}}");
    }
    for r in &d.records {
        rust_record(&mut out, r);
    }
    rust_typedefs(&mut out, d);
    for f in d.functions.values() {
        let _ = writeln!(
            out,
            "/// The type of `{}`.\npub type PFN_{} = unsafe extern \"C\" fn({}) -> {};",
            f.name,
            f.name,
            f.type_list(),
            f.ret
        );
    }
    out
}

/// An enum: a transparent newtype, its `Debug` by name, and its values.
fn rust_enum(out: &mut String, e: &Enum) {
    let n = &e.name;
    let _ = writeln!(
        out,
        "/// `{n}`: any value a peer sends is representable.\n#[repr(transparent)]\n#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]\npub struct {n}(pub {});",
        e.repr
    );
    let _ = writeln!(
        out,
        "impl std::fmt::Debug for {n} {{\n    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {{\n        match self.0 {{"
    );
    let mut seen = std::collections::BTreeSet::new();
    for (c, v) in &e.values {
        if seen.insert(*v) {
            let _ = writeln!(out, "            {v} => f.write_str(\"{c}\"),");
        }
    }
    let _ = writeln!(out, "            other => write!(f, \"{n}({{other}})\"),\n        }}\n    }}\n}}");
    for (c, v) in &e.values {
        let _ = writeln!(out, "/// `{c}`.\npub const {c}: {n} = {n}({v});");
    }
}

/// A struct or union, its layout asserted where gcc measured it.
fn rust_record(out: &mut String, r: &Record) {
    let kind = if r.union { "union" } else { "struct" };
    // cuda.h raises some alignments with attributes (CUtensorMap's
    // 64 bytes); gcc measured them, and `align` never lowers one.
    let repr = if r.align > 0 { format!("C, align({})", r.align) } else { "C".into() };
    let _ = writeln!(out, "/// `{}`.\n#[repr({repr})]\n#[derive(Clone, Copy)]\npub {kind} {} {{", r.name, r.name);
    for (n, t) in &r.fields {
        let _ = writeln!(out, "    /// `{n}`.\n    pub {n}: {t},");
    }
    let _ = writeln!(out, "}}");
    if r.size > 0 {
        let _ = writeln!(
            out,
            "const _: () = assert!(std::mem::size_of::<{0}>() == {1} && std::mem::align_of::<{0}>() == {2}, \"{0} differs from cuda.h\");",
            r.name, r.size, r.align
        );
    }
}

/// The typedefs. A typedef of an enum is a `use`, so that its name
/// constructs values as the enum's does (`CUlimit(4)`), which a type alias
/// cannot.
fn rust_typedefs(out: &mut String, d: &Decls) {
    // A typedef of an enum is a `use`, so that its name constructs values
    // as the enum's does (`CUlimit(4)`), which a type alias cannot.
    let enum_like: std::collections::BTreeSet<&str> =
        d.types.iter().fold(d.enums.keys().map(String::as_str).collect(), |mut set, (n, t)| {
            if set.contains(t.as_str()) {
                set.insert(n.as_str());
            }
            set
        });
    for (n, t) in &d.types {
        if n == "CUresult" {
            continue;
        }
        if enum_like.contains(t.as_str()) {
            let _ = writeln!(out, "/// `{n}`.\npub use {t} as {n};");
        } else {
            let _ = writeln!(out, "/// `{n}`.\npub type {n} = {t};");
        }
    }
}

/// Rust for `Driver`: every entry point of the list as an optional
/// function pointer of its `PFN_` type, and `Driver::load`, which looks
/// each up by name (a symbol the loaded driver lacks is `None`).
pub fn rust_driver(d: &Decls) -> String {
    let mut out = String::from(
        "/// Every entry point of the driver API, typed as cuda.h declares it;\n/// `None` where the loaded driver lacks it.\n#[derive(Clone, Copy)]\npub struct Driver {\n",
    );
    for f in d.functions.values() {
        let _ = writeln!(out, "    /// `{0}`.\n    pub {0}: Option<PFN_{0}>,", f.name);
    }
    out.push_str("}\n\nimpl Driver {\n    /// Looks every entry point up with `lookup` (a symbol's address, or\n    /// null).\n    ///\n    /// # Safety\n    /// `lookup` must return the address of the symbol of that name in a\n    /// CUDA driver (whose entry points have cuda.h's types), or null.\n    pub unsafe fn load(mut lookup: impl FnMut(&std::ffi::CStr) -> *const c_void) -> Driver {\n        Driver {\n");
    for f in d.functions.values() {
        let _ = writeln!(
            out,
            "            // SAFETY: a null or the driver's `{0}`, whose type is `PFN_{0}` (the caller's contract); Option<fn> has a pointer's layout, null being None.\n            {0}: unsafe {{ std::mem::transmute::<*const c_void, Option<PFN_{0}>>(lookup(c\"{0}\")) }},",
            f.name
        );
    }
    out.push_str("        }\n    }\n}\n");
    out
}
