//! CUDA arrays and texture and surface objects go with their session: a
//! program holding a surface-capable 2D array read by a texture and scaled
//! through a surface, a layered array, a mipmapped array with two of its
//! levels looked up, objects over pitched memory, and gaps in the objects'
//! numbering (objects it destroyed), moved to another backend or
//! checkpointed through a restart of its own, goes on with the same
//! handles, the same object values in its kernels' arguments and the same
//! elements.

use super::*;
use pvgpu_frontend::{ArrayEnd, ArrayShape, TexSampling};
use pvgpu_ring::proto::{RESOURCE_ARRAY, RESOURCE_PITCH2D, ResourceDesc};

/// `CU_AD_FORMAT_FLOAT`, `CU_AD_FORMAT_UNSIGNED_INT8`.
const FLOAT: u32 = 0x20;
const U8: u32 = 0x01;
const W: u64 = 16;
const H: u64 = 8;

/// The kernels of `tests/runtime/textures.cu`, which the host double runs
/// by name.
const PTX: &str = ".version 7.0\n.target sm_50\n.address_size 64\n\
.visible .entry pvgpu_tex_read(.param .u64 t, .param .u64 o, .param .u32 w, .param .u32 h)\n{\n\tret;\n}\n\
.visible .entry pvgpu_surf_scale(.param .u64 s, .param .u32 w, .param .u32 h, .param .f32 k)\n{\n\tret;\n}\n";

struct Held {
    module: pvgpu_frontend::Module,
    /// The surface-capable array, its texture and surface objects.
    a: u64,
    tex: u64,
    surf: u64,
    /// A texture over pitched memory `d`, and one made after a destroyed
    /// object.
    pitched: u64,
    late: u64,
    d: u64,
    layered: u64,
    mipmapped: u64,
    levels: [u64; 2],
}

fn image() -> Vec<f32> {
    (0..W * H).map(|i| (i * 7 % 53) as f32 - 20.0).collect()
}

fn layers() -> Vec<u8> {
    (0..64 * 4 * 3).map(|i| (i * 31 % 251) as u8).collect()
}

fn level_bytes(level: usize) -> Vec<u8> {
    let n = [0, 16 * 4 * 4, 8 * 2 * 4][level];
    (0..n).map(|i| (i * 13 + level) as u8).collect()
}

fn point_sampling() -> TexSampling {
    TexSampling { words: [1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0], view: None }
}

fn of_array(a: u64) -> ResourceDesc {
    ResourceDesc { kind: RESOURCE_ARRAY.into(), addr: a.into(), ..Default::default() }
}

fn write(c: &Client, to: ArrayEnd, bytes: &[u8], row: u64, rows: u64, slices: u64) {
    // SAFETY: `bytes` holds the rows and slices the copy names, packed.
    unsafe {
        c.array_copy(
            to,
            ArrayEnd::Host { ptr: bytes.as_ptr(), pitch: row as usize, rows: rows as usize },
            row,
            rows,
            slices,
            Stream::DEFAULT,
            false,
        )
    }
    .unwrap();
}

fn read(c: &Client, from: ArrayEnd, row: u64, rows: u64, slices: u64) -> Vec<u8> {
    let mut b = vec![0u8; (row * rows * slices) as usize];
    let to = ArrayEnd::Host { ptr: b.as_mut_ptr(), pitch: row as usize, rows: rows as usize };
    // SAFETY: `b` holds the rows and slices the copy names, packed.
    unsafe { c.array_copy(to, from, row, rows, slices, Stream::DEFAULT, false) }.unwrap();
    b
}

fn at(id: u64) -> ArrayEnd {
    ArrayEnd::Array { id, x: 0, y: 0, z: 0 }
}

fn hold(c: &Client, g: &Gpu<'_>) -> Held {
    let surface = ArrayShape { width: W, height: H, format: FLOAT, channels: 1, flags: 2, ..Default::default() };
    let a = c.array_create(g.ctx, &surface, 0).unwrap();
    write(c, at(a), &f32_bytes(&image()), W * 4, H, 1);
    let gap = c.tex_object_create(g.ctx, of_array(a), Some(&point_sampling())).unwrap();
    let tex = c.tex_object_create(g.ctx, of_array(a), Some(&point_sampling())).unwrap();
    let surf = c.tex_object_create(g.ctx, of_array(a), None).unwrap();
    c.tex_object_destroy(g.ctx, gap, false).unwrap();
    // Pitched memory: W floats a row, H rows, 128 bytes apart.
    let d = c.mem_alloc(g.ctx, 128 * H).unwrap();
    let rows: Vec<f32> = (0..32 * H).map(|i| i as f32).collect();
    c.memcpy_htod(d, &f32_bytes(&rows)).unwrap();
    let mut res =
        ResourceDesc { kind: RESOURCE_PITCH2D.into(), addr: d.into(), format: FLOAT.into(), channels: 1.into(), ..Default::default() };
    (res.width, res.height, res.bytes) = (W.into(), H.into(), 128.into());
    let pitched = c.tex_object_create(g.ctx, res, Some(&point_sampling())).unwrap();
    let freed = c.tex_object_create(g.ctx, res, Some(&point_sampling())).unwrap();
    let late = c.tex_object_create(g.ctx, of_array(a), Some(&point_sampling())).unwrap();
    c.tex_object_destroy(g.ctx, freed, false).unwrap();
    assert!(pitched < freed && freed < late, "the numbering leaves a gap: {pitched} {freed} {late}");
    let layered = c.array_create(g.ctx, &ArrayShape { width: 16, height: 4, depth: 3, format: U8, channels: 4, flags: 1 }, 0).unwrap();
    write(c, at(layered), &layers(), 64, 4, 3);
    // Three levels of 32 x 8, 16 x 4 and 8 x 2 floats; levels 1 and 2
    // looked up and written, level 0 left as made.
    let mm = ArrayShape { width: 32, height: 8, format: FLOAT, channels: 1, ..Default::default() };
    let mipmapped = c.array_create(g.ctx, &mm, 3).unwrap();
    let levels = [c.mipmap_level(mipmapped, 1).unwrap(), c.mipmap_level(mipmapped, 2).unwrap()];
    write(c, at(levels[0]), &level_bytes(1), 64, 4, 1);
    write(c, at(levels[1]), &level_bytes(2), 32, 2, 1);
    // A module loaded after the arrays: a restore makes them in that order.
    let module = c.module_load(g.ctx, PTX.as_bytes()).unwrap();
    Held { module, a, tex, surf, pitched, late, d, layered, mipmapped, levels }
}

/// What texture object `tex` reads, texel by texel.
fn texels(c: &Client, g: &Gpu<'_>, h: &Held, tex: u64) -> Vec<f32> {
    let f = c.module_get_function(h.module, "pvgpu_tex_read").unwrap();
    let out = c.mem_alloc(g.ctx, W * H * 4).unwrap();
    let (w, ht) = (W as i32, H as i32);
    c.launch(&f, [1, 1, 1], [16, 8, 1], 0, Stream::DEFAULT, &[arg(&tex), arg(&out), arg(&w), arg(&ht)]).unwrap();
    let mut b = vec![0u8; (W * H * 4) as usize];
    c.memcpy_dtoh(&mut b, out).unwrap();
    c.mem_free(out).unwrap();
    bytes_f32(&b)
}

/// The program goes on where its session is now.
fn go_on(c: &Client, g: &Gpu<'_>, h: &Held) {
    assert_eq!(texels(c, g, h, h.tex), image(), "the array's texture object, by its old value");
    assert_eq!(texels(c, g, h, h.late), image(), "an object made after a destroyed one, by its old value");
    let pitched: Vec<f32> = (0..H).flat_map(|y| (0..W).map(move |x| (y * 32 + x) as f32)).collect();
    assert_eq!(texels(c, g, h, h.pitched), pitched, "a texture object over pitched memory");
    let f = c.module_get_function(h.module, "pvgpu_surf_scale").unwrap();
    let (w, ht) = (W as i32, H as i32);
    c.launch(&f, [1, 1, 1], [16, 8, 1], 0, Stream::DEFAULT, &[arg(&h.surf), arg(&w), arg(&ht), arg(&2.0f32)]).unwrap();
    let doubled: Vec<f32> = image().iter().map(|v| v * 2.0).collect();
    assert_eq!(bytes_f32(&read(c, at(h.a), W * 4, H, 1)), doubled, "the surface object scaled the array");
    assert_eq!(read(c, at(h.layered), 64, 4, 3), layers(), "every layer of the layered array");
    assert_eq!(read(c, at(h.levels[0]), 64, 4, 1), level_bytes(1), "level 1, by the handle looked up before");
    assert_eq!(read(c, at(h.levels[1]), 32, 2, 1), level_bytes(2), "level 2");
    assert_eq!(c.mipmap_level(h.mipmapped, 2).unwrap(), h.levels[1], "a level is the one looked up before");
    let level0 = c.mipmap_level(h.mipmapped, 0).unwrap();
    assert!(read(c, at(level0), 128, 8, 1).iter().all(|&b| b == 0), "level 0 as made");
    // The stand-in for the destroyed object is gone: a new object takes
    // its number, the lowest free.
    let next = c.tex_object_create(g.ctx, of_array(h.a), Some(&point_sampling())).unwrap();
    assert!(next < h.late, "the number the program had freed is free again: {next}");
    for (o, surface) in [(h.tex, false), (h.surf, true), (h.pitched, false), (h.late, false), (next, false)] {
        c.tex_object_destroy(g.ctx, o, surface).unwrap();
    }
    c.array_destroy(h.a, false).unwrap();
    c.array_destroy(h.layered, false).unwrap();
    c.array_destroy(h.mipmapped, true).unwrap();
    c.mem_free(h.d).unwrap();
    c.ctx_synchronize(g.ctx).unwrap();
}

pub(crate) fn arrays_and_textures_move_with_their_session(t: Transport) {
    moves_with_its_session(t, "holding arrays and texture objects", hold, |c, g, held, _| go_on(c, g, held));
}

pub(crate) fn arrays_and_textures_survive_a_backend_restart(t: Transport) {
    survives_a_restart(t, "holding arrays and texture objects", hold, |c, g, held, meta| {
        let state = meta.state;
        assert_eq!((state.arrays.len(), state.tex_objects.len()), (3, 4), "three arrays, four objects");
        let mm = state.arrays.iter().find(|a| a.levels == 3).expect("the mipmapped array");
        assert_eq!((mm.blobs.len(), mm.level_ids.len()), (3, 2), "every level's bytes, the levels looked up");
        go_on(c, g, held);
    });
}
