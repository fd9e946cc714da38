//! CUDA arrays and texture and surface objects: bytes through arrays of one,
//! two and three dimensions (layered, mipmapped) and back, every side
//! checked against the array it names, and objects that only their own
//! session may destroy.

use super::*;
use pvgpu_frontend::{ArrayEnd, ArrayShape, TexSampling};
use pvgpu_ring::proto::{RESOURCE_ARRAY, RESOURCE_MIPMAPPED, RESOURCE_PITCH2D, ResourceDesc};

/// `CU_AD_FORMAT_FLOAT`, `CU_AD_FORMAT_UNSIGNED_INT8`.
const FLOAT: u32 = 0x20;
const U8: u32 = 0x01;

fn host(p: &[u8], pitch: usize, rows: usize) -> ArrayEnd {
    ArrayEnd::Host { ptr: p.as_ptr(), pitch, rows }
}

fn host_mut(p: &mut [u8], pitch: usize, rows: usize) -> ArrayEnd {
    ArrayEnd::Host { ptr: p.as_mut_ptr(), pitch, rows }
}

fn at(id: u64, x: u64, y: u64, z: u64) -> ArrayEnd {
    ArrayEnd::Array { id, x, y, z }
}

fn pattern(n: usize, seed: usize) -> Vec<u8> {
    (0..n).map(|i| ((i * 31 + seed) % 251) as u8).collect()
}

pub(crate) fn arrays_round_trip(t: Transport) {
    let c = shared().client(t);
    let g = Gpu::new(&c).unwrap();
    let s = Stream::DEFAULT;
    // A 2D float array of 24 x 10: rows of 96 bytes.
    let shape = ArrayShape { width: 24, height: 10, format: FLOAT, channels: 1, ..Default::default() };
    let a = c.array_create(g.ctx, &shape, 0).unwrap();
    let (row, rows) = (96usize, 10usize);
    let src = pattern(row * rows, 1);
    // SAFETY: every host side below holds the rows it names.
    unsafe {
        c.array_copy(at(a, 0, 0, 0), host(&src, row, rows), row as u64, rows as u64, 1, s, false).unwrap();
        // Array to pitched device memory and back to the host.
        let pitch = 128u64;
        let d = c.mem_alloc(g.ctx, pitch * rows as u64).unwrap();
        c.array_copy(ArrayEnd::Device { ptr: d, pitch, rows: rows as u64 }, at(a, 0, 0, 0), row as u64, rows as u64, 1, s, false).unwrap();
        let mut via_device = vec![0u8; row * rows];
        c.memcpy_2d(
            pvgpu_frontend::Pitched::Host { ptr: via_device.as_mut_ptr(), pitch: row },
            pvgpu_frontend::Pitched::Device { ptr: d, pitch },
            row,
            rows,
            s,
            false,
        )
        .unwrap();
        assert_eq!(via_device, src, "host to array to pitched device memory");
        // A sub-rectangle: 5 rows of 40 bytes from (8, 2) into a second
        // array at (0, 4), then back to the host at its own pitch.
        let b = c.array_create(g.ctx, &shape, 0).unwrap();
        c.array_copy(at(b, 0, 4, 0), at(a, 8, 2, 0), 40, 5, 1, s, false).unwrap();
        let mut back = vec![0u8; 64 * 5];
        let dst = ArrayEnd::Host { ptr: back.as_mut_ptr(), pitch: 64, rows: 5 };
        c.array_copy(dst, at(b, 0, 4, 0), 40, 5, 1, s, false).unwrap();
        for r in 0..5 {
            assert_eq!(&back[r * 64..r * 64 + 40], &src[(r + 2) * row + 8..(r + 2) * row + 48], "row {r} of the rectangle");
        }
        // Device memory into an array, asynchronously on a stream.
        let st = c.stream_create(g.ctx, 1, 0).unwrap();
        c.memset(d, 0x5a, 1, pitch * rows as u64, s).unwrap();
        c.ctx_synchronize(g.ctx).unwrap();
        c.array_copy(at(b, 0, 0, 0), ArrayEnd::Device { ptr: d, pitch, rows: rows as u64 }, row as u64, rows as u64, 1, st, true).unwrap();
        c.stream_synchronize(st).unwrap();
        let mut all = vec![0u8; row * rows];
        c.array_copy(host_mut(&mut all, row, rows), at(b, 0, 0, 0), row as u64, rows as u64, 1, s, false).unwrap();
        assert!(all.iter().all(|&v| v == 0x5a), "device memory into the array");
    }
    c.array_destroy(a, false).unwrap();
    assert_eq!(code(c.array_destroy(a, false)), CuResult::INVALID_HANDLE, "destroyed once");
}

pub(crate) fn layered_and_mipmapped_arrays(t: Transport) {
    let c = shared().client(t);
    let g = Gpu::new(&c).unwrap();
    let s = Stream::DEFAULT;
    // Three layers of 16 x 4 texels of four 8-bit channels: rows of 64
    // bytes, one request for the whole copy.
    let layered = ArrayShape { width: 16, height: 4, depth: 3, format: U8, channels: 4, flags: 1 };
    let a = c.array_create(g.ctx, &layered, 0).unwrap();
    let src = pattern(64 * 4 * 3, 7);
    let mut back = vec![0u8; src.len()];
    // SAFETY: the host sides hold 3 slices of 4 rows of 64 bytes.
    unsafe {
        c.array_copy(at(a, 0, 0, 0), host(&src, 64, 4), 64, 4, 3, s, false).unwrap();
        c.array_copy(host_mut(&mut back, 64, 4), at(a, 0, 0, 0), 64, 4, 3, s, false).unwrap();
    }
    assert_eq!(back, src, "three layers there and back");
    // Layer 2 alone, into the middle of a taller host image.
    let mut one = vec![0u8; 64 * 6];
    // SAFETY: `one` holds 6 rows of 64 bytes; the copy writes 4 from row 1.
    unsafe {
        c.array_copy(ArrayEnd::Host { ptr: one[64..].as_mut_ptr(), pitch: 64, rows: 4 }, at(a, 0, 0, 2), 64, 4, 1, s, false).unwrap()
    };
    assert_eq!(&one[64..64 * 5], &src[2 * 256..3 * 256], "one layer");
    assert!(one[..64].iter().chain(&one[64 * 5..]).all(|&v| v == 0), "rows around it untouched");

    // A mipmapped 2D array of 3 levels: 32x8, 16x4, 8x2.
    let m = c.array_create(g.ctx, &ArrayShape { width: 32, height: 8, format: FLOAT, channels: 1, ..Default::default() }, 3).unwrap();
    let l2 = c.mipmap_level(m, 2).unwrap();
    assert_eq!(c.mipmap_level(m, 2).unwrap(), l2, "a level is looked up once");
    assert_eq!(code(c.mipmap_level(m, 3)), CuResult::INVALID_VALUE, "three levels only");
    let lv = pattern(32 * 2, 3);
    let mut lb = vec![0u8; 64];
    // SAFETY: level 2 is 8 x 2 floats: 2 rows of 32 bytes.
    unsafe {
        c.array_copy(at(l2, 0, 0, 0), host(&lv, 32, 2), 32, 2, 1, s, false).unwrap();
        c.array_copy(host_mut(&mut lb, 32, 2), at(l2, 0, 0, 0), 32, 2, 1, s, false).unwrap();
        assert_eq!(lb, lv, "a mipmap level there and back");
        let past = c.array_copy(at(l2, 0, 0, 0), host(&lv, 32, 2), 33, 2, 1, s, false);
        assert_eq!(code(past), CuResult::INVALID_VALUE, "a row wider than the level's");
    }
    assert_eq!(code(c.array_destroy(m, false)), CuResult::INVALID_HANDLE, "a mipmapped array is not an array");
    assert_eq!(code(c.array_destroy(l2, false)), CuResult::INVALID_HANDLE, "a level goes with its mipmapped array");
    c.array_destroy(m, true).unwrap();
    // SAFETY: as above.
    let gone = unsafe { c.array_copy(host_mut(&mut lb, 32, 2), at(l2, 0, 0, 0), 32, 2, 1, s, false) };
    assert_eq!(code(gone), CuResult::INVALID_HANDLE, "its levels went with it");
}

pub(crate) fn array_copies_are_checked(t: Transport) {
    let c = shared().client(t);
    let g = Gpu::new(&c).unwrap();
    let s = Stream::DEFAULT;
    let a = c.array_create(g.ctx, &ArrayShape { width: 8, height: 8, format: FLOAT, channels: 1, ..Default::default() }, 0).unwrap();
    let buf = vec![0u8; 4096];
    let d = c.mem_alloc(g.ctx, 256).unwrap();
    // SAFETY: `buf` is larger than any host side below.
    unsafe {
        let cases: [(ArrayEnd, ArrayEnd, u64, u64, &str); 5] = [
            (at(a, 4, 0, 0), host(&buf, 32, 8), 32, 1, "past the end of a row"),
            (at(a, 0, 1, 0), host(&buf, 32, 8), 32, 8, "past the last row"),
            (at(a, 0, 0, 1), host(&buf, 32, 8), 32, 1, "past the last slice"),
            (at(a + 1000, 0, 0, 0), host(&buf, 32, 8), 32, 1, "an array of no one"),
            (at(a, 0, 0, 0), ArrayEnd::Device { ptr: d, pitch: 32, rows: 8 }, 32, 9, "device rows past the allocation"),
        ];
        for (dst, src, w, h, what) in cases {
            let r = c.array_copy(dst, src, w, h, 1, s, false);
            assert!(matches!(code(r), CuResult::INVALID_VALUE | CuResult::INVALID_HANDLE), "{what}");
        }
    }
    // Formats and flags that are not offered.
    let bc1 = ArrayShape { width: 8, height: 8, format: 0x91, channels: 4, ..Default::default() };
    assert_eq!(code(c.array_create(g.ctx, &bc1, 0)), CuResult::NOT_SUPPORTED);
    let sparse = ArrayShape { width: 8, height: 8, format: FLOAT, channels: 1, flags: 0x40, ..Default::default() };
    assert_eq!(code(c.array_create(g.ctx, &sparse, 0)), CuResult::NOT_SUPPORTED);
    c.ctx_synchronize(g.ctx).unwrap();
}

fn point_sampling() -> TexSampling {
    // Clamp in every dimension, point filtering, read as integers.
    TexSampling { words: [1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0], view: None }
}

pub(crate) fn texture_and_surface_objects(t: Transport) {
    let c = shared().client(t);
    let g = Gpu::new(&c).unwrap();
    let a = c
        .array_create(g.ctx, &ArrayShape { width: 16, height: 16, format: FLOAT, channels: 1, flags: 2, ..Default::default() }, 0)
        .unwrap();
    let plain = c.array_create(g.ctx, &ArrayShape { width: 16, height: 16, format: FLOAT, channels: 1, ..Default::default() }, 0).unwrap();
    let res = |kind: u32, addr: u64| ResourceDesc { kind: kind.into(), addr: addr.into(), ..Default::default() };
    let tex = c.tex_object_create(g.ctx, res(RESOURCE_ARRAY, a), Some(&point_sampling())).unwrap();
    let surf = c.tex_object_create(g.ctx, res(RESOURCE_ARRAY, a), None).unwrap();
    assert_ne!(tex, 0);
    assert_ne!(surf, 0);
    // Pitched memory: 16 floats a row, 8 rows, 128 bytes apart.
    let d = c.mem_alloc(g.ctx, 128 * 8).unwrap();
    let mut pitched =
        ResourceDesc { kind: RESOURCE_PITCH2D.into(), addr: d.into(), format: FLOAT.into(), channels: 1.into(), ..Default::default() };
    (pitched.width, pitched.height, pitched.bytes) = (16.into(), 8.into(), 128.into());
    let on_pitched = c.tex_object_create(g.ctx, pitched, Some(&point_sampling())).unwrap();
    pitched.addr = (d + 4096).into();
    assert_eq!(code(c.tex_object_create(g.ctx, pitched, Some(&point_sampling()))), CuResult::INVALID_VALUE, "memory of no one");
    (pitched.addr, pitched.bytes) = (d.into(), 32.into());
    assert_eq!(code(c.tex_object_create(g.ctx, pitched, Some(&point_sampling()))), CuResult::INVALID_VALUE, "a row wider than the pitch");
    assert_eq!(code(c.tex_object_create(g.ctx, res(RESOURCE_ARRAY, a + 999), None)), CuResult::INVALID_HANDLE);
    assert_eq!(code(c.tex_object_create(g.ctx, res(RESOURCE_MIPMAPPED, a), Some(&point_sampling()))), CuResult::INVALID_HANDLE);
    // The driver makes a surface of an array without surface load/store
    // too (measured on the H100); kernels then cannot write it.
    let loose = c.tex_object_create(g.ctx, res(RESOURCE_ARRAY, plain), None).unwrap();
    c.tex_object_destroy(g.ctx, loose, true).unwrap();

    // Another session cannot destroy these objects.
    let other = shared().client(t);
    let _g2 = Gpu::new(&other).unwrap();
    assert_eq!(code(other.tex_object_destroy(_g2.ctx, tex, false)), CuResult::INVALID_VALUE);
    assert_eq!(code(c.tex_object_destroy(g.ctx, tex, true)), CuResult::INVALID_VALUE, "a texture object is not a surface object");
    for (o, surface) in [(tex, false), (surf, true), (on_pitched, false)] {
        c.tex_object_destroy(g.ctx, o, surface).unwrap();
    }
    assert_eq!(code(c.tex_object_destroy(g.ctx, tex, false)), CuResult::INVALID_VALUE, "destroyed once");

    // Values are per context: objects of two contexts of one session (which
    // may have the same value) are each destroyed in their own.
    let ctx2 = c.ctx_create(0, 0).unwrap();
    let shape = ArrayShape { width: 4, height: 4, format: FLOAT, channels: 1, ..Default::default() };
    let (a1, a2) = (c.array_create(g.ctx, &shape, 0).unwrap(), c.array_create(ctx2, &shape, 0).unwrap());
    let t1 = c.tex_object_create(g.ctx, res(RESOURCE_ARRAY, a1), Some(&point_sampling())).unwrap();
    let t2 = c.tex_object_create(ctx2, res(RESOURCE_ARRAY, a2), Some(&point_sampling())).unwrap();
    assert_eq!(code(c.tex_object_create(ctx2, res(RESOURCE_ARRAY, a1), None)), CuResult::INVALID_CONTEXT, "an array of another context");
    c.tex_object_destroy(ctx2, t2, false).unwrap();
    c.tex_object_destroy(g.ctx, t1, false).unwrap();
    c.ctx_destroy(ctx2).unwrap();
}
