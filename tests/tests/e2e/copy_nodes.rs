//! Copy nodes of pitched memory: a 3D copy between regions of different
//! pitches and slice heights, read back and set in its graph, checked byte
//! for byte against the same copy on the CPU; shapes that reach past an
//! allocation, or whose rows overlap, are refused, and so is a pitched copy
//! set in an executable graph (as the driver refuses it).

use super::*;
use pvgpu_frontend::NodeParams;
use pvgpu_ring::proto::CopyShape;

/// A copy of `depth` slices of `height` rows of `width` bytes.
fn shape(dst: (u64, u64, u64), src: (u64, u64, u64), (width, height, depth): (u64, u64, u64)) -> CopyShape {
    CopyShape {
        dst: dst.0.into(),
        dst_pitch: dst.1.into(),
        dst_rows: dst.2.into(),
        src: src.0.into(),
        src_pitch: src.1.into(),
        src_rows: src.2.into(),
        width: width.into(),
        height: height.into(),
        depth: depth.into(),
    }
}

/// `dst` (starting at `dst_base`) after `s` ran on the CPU over `src`
/// (starting at `src_base`).
fn on_cpu(dst: &mut [u8], dst_base: u64, src: &[u8], src_base: u64, s: &CopyShape) {
    for z in 0..s.depth.get() {
        for y in 0..s.height.get() {
            let from = (s.src.get() - src_base + (z * s.src_rows.get() + y) * s.src_pitch.get()) as usize;
            let to = (s.dst.get() - dst_base + (z * s.dst_rows.get() + y) * s.dst_pitch.get()) as usize;
            let w = s.width.get() as usize;
            dst[to..to + w].copy_from_slice(&src[from..from + w]);
        }
    }
}

pub(crate) fn pitched_copy_nodes(t: Transport) {
    let c = shared().client(t);
    let g = Gpu::new(&c).unwrap();
    let s = c.stream_create(g.ctx, 1, 0).unwrap();
    // Source: 3 slices of 4 rows, 64 bytes apart; destination: 2 slices of
    // 5 rows, 48 bytes apart.
    let (src_len, dst_len) = (3 * 4 * 64, 2 * 5 * 48);
    let (src, dst) = (c.mem_alloc(g.ctx, src_len).unwrap(), c.mem_alloc(g.ctx, dst_len).unwrap());
    let bytes: Vec<u8> = (0..src_len).map(|i| (i * 7 % 251) as u8).collect();
    c.memcpy_htod(src, &bytes).unwrap();
    let mut want = vec![0u8; dst_len as usize];
    let check = |want: &[u8]| {
        let mut got = vec![0u8; dst_len as usize];
        c.memcpy_dtoh(&mut got, dst).unwrap();
        assert_eq!(got, want);
    };

    // 2 slices of 3 rows of 32 bytes: from slice 1, row 1, byte 8 of the
    // source to slice 0, row 2, byte 4 of the destination.
    let first = shape((dst + 2 * 48 + 4, 48, 5), (src + (4 + 1) * 64 + 8, 64, 4), (32, 3, 2));
    let graph = c.graph_create(g.ctx).unwrap();
    let zero = c.graph_add_memset_node(graph, &[], crate::graphs::memset_head(g.ctx.0, dst, 0, (dst_len / 4) as usize)).unwrap();
    let node = c.graph_add_copy_node(graph, &[zero], g.ctx, first).unwrap();
    assert_eq!(c.graph_node_params(node).unwrap(), NodeParams::Pitched(first));
    let exec = c.graph_instantiate(graph, 0).unwrap();
    c.graph_launch(exec, s, false).unwrap();
    c.stream_synchronize(s).unwrap();
    on_cpu(&mut want, dst, &bytes, src, &first);
    check(&want);

    // Set in the graph (an executable graph's copy stays one-dimensional,
    // as the driver's): 4 rows of 16 bytes of slice 2, run by a new
    // executable graph.
    let second = shape((dst + 48 * 5 + 16, 48, 5), (src + 2 * 4 * 64, 64, 4), (16, 4, 1));
    assert_eq!(code(c.graph_copy_node_set(Some(exec), node, g.ctx, second)), CuResult::INVALID_VALUE);
    c.graph_copy_node_set(None, node, g.ctx, second).unwrap();
    assert_eq!(c.graph_node_params(node).unwrap(), NodeParams::Pitched(second));
    c.graph_exec_destroy(exec).unwrap();
    let exec = c.graph_instantiate(graph, 0).unwrap();
    c.graph_launch(exec, s, false).unwrap();
    c.stream_synchronize(s).unwrap();
    want.fill(0);
    on_cpu(&mut want, dst, &bytes, src, &second);
    check(&want);

    // Refused: the last row past the destination's end (a row, a slice),
    // rows that overlap (a pitch under the width, on either side), slices
    // that overlap (fewer rows per slice than rows copied), no rows.
    for bad in [
        shape((dst + 48 * 9 + 32, 48, 5), (src, 64, 4), (32, 1, 1)),
        shape((dst, 48, 5), (src, 64, 4), (32, 3, 3)),
        shape((dst, 16, 5), (src, 64, 4), (32, 2, 1)),
        shape((dst, 48, 5), (src, 16, 4), (32, 2, 1)),
        shape((dst, 48, 5), (src, 64, 2), (32, 3, 2)),
        shape((dst, 48, 5), (src, 64, 4), (32, 0, 1)),
    ] {
        assert_eq!(code(c.graph_add_copy_node(graph, &[], g.ctx, bad)), CuResult::INVALID_VALUE, "{bad:?}");
        assert_eq!(code(c.graph_copy_node_set(None, node, g.ctx, bad)), CuResult::INVALID_VALUE, "{bad:?}");
    }
    c.graph_exec_destroy(exec).unwrap();
    c.graph_destroy(graph).unwrap();
    for d in [src, dst] {
        c.mem_free(d).unwrap();
    }
}
