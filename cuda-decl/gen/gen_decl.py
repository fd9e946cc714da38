#!/usr/bin/env python3
"""Generates cuda.decl, pvgpu's one declaration list of the CUDA driver API,
from NVIDIA's headers (cuda.h, cudaTypedefs.h, cudaProfilerTypedefs.h), for
example from the nvidia-cuda-runtime wheel on PyPI:

    pip download --no-deps nvidia-cuda-runtime==13.0.96 && unzip -q nvidia_cuda_runtime-*.whl
    pip install pycparser==3.12
    python3 gen/gen_decl.py nvidia/cu13/include > cuda.decl

cuda.h is preprocessed twice with gcc (as programs see it, and as the
driver is built, -D__CUDA_API_VERSION_INTERNAL, which adds the legacy
unversioned names and the per-thread-default-stream forms), against a few
fake libc headers, and parsed with pycparser; the profiler's three entry
points come from their PFN typedefs. gcc also measures every named struct
and union, so the Rust side can assert the same layout. Output: one item
per line, fields separated by tabs, types already in Rust syntax (see
src/lib.rs):

    enum   NAME   REPR                    a C enum, as a transparent newtype
    const  ENUM   NAME   VALUE            one of its values
    type   NAME   RUST-TYPE               a typedef
    opaque NAME                           a struct only ever behind a pointer
    struct NAME   FIELD: TYPE ;; ...   SIZE ALIGN   a struct's fields, in order
    union  NAME   FIELD: TYPE ;; ...   SIZE ALIGN   (0 0: not nameable in C)
    fn     NAME   PARAM: TYPE ;; ...   RET  a driver entry point
    proc   BASE   VERSION VARIANT SYMBOL   what cuGetProcAddress(BASE,
           VERSION) answers (VARIANT: - | ptds | ptsz): the symbol of the
           highest VERSION <= the one asked, from cudaTypedefs.h's PFN names

Nothing here is edited by hand: change the generator and run it again.
"""
import os
import re
import subprocess
import sys
import tempfile

import pycparser
from pycparser import c_ast

PRIMS = {
    "void": "c_void", "char": "c_char", "signed char": "i8", "unsigned char": "u8",
    "short": "i16", "short int": "i16", "unsigned short": "u16", "unsigned short int": "u16",
    "int": "c_int", "signed int": "c_int", "signed": "c_int", "unsigned int": "c_uint", "unsigned": "c_uint",
    "long": "c_long", "long int": "c_long", "unsigned long": "c_ulong", "unsigned long int": "c_ulong",
    "long long": "i64", "long long int": "i64", "unsigned long long": "u64", "unsigned long long int": "u64",
    "float": "f32", "double": "f64",
    "size_t": "usize", "uint8_t": "u8", "uint16_t": "u16", "uint32_t": "u32", "uint64_t": "u64",
    "int8_t": "i8", "int16_t": "i16", "int32_t": "i32", "int64_t": "i64", "uintptr_t": "usize", "intptr_t": "isize",
}
FAKE = {
    "cudaProfiler.h": "#include <cuda.h>\ntypedef enum CUoutput_mode_enum { CU_OUT_KEY_VALUE_PAIR = 0, CU_OUT_CSV = 1 } CUoutput_mode;\n",
    "stdlib.h": "typedef unsigned long size_t;\n",
    "stddef.h": "typedef unsigned long size_t;\n",
    "stdint.h": "".join(f"typedef {c} {n};\n" for n, c in [
        ("uint8_t", "unsigned char"), ("uint16_t", "unsigned short"), ("uint32_t", "unsigned int"),
        ("uint64_t", "unsigned long long"), ("int8_t", "signed char"), ("int16_t", "short"), ("int32_t", "int"),
        ("int64_t", "long long"), ("uintptr_t", "unsigned long"), ("intptr_t", "long")]),
}
RUST_KEYWORDS = {"type", "ref", "in", "fn", "impl", "mod", "move", "match", "loop", "self", "Self", "struct",
                 "use", "where", "box", "priv", "final", "override", "macro", "yield", "async", "await", "dyn", "abstract",
                 "become", "do", "typeof", "unsized", "virtual", "try", "gen", "crate", "super", "extern", "let", "mut",
                 "pub", "static", "trait", "unsafe", "const", "enum", "false", "true", "as", "break", "continue", "else",
                 "for", "if", "return", "while"}


def fake_includes(d):
    for name, text in FAKE.items():
        open(os.path.join(d, name), "w").write(text)


def preprocess(inc, header, internal):
    with tempfile.TemporaryDirectory() as d:
        fake_includes(d)
        args = ["gcc", "-E", "-P", "-nostdinc", "-D__attribute__(x)=", "-I", d, "-I", inc, "-x", "c", os.path.join(inc, header)]
        if internal:
            args.insert(1, "-D__CUDA_API_VERSION_INTERNAL")
        return subprocess.run(args, check=True, capture_output=True, text=True).stdout


def field_name(n):
    return n + "_" if n in RUST_KEYWORDS else n


class Gen:
    def __init__(self):
        self.items = {}       # name -> line (types), kept in first-seen order
        self.consts = []
        self.fns = {}
        self.enum_values = {}
        self.defined_structs = set()
        self.tagged = set()
        self.enums_done = set()  # records C can name (struct TAG)
        self.anon = 0

    def add(self, name, line):
        self.items.setdefault(name, line)

    def eval(self, e):
        if isinstance(e, c_ast.Constant):
            v = e.value.rstrip("uUlL")
            return int(v, 0) if not v.startswith("'") else ord(v[1])
        if isinstance(e, c_ast.ID):
            return self.enum_values[e.name]
        if isinstance(e, c_ast.UnaryOp) and e.op == "sizeof":
            return self.sizeof(e.expr)
        if isinstance(e, c_ast.UnaryOp):
            v = self.eval(e.expr)
            return {"-": -v, "~": ~v, "+": v}[e.op]
        if isinstance(e, c_ast.BinaryOp):
            a, b = self.eval(e.left), self.eval(e.right)
            return {"<<": a << b, ">>": a >> b, "|": a | b, "&": a & b, "+": a + b, "-": a - b, "*": a * b}[e.op]
        if isinstance(e, c_ast.Cast):
            return self.eval(e.expr)
        raise ValueError(f"cannot evaluate {e}")

    SIZES = {"c_char": 1, "i8": 1, "u8": 1, "i16": 2, "u16": 2, "c_int": 4, "c_uint": 4, "i32": 4, "u32": 4,
             "f32": 4, "i64": 8, "u64": 8, "f64": 8, "usize": 8, "isize": 8, "c_long": 8, "c_ulong": 8}

    def sizeof(self, typename):
        """sizeof of a scalar or enum type name (what cuda.h's array sizes use)."""
        if isinstance(typename.type, c_ast.PtrDecl):
            return 8
        names = typename.type.type.names
        rust = self.resolve(PRIMS.get(" ".join(names), " ".join(names)))
        if rust in self.SIZES:
            return self.SIZES[rust]
        raise ValueError(f"sizeof {names}")

    def resolve(self, name):
        """A typedef name down to a primitive, or an enum's repr."""
        line = self.items.get(name, "")
        kind = line.split("\t")
        if kind[0] == "type":
            return self.resolve(kind[2])
        if kind[0] == "enum":
            return kind[2]
        return name

    def enum(self, name, e):
        values, v = [], -1
        for en in (e.values.enumerators if e.values else []):
            v = self.eval(en.value) if en.value is not None else v + 1
            self.enum_values[en.name] = v
            values.append((en.name, v))
        repr_ = "i32" if any(x < 0 for _, x in values) else "u32"
        self.add(name, f"enum\t{name}\t{repr_}")
        if name in self.enums_done:
            return
        self.enums_done.add(name)
        for n, x in values:
            self.consts.append(f"const\t{name}\t{n}\t{x if repr_ == 'i32' else x & 0xffffffff}")

    def ty(self, t, ctx):
        """Rust type of a type node."""
        if isinstance(t, (c_ast.Struct, c_ast.Union)):  # an anonymous member
            return self.record(t, ctx)
        if isinstance(t, c_ast.TypeDecl):
            inner = t.type
            if isinstance(inner, c_ast.IdentifierType):
                n = " ".join(inner.names)
                return PRIMS.get(n, n)
            if isinstance(inner, c_ast.Struct) or isinstance(inner, c_ast.Union):
                return self.record(inner, ctx)
            if isinstance(inner, c_ast.Enum):
                name = inner.name or f"{ctx}_enum"
                if inner.values is not None:
                    self.enum(name, inner)
                return name
        if isinstance(t, c_ast.PtrDecl):
            if isinstance(t.type, c_ast.FuncDecl):
                return self.fnptr(t.type, ctx)
            const = isinstance(t.type, c_ast.TypeDecl) and "const" in t.type.quals
            if isinstance(t.type, c_ast.PtrDecl) and "const" in (t.type.quals or []):
                const = True
            return ("*const " if const else "*mut ") + self.ty(t.type, ctx)
        if isinstance(t, c_ast.ArrayDecl):
            return f"[{self.ty(t.type, ctx)}; {self.eval(t.dim)}]"
        raise ValueError(f"unhandled type {t} in {ctx}")

    def fnptr(self, f, ctx):
        params = self.params(f, ctx)
        ret = self.ty(f.type, ctx)
        arrow = "" if ret == "c_void" else f" -> {ret}"
        return f"Option<unsafe extern \"C\" fn({', '.join(t for _, t in params)}){arrow}>"

    def params(self, f, ctx):
        out = []
        for i, p in enumerate(f.args.params if f.args else []):
            if isinstance(p, c_ast.Typename) and isinstance(p.type, c_ast.TypeDecl) and getattr(p.type.type, "names", None) == ["void"]:
                continue
            name = field_name(p.name) if getattr(p, "name", None) else f"arg{i}"
            t = p.type
            if isinstance(t, c_ast.ArrayDecl):  # array parameters are pointers
                t = c_ast.PtrDecl([], t.type)
            out.append((name, self.ty(t, f"{ctx}_{name}")))
        return out

    def record(self, s, ctx):
        kind = "union" if isinstance(s, c_ast.Union) else "struct"
        name = s.name or f"{ctx}"
        if s.decls is None:
            if name not in self.defined_structs:
                self.add(name, f"opaque\t{name}")
            return name
        fields = []
        for d in s.decls:
            if d.bitsize is not None:
                raise ValueError(f"bit field in {name}")
            fname = field_name(d.name) if d.name else f"anon{len(fields)}"
            fields.append(f"{fname}: {self.ty(d.type, f'{name}_{fname}')}")
        self.defined_structs.add(name)
        if s.name:
            self.tagged.add(name)
        self.items[name] = f"{kind}\t{name}\t" + " ;; ".join(fields)
        return name

    def typedef(self, td):
        t = td.type
        if isinstance(t, c_ast.TypeDecl) and isinstance(t.type, (c_ast.Struct, c_ast.Union, c_ast.Enum)):
            inner = t.type
            if isinstance(inner, c_ast.Enum):
                name = inner.name or td.name
                if inner.values is not None:
                    self.enum(name, inner)
                if name != td.name:
                    self.add(td.name, f"type\t{td.name}\t{name}")
                return
            name = self.record(inner, td.name)
            if name != td.name:
                self.add(td.name, f"type\t{td.name}\t{name}")
            return
        if isinstance(t, c_ast.PtrDecl) and isinstance(t.type, c_ast.TypeDecl) and isinstance(t.type.type, c_ast.Struct) \
                and t.type.type.decls is None:
            # A handle: a pointer to a struct the header never defines.
            self.add(td.name, f"type\t{td.name}\t*mut c_void")
            return
        if td.name in PRIMS:
            return
        self.add(td.name, f"type\t{td.name}\t{self.ty(t, td.name)}")

    def function(self, d):
        f = d.type
        if not d.name.startswith("cu"):
            return
        params = self.params(f, d.name)
        ret = self.ty(f.type, d.name)
        self.fns[d.name] = f"fn\t{d.name}\t" + " ;; ".join(f"{n}: {t}" for n, t in params) + f"\t{ret}"

    def pfn(self, td):
        """A PFN_cuXxx_vN typedef: the prototype of cuXxx, where cuda.h has none."""
        m = re.match(r"PFN_(cu[A-Za-z0-9_]+?)_v\d+$", td.name)
        if not m or m.group(1) in self.fns or not isinstance(td.type, c_ast.PtrDecl):
            return
        f = td.type.type
        params = self.params(f, m.group(1))
        self.fns[m.group(1)] = f"fn\t{m.group(1)}\t" + " ;; ".join(f"{n}: {t}" for n, t in params) + f"\t{self.ty(f.type, td.name)}"

    def run(self, text):
        ast = pycparser.CParser().parse(text, "cuda.h")
        for e in ast.ext:
            if isinstance(e, c_ast.Typedef) and e.name.startswith("PFN_"):
                self.pfn(e)
            elif isinstance(e, c_ast.Typedef):
                self.typedef(e)
            elif isinstance(e, c_ast.Decl) and isinstance(e.type, c_ast.FuncDecl):
                self.function(e)
            elif isinstance(e, c_ast.Decl) and isinstance(e.type, (c_ast.Struct, c_ast.Union, c_ast.Enum)):
                if isinstance(e.type, c_ast.Enum):
                    if e.type.values is not None and e.type.name:
                        self.enum(e.type.name, e.type)
                else:
                    self.record(e.type, e.type.name)


def measure(inc, names):
    """sizeof and alignof of each named struct or union, as gcc lays it out."""
    src = "#include <stdio.h>\n#include <stddef.h>\n#include <cuda.h>\nint main(void) {\n"
    for kind, n in names:
        src += f'printf("%s %zu %zu\\n", "{n}", sizeof({kind} {n}), _Alignof({kind} {n}));\n'
    src += "return 0; }\n"
    with tempfile.TemporaryDirectory() as d:
        open(os.path.join(d, "m.c"), "w").write(src)
        subprocess.run(["gcc", "-D__CUDA_API_VERSION_INTERNAL", "-I", inc, "-o", os.path.join(d, "m"), os.path.join(d, "m.c")], check=True)
        out = subprocess.run([os.path.join(d, "m")], check=True, capture_output=True, text=True).stdout
    return {n: (int(a), int(b)) for n, a, b in (l.split() for l in out.splitlines())}


def procs(inc, exports):
    """cuGetProcAddress's table: PFN_BASE_vVERSION[_VARIANT] typedefs paired,
    in order, with the exported symbols BASE, BASE_v2, ... of that variant."""
    pfns = {}
    for header in ("cudaTypedefs.h", "cudaProfilerTypedefs.h"):
        text = open(os.path.join(inc, header)).read()
        for base, ver, var in re.findall(r"typedef \w+ \(CUDAAPI \*PFN_(cu[A-Za-z0-9_]+?)_v(\d+)(_ptds|_ptsz)?\)", text):
            pfns.setdefault((base, var.lstrip("_") or "-"), set()).add(int(ver))
    lines = []
    for (base, variant), versions in sorted(pfns.items()):
        suffix = "" if variant == "-" else "_" + variant
        syms = [base + n + suffix for n in ["", "_v2", "_v3", "_v4", "_v5"] if base + n + suffix in exports]
        vers = sorted(versions)
        if not syms:
            continue
        # More versions than symbols: the oldest versions share the first symbol.
        while len(syms) < len(vers):
            syms.insert(0, syms[0])
        syms = syms[len(syms) - len(vers):]
        lines += [f"proc\t{base}\t{v}\t{variant}\t{s}" for v, s in zip(vers, syms)]
    return lines


def main():
    inc = sys.argv[1]
    g = Gen()
    g.run(preprocess(inc, "cuda.h", False))
    g.run(preprocess(inc, "cuda.h", True))
    with tempfile.TemporaryDirectory() as d:
        fake_includes(d)
        text = subprocess.run(["gcc", "-E", "-P", "-nostdinc", "-D__attribute__(x)=", "-I", d, "-I", inc, "-x", "c",
                               os.path.join(inc, "cudaProfilerTypedefs.h")], check=True, capture_output=True, text=True).stdout
    g.run(text)
    named = [(l.split("\t")[0], l.split("\t")[1]) for l in g.items.values() if l.split("\t")[0] in ("struct", "union")]
    sizes = measure(inc, [(k, n) for k, n in named if n in g.tagged])
    print("# generated by cuda-decl/gen/gen_decl.py from NVIDIA's CUDA 13.0 headers; do not edit")
    for line in g.items.values():
        kind, name = line.split("\t")[:2]
        if kind in ("struct", "union"):
            size, align = sizes.get(name, (0, 0))
            line += f"\t{size}\t{align}"
        print(line)
    for line in g.consts:
        print(line)
    for name in sorted(g.fns):
        print(g.fns[name])
    for line in procs(inc, set(g.fns)):
        print(line)


main()
