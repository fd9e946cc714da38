//! Modules in every format, globals, kernel parameters and output, the image cache.

use super::*;

pub(crate) fn modules_in_every_format(t: Transport) {
    let h = shared();
    let c = h.client(t);
    c.init().unwrap();
    let ctx = c.primary_ctx_retain(0).unwrap();
    for (what, image) in [("ptx", PTX), ("cubin", CUBIN), ("fatbin", FATBIN)] {
        let m = c.module_load(ctx, image).unwrap_or_else(|e| panic!("loading the {what} image: {e}"));
        let f = c.module_get_function(m, "mat_sum").unwrap();
        let layout: Vec<(u32, u32)> = f.params.iter().map(|p| (p.offset, p.size)).collect();
        assert_eq!(layout, vec![(0, 8), (8, 8), (16, 8), (24, 4)], "{what}");
        let mixed = c.module_get_function(m, "mixed_params").unwrap();
        let layout: Vec<(u32, u32)> = mixed.params.iter().map(|p| (p.offset, p.size)).collect();
        assert_eq!(layout, vec![(0, 1), (8, 8), (16, 2), (24, 8), (32, 4), (40, 8)], "{what}");
        // Looking the same kernel up again gives the same function.
        assert_eq!(c.module_get_function(m, "mat_sum").unwrap().id, f.id);
        let (g, size) = c.module_get_global(m, "pvgpu_scale").unwrap();
        assert_eq!(size, 4);
        let mut v = [0u8; 4];
        c.memcpy_dtoh(&mut v, g).unwrap();
        assert_eq!(f32::from_le_bytes(v), 3.0, "{what}");
        assert_eq!(code(c.module_get_function(m, "no_such_kernel")), CuResult::NOT_FOUND);
        assert_eq!(code(c.module_get_global(m, "no_such_global")), CuResult::NOT_FOUND);
        c.module_unload(m).unwrap();
        assert_eq!(code(c.module_get_function(m, "mat_sum")), CuResult::INVALID_HANDLE);
        // The module's globals went with it.
        assert_eq!(code(c.memcpy_dtoh(&mut v, g)), CuResult::INVALID_VALUE);
    }
    assert!(c.module_load(ctx, b"definitely not a module").is_err());
    let mut lying_fatbin = FATBIN.to_vec();
    lying_fatbin[8..16].copy_from_slice(&(1u64 << 40).to_le_bytes());
    assert_eq!(code(c.module_load(ctx, &lying_fatbin)), CuResult::INVALID_IMAGE);
    c.nop().unwrap();
}

pub(crate) fn globals_feed_kernels(t: Transport) {
    let c = shared().client(t);
    let g = Gpu::new(&c).unwrap();
    let f = g.func("scale_by_global").unwrap();
    let (scale, _) = c.module_get_global(g.module, "pvgpu_scale").unwrap();
    c.memcpy_htod(scale, &2.5f32.to_le_bytes()).unwrap();
    let x = c.mem_alloc(g.ctx, 400).unwrap();
    c.memcpy_htod(x, &f32_bytes(&[2.0; 100])).unwrap();
    let n = 100i32;
    c.launch(&f, [1, 1, 1], [128, 1, 1], 0, Stream::DEFAULT, &[arg(&x), arg(&n)]).unwrap();
    let mut out = vec![0u8; 400];
    c.memcpy_dtoh(&mut out, x).unwrap();
    assert!(bytes_f32(&out).iter().all(|&v| v == 5.0));
}

/// The image cache: an image a guest sent is named by its hash the next
/// time, in a new session too; a guest reached over another transport (a
/// different owner) must send it itself.
pub(crate) fn image_cache(t: Transport) {
    let h = shared();
    let image = {
        let ptx = String::from_utf8(PTX.to_vec()).unwrap();
        // Unique to this run and transport, so the cache starts without it.
        let nonce = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos();
        format!("{ptx}\n// {nonce} {t:?}\n").into_bytes()
    };
    let c = h.client(t);
    let g = Gpu::new(&c).unwrap();
    assert!(c.module_load_cached(g.ctx, &image).unwrap().is_none(), "not sent yet");
    c.module_load_sent(g.ctx, &image).unwrap();
    // A new session of the same guest names it.
    let c2 = h.client(t);
    let g2 = Gpu::new(&c2).unwrap();
    let m = c2.module_load_cached(g2.ctx, &image).unwrap().expect("cached");
    c2.module_get_function(m, "saxpy").unwrap();
    // One byte different is another image.
    let mut other = image.clone();
    *other.last_mut().unwrap() = b' ';
    assert!(c2.module_load_cached(g2.ctx, &other).unwrap().is_none());
    // Another transport of the same backend (an external one, in the Xen
    // lab, is reached over the one under test only).
    if h.is_process() || h.is_embedded() {
        let o = if t == Transport::Local { Transport::Tcp } else { Transport::Local };
        let c3 = h.client(o);
        let g3 = Gpu::new(&c3).unwrap();
        assert!(c3.module_load_cached(g3.ctx, &image).unwrap().is_none(), "another owner must send it");
    }
}

/// What kernels print reaches the program, before the reply of the call
/// that waited for them (when the backend can capture it: the host double
/// always, a GPU in a session's own worker process).
pub(crate) fn kernel_output(t: Transport) {
    static OUTPUT: std::sync::Mutex<Vec<u8>> = std::sync::Mutex::new(Vec::new());
    pvgpu_frontend::set_output_handler(|b| OUTPUT.lock().unwrap().extend_from_slice(b));
    let h = shared();
    let c = h.client(t);
    let g = Gpu::new(&c).unwrap();
    let f = g.func("pvgpu_printf").unwrap();
    let tag = 4000 + t as i32;
    c.launch(&f, [2, 1, 1], [3, 1, 1], 0, Stream::DEFAULT, &[arg(&tag)]).unwrap();
    c.ctx_synchronize(g.ctx).unwrap();
    if h.exec == ExecKind::Host || h.is_process() {
        let out = String::from_utf8_lossy(&OUTPUT.lock().unwrap()).into_owned();
        let mine: Vec<&str> = out.lines().filter(|l| l.starts_with(&format!("pvgpu_printf tag {tag} "))).collect();
        assert_eq!(mine.len(), 6, "{out}");
    }
    // A context destroyed before anything waited for its kernels: what
    // they printed comes with the destroy, as the driver prints it then
    // (and no context is left to ask afterwards).
    let ctx = c.ctx_create(0, 0).unwrap();
    let m = c.module_load(ctx, PTX).unwrap();
    let f2 = c.module_get_function(m, "pvgpu_printf").unwrap();
    c.launch(&f2, [1, 1, 1], [2, 1, 1], 0, Stream::DEFAULT, &[arg(&(tag + 100))]).unwrap();
    c.ctx_destroy(ctx).unwrap();
    if h.exec == ExecKind::Host || h.is_process() {
        let out = String::from_utf8_lossy(&OUTPUT.lock().unwrap()).into_owned();
        let last: Vec<&str> = out.lines().filter(|l| l.starts_with(&format!("pvgpu_printf tag {} ", tag + 100))).collect();
        assert_eq!(last.len(), 2, "{out}");
    }
    let names = c.module_function_names(g.module).unwrap();
    for k in ["mat_sum", "saxpy", "pvgpu_printf", "pvgpu_null"] {
        assert!(names.iter().any(|n| n == k), "{k} in {names:?}");
    }
}

pub(crate) fn kernel_params_of_mixed_sizes(t: Transport) {
    let c = shared().client(t);
    let g = Gpu::new(&c).unwrap();
    let f = g.func("mixed_params").unwrap();
    let out = c.mem_alloc(g.ctx, 40).unwrap();
    let (ch, d, sh, u, fl) = (-5i8, -1.25e300f64, -1234i16, 0xDEAD_BEEF_0123_4567u64, 3.5f32);
    c.launch(&f, [1, 1, 1], [1, 1, 1], 0, Stream::DEFAULT, &[arg(&ch), arg(&d), arg(&sh), arg(&u), arg(&fl), arg(&out)]).unwrap();
    let mut b = [0u8; 40];
    c.memcpy_dtoh(&mut b, out).unwrap();
    let w: Vec<u64> = b.chunks_exact(8).map(|x| u64::from_le_bytes(x.try_into().unwrap())).collect();
    assert_eq!(w[0] as i64, -5);
    assert_eq!(f64::from_bits(w[1]), d);
    assert_eq!(w[2] as i64, -1234);
    assert_eq!(w[3], u);
    assert_eq!(f32::from_bits(w[4] as u32), fl);
}

/// Linking (`cuLinkComplete`): PTX linked by the backend's driver loads as
/// a module with the input's kernels and globals; the image and logs come
/// back whole however small the transport's pieces; what the backend must
/// not pass to its driver is refused: an option whose value is an address,
/// an input type it cannot check, a link of nothing.
pub(crate) fn linking(t: Transport) {
    use pvgpu_ring::cuda::api::{CU_JIT_INFO_LOG_BUFFER, CU_JIT_INPUT_OBJECT, CU_JIT_INPUT_PTX, CU_JIT_OPTIMIZATION_LEVEL};
    use pvgpu_ring::proto::{LinkInput, LinkSpec};
    let c = shared().client(t);
    let g = Gpu::new(&c).unwrap();
    let ptx = LinkInput { kind: CU_JIT_INPUT_PTX.0, name: "kernels.ptx", data: PTX };
    let spec = LinkSpec { options: vec![(CU_JIT_OPTIMIZATION_LEVEL.0, 3)], inputs: vec![ptx.clone()] };
    let linked = c.link(g.ctx, &spec).unwrap();
    let image = linked.image.unwrap_or_else(|e| panic!("link failed: {e:?}: {}", String::from_utf8_lossy(&linked.error_log)));
    let m = c.module_load(g.ctx, &image).unwrap();
    c.module_get_function(m, "mat_sum").unwrap();
    let (scale, _) = c.module_get_global(m, "pvgpu_scale").unwrap();
    let mut v = [0u8; 4];
    c.memcpy_dtoh(&mut v, scale).unwrap();
    assert_eq!(f32::from_le_bytes(v), 3.0);
    c.module_unload(m).unwrap();
    // A bad input: the driver's error and its log come back.
    let bad = LinkSpec { options: vec![], inputs: vec![LinkInput { kind: CU_JIT_INPUT_PTX.0, name: "bad.ptx", data: b"not PTX" }] };
    let failed = c.link(g.ctx, &bad).unwrap();
    assert!(failed.image.is_err() && !failed.error_log.is_empty(), "{failed:?}");
    // Refused before the driver sees them.
    let pointer = LinkSpec { options: vec![(CU_JIT_INFO_LOG_BUFFER.0, 0xdead_0000)], inputs: vec![ptx.clone()] };
    assert_eq!(code(c.link(g.ctx, &pointer)), CuResult::INVALID_VALUE);
    let object = LinkSpec { options: vec![], inputs: vec![LinkInput { kind: CU_JIT_INPUT_OBJECT.0, name: "a.o", data: b"\x7fELF" }] };
    assert_eq!(code(c.link(g.ctx, &object)), CuResult::NOT_SUPPORTED);
    // Nothing is kept once read: many links in a row never fill the session.
    for _ in 0..8 {
        assert!(c.link(g.ctx, &spec).unwrap().image.is_ok());
    }
    c.nop().unwrap();
}

/// The kernel names of a module too many to fit one reply (more than a
/// Xen ring's reply channel holds) all come back, a page at a time.
pub(crate) fn many_kernel_names(t: Transport) {
    let c = shared().client(t);
    let g = Gpu::new(&c).unwrap();
    let names: Vec<String> = (0..2800).map(|i| format!("kernel_with_a_rather_long_name_to_fill_pages_{i:04}")).collect();
    let mut ptx = String::from(".version 7.0\n.target sm_50\n.address_size 64\n");
    for n in &names {
        ptx.push_str(&format!(".visible .entry {n}()\n{{\n\tret;\n}}\n"));
    }
    // More than the local ring's reply channel (128 KiB) holds, too.
    assert!(names.iter().map(|n| n.len() + 1).sum::<usize>() > 128 << 10);
    let m = c.module_load(g.ctx, ptx.as_bytes()).unwrap();
    let mut got = c.module_function_names(m).unwrap();
    got.sort();
    assert_eq!(got, names);
    // All of them asked for at once: a transport that cannot carry the
    // reply fails the call, and the session goes on.
    use zerocopy::IntoBytes;
    let whole = pvgpu_ring::proto::ModuleFunctionNames { module: m.0.into(), first: 0.into(), max_bytes: (64u32 << 20).into() };
    let status = c.raw_call(pvgpu_ring::proto::Opcode::ModuleFunctionNames as u16, whole.as_bytes()).unwrap();
    assert!(matches!(status, CuResult::SUCCESS | CuResult::NOT_SUPPORTED), "{status:?}");
    c.nop().unwrap();
    c.module_unload(m).unwrap();
}
