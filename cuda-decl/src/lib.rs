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

mod emit;

pub use emit::{rust_driver, rust_types};

use std::collections::BTreeMap;

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
