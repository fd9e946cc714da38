//! # pvgpu-cuda-decl
//!
//! The CUDA driver API as pvgpu knows it: one declaration list,
//! [`cuda.decl`](../cuda.decl), generated from NVIDIA's headers by
//! `gen/gen_decl.py` (enums and their values, typedefs, structs and unions
//! with the size and alignment gcc gives them, every entry point's
//! prototype, and `cuGetProcAddress`'s version table), and the Rust made
//! from it. It has no dependencies: build scripts use it.
//!
//! - `pvgpu-ring`'s build script writes [`rust_types`] into
//!   `pvgpu_ring::cuda::api`: every enum as a transparent newtype with
//!   named constants (so any number a peer sends is a valid value and code
//!   reads by name), every typedef, struct and union, and a `PFN_` type per
//!   entry point;
//! - the drop-in libcuda's build script generates its exports from
//!   [`Decls::functions`]: stubs and forwarders with their real parameters,
//!   and a compile-time check that each hand-written export has the type
//!   cuda.h gives it;
//! - the backend's build script generates its typed table of the driver
//!   entry points it calls.

use std::collections::BTreeMap;
use std::fmt::Write;

/// The declaration list, as generated.
pub const CUDA_DECL: &str = include_str!("../cuda.decl");

/// A C enum.
#[derive(Debug, Clone)]
pub struct Enum {
    /// Its type name.
    pub name: String,
    /// `u32` or `i32`.
    pub repr: String,
    /// Its values, in the header's order.
    pub values: Vec<(String, i64)>,
}

/// A struct or union.
#[derive(Debug, Clone)]
pub struct Record {
    /// Its name.
    pub name: String,
    /// Whether it is a union.
    pub union: bool,
    /// `name: type` of each field.
    pub fields: Vec<(String, String)>,
    /// Size and alignment as gcc lays it out (0: not measured).
    pub size: usize,
    /// See `size`.
    pub align: usize,
}

/// An entry point.
#[derive(Debug, Clone)]
pub struct Function {
    /// Its symbol.
    pub name: String,
    /// `name: type` of each parameter.
    pub params: Vec<(String, String)>,
    /// Its return type.
    pub ret: String,
}

impl Function {
    /// `name: type, ...` as Rust writes a parameter list.
    pub fn param_list(&self) -> String {
        self.params.iter().map(|(n, t)| format!("{n}: {t}")).collect::<Vec<_>>().join(", ")
    }

    /// The parameters' names, comma-separated.
    pub fn arg_list(&self) -> String {
        self.params.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>().join(", ")
    }

    /// The parameters' types, comma-separated.
    pub fn type_list(&self) -> String {
        self.params.iter().map(|(_, t)| t.as_str()).collect::<Vec<_>>().join(", ")
    }
}

/// One row of `cuGetProcAddress`'s table.
#[derive(Debug, Clone)]
pub struct Proc {
    /// The name asked for.
    pub base: String,
    /// The CUDA version that introduced this form.
    pub version: u32,
    /// `-`, `ptds` or `ptsz`.
    pub variant: String,
    /// The exported symbol that answers.
    pub symbol: String,
}

/// The parsed declaration list.
#[derive(Debug, Clone, Default)]
pub struct Decls {
    /// Enums by name.
    pub enums: BTreeMap<String, Enum>,
    /// Typedefs: name and Rust type, in the header's order.
    pub types: Vec<(String, String)>,
    /// Structs only ever behind a pointer.
    pub opaque: Vec<String>,
    /// Structs and unions, in the header's order.
    pub records: Vec<Record>,
    /// Entry points by name.
    pub functions: BTreeMap<String, Function>,
    /// `cuGetProcAddress`'s table.
    pub procs: Vec<Proc>,
}

fn fields(text: &str) -> Vec<(String, String)> {
    text.split(" ;; ")
        .filter(|f| !f.is_empty())
        .map(|f| {
            let (n, t) = f.split_once(": ").unwrap_or((f, ""));
            (n.to_string(), t.to_string())
        })
        .collect()
}

impl Decls {
    /// Parses a declaration list; `None` names the first line it cannot read.
    pub fn parse(text: &str) -> Result<Decls, String> {
        let mut d = Decls::default();
        for line in text.lines().filter(|l| !l.starts_with('#') && !l.is_empty()) {
            let f: Vec<&str> = line.split('\t').collect();
            match f.as_slice() {
                ["enum", name, repr] => {
                    d.enums.insert(name.to_string(), Enum { name: name.to_string(), repr: repr.to_string(), values: Vec::new() });
                }
                ["const", e, name, v] => {
                    let v: i64 = v.parse().map_err(|_| line.to_string())?;
                    d.enums.get_mut(*e).ok_or_else(|| line.to_string())?.values.push((name.to_string(), v));
                }
                ["type", name, ty] => d.types.push((name.to_string(), ty.to_string())),
                ["opaque", name] => d.opaque.push(name.to_string()),
                [kind @ ("struct" | "union"), name, body, size, align] => d.records.push(Record {
                    name: name.to_string(),
                    union: *kind == "union",
                    fields: fields(body),
                    size: size.parse().map_err(|_| line.to_string())?,
                    align: align.parse().map_err(|_| line.to_string())?,
                }),
                ["fn", name, params, ret] => {
                    d.functions.insert(name.to_string(), Function { name: name.to_string(), params: fields(params), ret: ret.to_string() });
                }
                ["proc", base, version, variant, symbol] => d.procs.push(Proc {
                    base: base.to_string(),
                    version: version.parse().map_err(|_| line.to_string())?,
                    variant: variant.to_string(),
                    symbol: symbol.to_string(),
                }),
                _ => return Err(line.to_string()),
            }
        }
        Ok(d)
    }

    /// The list this crate carries.
    pub fn cuda() -> Decls {
        match Decls::parse(CUDA_DECL) {
            Ok(d) => d,
            Err(line) => panic!("cuda.decl: cannot read line {line:?}"),
        }
    }
}

/// Rust for every type of the list, for a module that has `CUresult` in
/// scope (the crate's own status type) and `std::ffi::*`. Enums become
/// transparent newtypes with module-level constants; each entry point
/// gets a `PFN_name` function-pointer type.
pub fn rust_types(d: &Decls) -> String {
    let mut out = String::new();
    for e in d.enums.values().filter(|e| e.name != "cudaError_enum") {
        let n = &e.name;
        let _ = writeln!(
            out,
            "/// `{n}`: any value a peer sends is representable.\n#[repr(transparent)]\n#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]\npub struct {n}(pub {});",
            e.repr
        );
        let _ = writeln!(out, "impl std::fmt::Debug for {n} {{\n    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {{\n        match self.0 {{");
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
    for o in &d.opaque {
        let _ = writeln!(out, "/// `{o}`, only ever behind a pointer.\n#[repr(C)]\npub struct {o} {{\n    _opaque: [u8; 0],\n}}");
    }
    for r in &d.records {
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
    // A typedef of an enum is a `use`, so that its name constructs values
    // as the enum's does (`CUlimit(4)`), which a type alias cannot.
    let enum_like: std::collections::BTreeSet<&str> = d
        .types
        .iter()
        .fold(d.enums.keys().map(String::as_str).collect(), |mut set, (n, t)| {
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
    for f in d.functions.values() {
        let _ = writeln!(out, "/// The type of `{}`.\npub type PFN_{} = unsafe extern \"C\" fn({}) -> {};", f.name, f.name, f.type_list(), f.ret);
    }
    out
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_list_parses_and_holds_the_driver_api() {
        let d = Decls::cuda();
        let alloc = &d.functions["cuMemAlloc_v2"];
        assert_eq!(alloc.param_list(), "dptr: *mut CUdeviceptr, bytesize: usize");
        assert_eq!(alloc.ret, "CUresult");
        assert!(d.functions.len() > 600);
        let attr = &d.enums["CUdevice_attribute_enum"];
        assert!(attr.values.iter().any(|(n, v)| n == "CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK" && *v == 1));
        assert!(d.procs.iter().any(|p| p.base == "cuMemAlloc" && p.symbol == "cuMemAlloc_v2"));
        let uuid = d.records.iter().find(|r| r.name == "CUuuid_st").expect("CUuuid_st");
        assert_eq!((uuid.size, uuid.align), (16, 1));
    }
}
