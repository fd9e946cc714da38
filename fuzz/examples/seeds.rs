//! Writes the seed inputs of every fuzz target into `fuzz/corpus/<target>/`
//! (`seed-*` files; what the fuzzer found is kept beside them after
//! `cargo fuzz cmin`):
//!
//! ```sh
//! cargo run --manifest-path fuzz/Cargo.toml --example seeds
//! ```
//!
//! Seeds are valid inputs: an encoded request of every opcode (those with a
//! tail also with a real one), programs of honest ring traffic, successful
//! local handshakes (and the usual refusals), the replies of a whole
//! XenStore session, and the committed test kernels as PTX, cubin and fatbin
//! plus fatbins with LZ4 and Zstandard entries and two containers.

use pvgpu_ring::proto::*;
use pvgpu_xen::abi::XsType;
use pvgpu_xen::xenstore::Message;
use std::path::{Path, PathBuf};
use zerocopy::{FromZeros, IntoBytes};

fn corpus(target: &str) -> PathBuf {
    let d = Path::new(env!("CARGO_MANIFEST_DIR")).join("corpus").join(target);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn write(target: &str, name: &str, bytes: &[u8]) {
    std::fs::write(corpus(target).join(format!("seed-{name}")), bytes).unwrap();
}

/// Header and payload of a request.
fn message(op: Opcode, payload: &[u8]) -> Vec<u8> {
    let mut m = Header::request(op, 1, FLAG_REPLY, payload.len()).as_bytes().to_vec();
    m.extend_from_slice(payload);
    m
}

fn request_decoder() {
    // Every opcode with a zeroed fixed part (no tail): its size is what the
    // decoder expects of an empty payload.
    for &op in Opcode::ALL {
        let size = match Request::decode(&Header::request(op, 1, 0, 0), &[]) {
            Err(DecodeError::Length { expected, .. }) => expected,
            _ => 0,
        };
        write("request_decoder", &format!("{op:?}"), &message(op, &vec![0; size]));
    }
    let mut out = Vec::new();
    let mut with = |name: &str, req: Request<'_>| {
        out.clear();
        req.encode(&mut out);
        write("request_decoder", name, &message(req.opcode(), &out));
    };
    let ptx = b".version 8.0\n.target sm_75\n.visible .entry k(.param .u64 a)\n{ ret; }\n";
    let mut head = ModuleLoadHead::new_zeroed();
    head.ctx = 1.into();
    head.image = DataRef::inline(ptx.len());
    with("ModuleLoad-inline", Request::ModuleLoad(ModuleLoad { head, image: ptx }));
    head.image = DataRef::area(4096, 100);
    with("ModuleLoad-area", Request::ModuleLoad(ModuleLoad { head, image: &[] }));
    with("ModuleGetFunction-name", Request::ModuleGetFunction(ModuleGetFunction::new(1, "mat_sum")));
    with("ModuleGetGlobal-name", Request::ModuleGetGlobal(ModuleGetGlobal::new(1, "pvgpu_scale")));
    let bytes = [7u8; 16];
    let mut h = HtoDHead::new_zeroed();
    h.dst = 0x1000.into();
    h.data = DataRef::inline(bytes.len());
    with("MemcpyHtoD-inline", Request::MemcpyHtoD(MemcpyHtoD { head: h, data: &bytes }));
    let params = [1u8; 28];
    let mut l = LaunchHead::new_zeroed();
    l.function = 1.into();
    l.grid = [1.into(), 1.into(), 1.into()];
    l.block = [32.into(), 1.into(), 1.into()];
    l.param_len = (params.len() as u32).into();
    with("LaunchKernel-params", Request::LaunchKernel(LaunchKernel { head: l, params: &params }));
    let mut attr = LaunchAttr::new_zeroed();
    attr.id = 8.into();
    attr.value[0] = 1;
    let mut tail = attr.as_bytes().to_vec();
    tail.extend_from_slice(&[2u8; 8]);
    let mut x = LaunchExHead::new_zeroed();
    x.function = 1.into();
    x.param_len = 8.into();
    x.attr_count = 1.into();
    with("LaunchKernelEx-attr", Request::LaunchKernelEx(LaunchKernelEx { head: x, tail: &tail }));
    let mut o = OccupancyClustersHead::new_zeroed();
    o.function = 1.into();
    o.attr_count = 1.into();
    with("OccupancyClusters-attr", Request::OccupancyClusters(OccupancyClusters { head: o, attrs: std::slice::from_ref(&attr) }));
    let mut c = Memcpy2DHead::new_zeroed();
    c.kind = COPY_2D_HTOD.into();
    c.width = 4.into();
    c.height = 2.into();
    c.dst_pitch = 8.into();
    c.src_pitch = 4.into();
    c.data = DataRef::inline(8);
    with("Memcpy2D-inline", Request::Memcpy2D(Memcpy2D { head: c, data: &[3u8; 8] }));
    let mut a = ArrayCopyHead::new_zeroed();
    a.dst.kind = SIDE_ARRAY.into();
    a.dst.addr = 1.into();
    a.src.kind = SIDE_HOST.into();
    (a.width, a.height, a.depth) = (4.into(), 2.into(), 1.into());
    a.data = DataRef::inline(8);
    with("ArrayCopy-inline", Request::ArrayCopy(ArrayCopy { head: a, data: &[5u8; 8] }));
    let mut m = Memset::new_zeroed();
    m.elem_size = 4.into();
    with("Memset-32", Request::Memset(m));
    // Graphs: node ids after the heads, a kernel node's parameters.
    let mut buf = Vec::new();
    let mut k = GraphKernelHead::new_zeroed();
    k.target = 1.into();
    k.function = 2.into();
    k.grid = [1.into(), 1.into(), 1.into()];
    k.block = [32.into(), 1.into(), 1.into()];
    k.dep_count = 2.into();
    k.param_len = 8.into();
    with("GraphAddKernelNode-deps", Request::GraphAddKernelNode(GraphAddKernelNode::new(k, &[3, 4], &[5u8; 8], &mut buf)));
    let mut buf = Vec::new();
    let mut e = GraphEdgesHead::new_zeroed();
    e.graph = 1.into();
    e.count = 2.into();
    with("GraphEdgesChange-two", Request::GraphEdgesChange(GraphEdgesChange::new(e, &[2, 3], &[4, 5], &mut buf)));
    let deps = [zerocopy::little_endian::U64::new(2), zerocopy::little_endian::U64::new(3)];
    let mut n = GraphSimpleHead::new_zeroed();
    n.graph = 1.into();
    n.kind = 5.into();
    n.dep_count = 2.into();
    with("GraphAddNode-deps", Request::GraphAddNode(GraphAddNode { head: n, deps: &deps }));
    let mut c = CaptureToGraphHead::new_zeroed();
    c.stream = 1.into();
    c.graph = 2.into();
    c.dep_count = 2.into();
    with("StreamBeginCaptureToGraph-deps", Request::StreamBeginCaptureToGraph(StreamBeginCaptureToGraph { head: c, deps: &deps }));
}

/// Bytes that `arbitrary::Unstructured` reads back as the values written.
#[derive(Default)]
struct Program(Vec<u8>);

impl Program {
    /// `int_in_range(0..=max)` of a range that fits a byte.
    fn byte(&mut self, v: u8) -> &mut Self {
        self.0.push(v);
        self
    }
    /// `int_in_range` of a range that needs two bytes (big-endian).
    fn two(&mut self, v: u16) -> &mut Self {
        self.0.extend_from_slice(&v.to_be_bytes());
        self
    }
    fn bool(&mut self, v: bool) -> &mut Self {
        self.byte(v as u8)
    }
    /// `ratio(n, d)` answered false (1 + b % d > n with b = n).
    fn no(&mut self, n: u8) -> &mut Self {
        self.byte(n)
    }
    fn bytes(&mut self, b: &[u8]) -> &mut Self {
        self.0.extend_from_slice(b);
        self
    }
}

fn ring_consumer() {
    // Ops: 4 send (ratio 1/8 large, else 0..=300: two bytes), 6 recv,
    // 8 release, 9 reply (ratio 1/8 large, else 0..=200: one byte), 10 the
    // frontend takes a reply.
    let honest = |small: bool| {
        let mut p = Program::default();
        p.bool(small).bool(small);
        for n in [0u16, 40, 300] {
            p.byte(4).no(1).two(n).byte(6).byte(8).byte(9).no(1).byte(n.min(200) as u8).byte(10);
        }
        p.byte(4).no(1).two(16).byte(4).no(1).two(16).byte(6).byte(6).byte(6).byte(8);
        p
    };
    write("ring_consumer", "honest-4k", &honest(true).0);
    write("ring_consumer", "honest-128k", &honest(false).0);
    // A record sent, then its header's length lies (op 3 on the request
    // channel, right at cons), then a receive.
    let mut p = honest(true);
    p.byte(4).no(1).two(8).byte(3).bool(true).byte(0).bool(false).bytes(&(1u32 << 20).to_le_bytes()).byte(0).byte(6);
    write("ring_consumer", "lying-header", &p.0);
    // A sent record, then prod moved past the buffer (op 1, slot 0).
    let mut p = honest(true);
    p.byte(4).no(1).two(8).byte(1).byte(0).bytes(&8192u32.to_le_bytes()).byte(6).byte(6);
    write("ring_consumer", "prod-too-far", &p.0);
}

/// The hello of version 2 of the local handshake.
fn hello(magic: &[u8; 8], version: u32, req: u32, rsp: u32, data: u64) -> Vec<u8> {
    let mut h = magic.to_vec();
    for v in [version, req, rsp, 0] {
        h.extend_from_slice(&v.to_le_bytes());
    }
    h.extend_from_slice(&data.to_le_bytes());
    h.extend_from_slice(&0x7f00_0000_0000u64.to_le_bytes());
    h
}

fn local_handshake() {
    let good = hello(b"PVGPULH1", 2, 4096, 4096, 4096);
    // fds: kind 0 memfd (small size: pages, control page honest, seals),
    // kind 1 eventfd, kind 2 pipe, kind 4 /dev/null.
    let memfd = |p: &mut Program, pages: u8, seals: u8| {
        p.byte(0).bool(true).byte(pages).bool(true).byte(0).byte(seals);
    };
    let seed = |name: &str, hello: &[u8], split: u8, fds: &dyn Fn(&mut Program) -> u8| {
        let mut p = Program::default();
        let mut f = Program::default();
        let n = fds(&mut f);
        p.byte(n).byte(split).byte(hello.len() as u8).bytes(hello).bytes(&f.0);
        write("local_handshake", name, &p.0);
    };
    let three = |p: &mut Program| {
        memfd(p, 4, 3);
        p.byte(1).byte(1);
        3
    };
    seed("accepted", &good, 39, &three);
    seed("accepted-split", &good, 3, &three);
    seed("memfd-only", &good, 39, &|p| {
        memfd(p, 4, 3);
        1
    });
    seed("unsealed", &good, 39, &|p| {
        memfd(p, 4, 0);
        p.byte(1).byte(1);
        3
    });
    seed("too-small", &good, 39, &|p| {
        memfd(p, 2, 3);
        p.byte(1).byte(1);
        3
    });
    seed("pipe-and-null", &good, 39, &|p| {
        memfd(p, 4, 3);
        p.byte(2).bool(true).byte(4);
        3
    });
    seed("geometry-over-limit", &hello(b"PVGPULH1", 2, 4096, 4096, 2 << 20), 39, &three);
    seed("bad-magic", &hello(b"PVGPULW1", 2, 4096, 4096, 4096), 39, &three);
    seed("no-fds", &good, 39, &|_| 0);
}

fn xs(ty: XsType, req_id: u32, payload: &[u8]) -> Vec<u8> {
    Message { ty: ty as u32, req_id, tx_id: 0, payload: payload.to_vec() }.encode().unwrap()
}

fn xenstore_reply() {
    use XsType::*;
    let event = |path: &str| xs(WatchEvent, 0, format!("{path}\0pvgpu\0").as_bytes());
    let dir = "/local/domain/5/device/vgpu/0";
    // The replies to client_session's requests, in order (ids from 1).
    let mut s = Vec::new();
    s.extend(xs(Read, 1, b"3"));
    s.extend(xs(GetDomainPath, 2, b"/local/domain/5\0"));
    s.extend(xs(Directory, 3, b"0\0001\0"));
    s.extend(xs(GetPerms, 4, b"n5\0r0\0"));
    s.extend(xs(Read, 5, b"3"));
    s.extend(xs(Read, 6, b"4096"));
    s.extend(xs(Read, 7, b"1048576"));
    s.extend(xs(Read, 8, b"264"));
    s.extend(xs(Read, 9, b"text"));
    s.extend(event(dir));
    s.extend(xs(Watch, 10, b"OK\0"));
    s.extend(xs(TransactionStart, 11, b"42\0"));
    s.extend(xs(Read, 12, b"4\0"));
    s.extend(xs(Write, 13, b"OK\0"));
    s.extend(xs(Error, 14, b"ENOENT\0"));
    s.extend(xs(Read, 15, b"0"));
    s.extend(xs(TransactionEnd, 16, b"OK\0"));
    s.extend(event(&format!("{dir}/state")));
    write("xenstore_reply", "session", &s);
    // The transaction conflicts once and is run again.
    let mut t = s[..s.len() - event(&format!("{dir}/state")).len() - xs(TransactionEnd, 16, b"OK\0").len()].to_vec();
    t.extend(xs(Error, 16, b"EAGAIN\0"));
    t.extend(xs(TransactionStart, 17, b"43\0"));
    t.extend(xs(Read, 18, b"5"));
    t.extend(xs(Write, 19, b"OK\0"));
    t.extend(xs(Read, 20, b"1"));
    t.extend(xs(Read, 21, b"0"));
    t.extend(xs(TransactionEnd, 22, b"OK\0"));
    write("xenstore_reply", "transaction-retried", &t);
    // Errors and an event before the first reply.
    let mut e = event("@releaseDomain");
    e.extend(xs(Error, 1, b"EACCES\0"));
    e.extend(xs(Error, 2, b"EINVAL\0"));
    write("xenstore_reply", "errors", &e);
}

/// An entry as nvcc 13 lays it out (the stored size is written only for a
/// compressed payload).
fn entry(kind: u16, arch: u32, flags: u64, size: u64, payload: &[u8]) -> Vec<u8> {
    let padded = payload.len().next_multiple_of(8);
    let mut h = vec![0u8; 64];
    h[0..2].copy_from_slice(&kind.to_le_bytes());
    h[2..4].copy_from_slice(&0x0101u16.to_le_bytes());
    h[4..8].copy_from_slice(&64u32.to_le_bytes());
    h[8..12].copy_from_slice(&(padded as u32).to_le_bytes());
    if flags & (pvgpu_fatbin::FLAG_LZ4 | pvgpu_fatbin::FLAG_ZSTD) != 0 {
        h[16..20].copy_from_slice(&(payload.len() as u32).to_le_bytes());
    }
    h[28..32].copy_from_slice(&arch.to_le_bytes());
    h[40..48].copy_from_slice(&flags.to_le_bytes());
    h[56..64].copy_from_slice(&size.to_le_bytes());
    h.extend_from_slice(payload);
    h.resize(64 + padded, 0);
    h
}

fn container(entries: &[Vec<u8>]) -> Vec<u8> {
    let body = entries.concat();
    let mut c = pvgpu_fatbin::MAGIC.to_le_bytes().to_vec();
    c.extend_from_slice(&1u16.to_le_bytes());
    c.extend_from_slice(&16u16.to_le_bytes());
    c.extend_from_slice(&(body.len() as u64).to_le_bytes());
    c.extend_from_slice(&body);
    c
}

fn module_image() {
    let kernels = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/kernels");
    let read = |f: &str| std::fs::read(kernels.join(f)).unwrap();
    let (ptx, cubin, fatbin) = (read("kernels.ptx"), read("kernels.sm_90.cubin"), read("kernels.fatbin"));
    write("module_image", "kernels.ptx", &ptx);
    write("module_image", "kernels.sm_90.cubin", &cubin);
    write("module_image", "kernels.fatbin", &fatbin);
    let (kptx, kelf) = (pvgpu_fatbin::KIND_PTX, pvgpu_fatbin::KIND_ELF);
    let lz4 = lz4_flex::block::compress(&ptx);
    let zstd = ruzstd::encoding::compress_to_vec(&cubin[..], ruzstd::encoding::CompressionLevel::Fastest);
    let packed = container(&[
        entry(kelf, 90, pvgpu_fatbin::FLAG_ZSTD, cubin.len() as u64, &zstd),
        entry(kptx, 80, pvgpu_fatbin::FLAG_LZ4, ptx.len() as u64, &lz4),
    ]);
    write("module_image", "compressed.fatbin", &packed);
    // Two containers, several architectures: select keeps one of them.
    let small = b".version 8.0\n.target sm_75\n.visible .entry k(.param .u64 a, .param .u32 n)\n{ ret; }\n.global .u32 g = 7;\n";
    let two = [
        container(&[entry(kptx, 75, 0, small.len() as u64, small), entry(kelf, 80, 0, 4, b"\x7fELF")]),
        container(&[entry(kptx, 90, pvgpu_fatbin::FLAG_LZ4, small.len() as u64, &lz4_flex::block::compress(small))]),
    ]
    .concat();
    write("module_image", "two-containers.fatbin", &two);
    write("module_image", "small.ptx", small);
}

/// The client's answer in the TCP opening: magic, version, flags (bit 0:
/// a proof follows), nonce, proof.
fn client_hello(flags: u32) -> Vec<u8> {
    let mut m = b"PVGPUTC1".to_vec();
    m.extend_from_slice(&1u32.to_le_bytes());
    m.extend_from_slice(&flags.to_le_bytes());
    m.extend_from_slice(&[7; 32]);
    m.extend_from_slice(&[9; 32]);
    m
}

/// A backend's challenge and verdict (status, proof).
fn server_side(key: bool, status: u32) -> Vec<u8> {
    let mut m = b"PVGPUTS1".to_vec();
    m.extend_from_slice(&1u32.to_le_bytes());
    m.extend_from_slice(&u32::from(key).to_le_bytes());
    m.extend_from_slice(&[3; 32]);
    m.extend_from_slice(b"PVGPUTV1");
    m.extend_from_slice(&status.to_le_bytes());
    m.extend_from_slice(&0u32.to_le_bytes());
    m.extend_from_slice(&[5; 32]);
    m
}

fn tcp_opening() {
    for (choice, name) in [(0u8, "open"), (1, "keyed"), (0b10100, "open-pieces")] {
        let mut m = vec![choice];
        m.extend(client_hello(u32::from(choice & 1)));
        write("tcp_opening", &format!("server-{name}"), &m);
    }
    for (choice, status) in [(2u8, 0u32), (3, 0), (3, 3), (2, 4)] {
        let mut m = vec![choice];
        m.extend(server_side(choice & 1 != 0, status));
        write("tcp_opening", &format!("client-{choice}-{status}"), &m);
    }
}

fn tcp_stream() {
    let mut stream = vec![0u8];
    for (op, payload) in [(Opcode::Nop, &[][..]), (Opcode::Nop, &[1, 2, 3][..])] {
        stream.extend(message(op, payload));
    }
    write("tcp_stream", "frames", &stream);
    stream[0] = 3;
    write("tcp_stream", "frames-in-pieces", &stream);
    let mut claim = vec![0u8];
    claim.extend_from_slice(Header::request(Opcode::Nop, 1, FLAG_REPLY, MAX_PAYLOAD).as_bytes());
    claim.extend_from_slice(&[0; 64]);
    write("tcp_stream", "large-claim", &claim);
}

/// Snapshots as a checkpoint writes them: an empty session, and one with
/// a context (and a limit it set), an allocation of a pool, a module (and
/// a global no host call named), a stream, virtual memory, a graph, an
/// array and a texture object.
fn snapshot_file() {
    use pvgpu_ctl::snapshot::{
        Allocation, ArrayRec, Body, CondBody, CondHandleRec, Context, Device, Function, Global, GraphRec, LimitRec, Mapped, Meta, Module, NodeKind, NodeRec,
        Physical, PoolRec, Queue, Reservation, State, TexObjectRec, Writer,
    };
    use pvgpu_ctl::snapshot::{AreaRec, Handed};
    let meta = |state: State, bytes: u64| Meta {
        created_unix_seconds: 1_800_000_000,
        session: 7,
        peer: "uid:1000".into(),
        token: "0f".repeat(16),
        executor: "host".into(),
        devices: vec![Device { ordinal: 0, name: "pvgpu host double".into(), total_memory_bytes: 1 << 30, uuid: Some("00".repeat(16)) }],
        gpus: Some(vec![0]),
        space: 1,
        state_bytes: bytes,
        skeleton: false,
        held_bytes: 0,
        state,
    };
    let encode = |m: &Meta, blobs: &[&[u8]]| {
        let mut w = Writer::new(Vec::new(), m, blobs.len() as u32).unwrap();
        for b in blobs {
            w.blob(b).unwrap();
        }
        w.finish().unwrap()
    };
    write("snapshot_file", "empty", &encode(&meta(State::default(), 0), &[]));
    let state = State {
        initialized: true,
        contexts: vec![Context {
            id: 0x1_0000_0001,
            device: 0,
            flags: 0,
            primary: true,
            retains: 1,
            limits: vec![LimitRec { limit: 2, value: 64 << 20, seq: 3 }],
        }],
        current: Some(0x1_0000_0001),
        allocations: vec![Allocation {
            ctx: 0x1_0000_0001,
            address: 0x7f00_0000_1000,
            length: 16,
            blob: 0,
            pool: Some(0x1_0000_0001),
            handed: false,
        }],
        pools: vec![PoolRec { id: 0x1_0000_0001, ctx: 0x1_0000_0001, max_size: 0, attributes: vec![(4, 1 << 20)], access: vec![], seq: 4 }],
        modules: vec![Module {
            id: 0x1_0000_0001,
            ctx: 0x1_0000_0001,
            image: 2,
            functions: vec![Function { id: 0x1_0000_0001, name: "k".into(), attributes: vec![(8, 80 << 10)] }],
            globals: vec![],
            unlooked: vec![Global { name: "counter".into(), address: 0x7f00_0000_2000, length: 4, blob: 3 }],
            seq: 1,
        }],
        arrays: vec![ArrayRec {
            id: 0x1_0000_0001,
            ctx: 0x1_0000_0001,
            width: 4,
            height: 4,
            depth: 0,
            format: 0x20,
            channels: 1,
            flags: 2,
            levels: 0,
            level_ids: vec![],
            blobs: vec![4],
            seq: 5,
        }],
        tex_objects: vec![TexObjectRec { ctx: 0x1_0000_0001, value: 1, request: "00".repeat(std::mem::size_of::<TexObjectCreate>()) }],
        streams: vec![Queue { id: 0x1_0000_0001, ctx: 0x1_0000_0001, flags: 1, priority: 0, seq: 2 }],
        events: vec![],
        pending_error: None,
        reservations: vec![Reservation { ctx: 0x1_0000_0001, address: 0x5000_0000_0000, length: 2 << 20 }],
        physical: vec![Physical { id: 0x1_0000_0001, ctx: 0x1_0000_0001, length: 2 << 20, flags: 0, released: true }],
        mappings: vec![Mapped {
            ctx: 0x1_0000_0001,
            address: 0x5000_0000_0000,
            length: 4096,
            physical: 0x1_0000_0001,
            offset: 0,
            access: 3,
            blob: 1,
        }],
        graphs: vec![GraphRec {
            id: 0x1_0000_0001,
            ctx: 0x1_0000_0001,
            body: Body {
                nodes: vec![
                    NodeRec { id: Some(0x1_0000_0001), kind: NodeKind::Empty },
                    NodeRec { id: None, kind: NodeKind::Empty },
                    NodeRec {
                        id: Some(0x1_0000_0002),
                        kind: NodeKind::Cond {
                            handle: 1,
                            kind: 1,
                            bodies: vec![CondBody { graph: Some(0x1_0000_0002), body: Body::default() }],
                        },
                    },
                ],
                edges: vec![[0, 1]],
            },
            handles: vec![CondHandleRec { graph: 0x1_0000_0001, value: 1, default: 1, flags: 1 }],
        }],
        ..State::default()
    };
    let blobs: [&[u8]; 5] = [&[7; 16], &[9; 4096], b".version 8.0\n\0", &[3; 4], &[1; 64]];
    write("snapshot_file", "session", &encode(&meta(state.clone(), 16 + 4096 + 4 + 64), &blobs));
    // The same session's memory handed over in place, its data area
    // page-locked part by part.
    let mut handed = state;
    handed.allocations[0].handed = true;
    handed.handed = vec![Handed { ctx: 0x1_0000_0001, address: 0x7f00_0000_0000, length: 2 << 20 }];
    handed.area = Some(AreaRec { staging: 64 << 20, pool_wanted: true });
    let blobs: [&[u8]; 5] = [&[], &[9; 4096], b".version 8.0\n\0", &[3; 4], &[1; 64]];
    write("snapshot_file", "handed", &encode(&meta(handed, 4096 + 4 + 64), &blobs));
}

fn main() {
    snapshot_file();
    tcp_opening();
    tcp_stream();
    request_decoder();
    ring_consumer();
    local_handshake();
    xenstore_reply();
    module_image();
}
