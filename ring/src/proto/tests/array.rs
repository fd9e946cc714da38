//! Strategies for the requests of arrays and texture objects, and the
//! shapes their decoders refuse.

use super::arb;
use crate::proto::*;
use proptest::prelude::*;
use zerocopy::IntoBytes;

type Arb = BoxedStrategy<(Opcode, Vec<u8>)>;

fn side(kind: u32) -> impl Strategy<Value = ArraySide> {
    arb::<ArraySide>().prop_map(move |mut s| {
        s.kind = kind.into();
        s.reserved = 0.into();
        s
    })
}

/// Sides with an array on at least one of them, never host to host.
fn sides() -> impl Strategy<Value = (u32, u32)> {
    prop::sample::select(vec![
        (SIDE_ARRAY, SIDE_ARRAY),
        (SIDE_ARRAY, SIDE_DEVICE),
        (SIDE_DEVICE, SIDE_ARRAY),
        (SIDE_ARRAY, SIDE_HOST),
        (SIDE_HOST, SIDE_ARRAY),
    ])
}

fn array_copy() -> Arb {
    (arb::<ArrayCopyHead>(), sides(), 0u64..64, 0u64..8, 0u64..4, any::<bool>(), 0u32..=1)
        .prop_flat_map(|(h, (d, s), w, ht, dp, inline, flags)| (Just((h, d, s, w, ht, dp, inline, flags)), side(d), side(s)))
        .prop_map(|((mut h, d, s, w, ht, dp, inline, flags), dst, src)| {
            h.dst = dst;
            h.src = src;
            h.width = w.into();
            h.height = ht.into();
            h.depth = dp.into();
            h.flags = flags.into();
            h.reserved = 0.into();
            let n = (w * ht * dp) as usize;
            let host = d == SIDE_HOST || s == SIDE_HOST;
            h.data = match (host, inline) {
                (false, _) => DataRef::default(),
                (true, true) => DataRef::inline(n),
                (true, false) => DataRef::area(4096, n),
            };
            let bytes = vec![3u8; n];
            let tail: &[u8] = if s == SIDE_HOST && inline { &bytes } else { &[] };
            let mut p = vec![];
            ArrayCopy { head: h, data: tail }.encode(&mut p);
            (Opcode::ArrayCopy, p)
        })
        .boxed()
}

/// One strategy per array and texture-object opcode, stream attributes,
/// and the interprocess opcodes.
pub(super) fn requests() -> Vec<Arb> {
    vec![
        (arb::<ArrayCreate>(), prop::sample::select(vec![1u32, 2, 4]))
            .prop_map(|(mut r, c)| {
                r.channels = c.into();
                (Opcode::ArrayCreate, r.as_bytes().to_vec())
            })
            .boxed(),
        (arb::<ArrayDestroy>(), 0u32..=1)
            .prop_map(|(mut r, m)| {
                r.mipmapped = m.into();
                (Opcode::ArrayDestroy, r.as_bytes().to_vec())
            })
            .boxed(),
        arb::<MipmapLevel>().prop_map(|r| (Opcode::MipmapLevel, r.as_bytes().to_vec())).boxed(),
        array_copy(),
        (arb::<TexObjectCreate>(), 0u32..=1, 0u32..=1, 0u32..=3)
            .prop_map(|(mut r, s, v, k)| {
                r.surface = s.into();
                r.has_view = v.into();
                r.res.kind = k.into();
                (Opcode::TexObjectCreate, r.as_bytes().to_vec())
            })
            .boxed(),
        (arb::<StreamAttr>(), 0u32..=2)
            .prop_map(|(mut r, op)| {
                r.op = op.into();
                (Opcode::StreamAttr, r.as_bytes().to_vec())
            })
            .boxed(),
        arb::<CtxResetL2>().prop_map(|r| (Opcode::CtxResetL2, r.as_bytes().to_vec())).boxed(),
        arb::<IpcGetMemHandle>().prop_map(|r| (Opcode::IpcGetMemHandle, r.as_bytes().to_vec())).boxed(),
        (arb::<IpcOpenMemHandle>(), 0u32..=1)
            .prop_map(|(mut r, f)| {
                r.flags = f.into();
                r.reserved = 0.into();
                (Opcode::IpcOpenMemHandle, r.as_bytes().to_vec())
            })
            .boxed(),
        arb::<IpcCloseMemHandle>().prop_map(|r| (Opcode::IpcCloseMemHandle, r.as_bytes().to_vec())).boxed(),
        arb::<IpcGetEventHandle>().prop_map(|r| (Opcode::IpcGetEventHandle, r.as_bytes().to_vec())).boxed(),
        arb::<IpcOpenEventHandle>().prop_map(|r| (Opcode::IpcOpenEventHandle, r.as_bytes().to_vec())).boxed(),
        (arb::<MemCreateWith>(), 0u32..=3)
            .prop_map(|(mut r, f)| {
                r.flags = f.into();
                r.reserved = 0.into();
                (Opcode::MemCreateWith, r.as_bytes().to_vec())
            })
            .boxed(),
        (arb::<PeerAccess>(), 0u32..=3)
            .prop_map(|(mut r, op)| {
                r.op = op.into();
                r.reserved = 0.into();
                (Opcode::PeerAccess, r.as_bytes().to_vec())
            })
            .boxed(),
        arb::<MemExport>().prop_map(|r| (Opcode::MemExport, r.as_bytes().to_vec())).boxed(),
        arb::<Resume>().prop_map(|r| (Opcode::Resume, r.as_bytes().to_vec())).boxed(),
        arb::<MemImport>().prop_map(|r| (Opcode::MemImport, r.as_bytes().to_vec())).boxed(),
        arb::<MemPoolCreateWith>()
            .prop_map(|mut r| {
                r.reserved = 0.into();
                (Opcode::MemPoolCreateWith, r.as_bytes().to_vec())
            })
            .boxed(),
        arb::<MemPoolExport>().prop_map(|r| (Opcode::MemPoolExport, r.as_bytes().to_vec())).boxed(),
        arb::<MemPoolImport>().prop_map(|r| (Opcode::MemPoolImport, r.as_bytes().to_vec())).boxed(),
        arb::<MemPoolExportPointer>().prop_map(|r| (Opcode::MemPoolExportPointer, r.as_bytes().to_vec())).boxed(),
        arb::<MemPoolImportPointer>().prop_map(|r| (Opcode::MemPoolImportPointer, r.as_bytes().to_vec())).boxed(),
        arb::<PeerCopyOpen>().prop_map(|r| (Opcode::PeerCopyOpen, r.as_bytes().to_vec())).boxed(),
        (arb::<PeerCopyConnect>(), 0u32..=64)
            .prop_map(|(mut r, n)| {
                r.address_len = n.into();
                r.reserved = 0.into();
                r.address = [b'a'; PEER_ADDRESS_MAX];
                (Opcode::PeerCopyConnect, r.as_bytes().to_vec())
            })
            .boxed(),
        arb::<PeerCopySend>().prop_map(|r| (Opcode::PeerCopySend, r.as_bytes().to_vec())).boxed(),
        arb::<PeerCopyReceive>().prop_map(|r| (Opcode::PeerCopyReceive, r.as_bytes().to_vec())).boxed(),
        (arb::<TexObjectDestroy>(), 0u32..=1)
            .prop_map(|(mut r, s)| {
                r.surface = s.into();
                (Opcode::TexObjectDestroy, r.as_bytes().to_vec())
            })
            .boxed(),
    ]
}

fn copy_head(dst: u32, src: u32, w: u64, h: u64, d: u64) -> ArrayCopyHead {
    let mut head = ArrayCopyHead::default();
    head.dst.kind = dst.into();
    head.src.kind = src.into();
    head.width = w.into();
    head.height = h.into();
    head.depth = d.into();
    head
}

#[test]
fn a_copy_without_an_array_or_between_host_sides_is_refused() {
    for (d, s) in [(SIDE_DEVICE, SIDE_DEVICE), (SIDE_HOST, SIDE_DEVICE), (SIDE_HOST, SIDE_HOST), (SIDE_DEVICE, 9)] {
        let mut p = vec![];
        ArrayCopy { head: copy_head(d, s, 4, 1, 1), data: &[] }.encode(&mut p);
        assert!(ArrayCopy::decode(Opcode::ArrayCopy, &p).is_err(), "sides {d} {s}");
    }
}

#[test]
fn a_host_side_must_declare_exactly_its_bytes() {
    let mut h = copy_head(SIDE_ARRAY, SIDE_HOST, 4, 2, 3);
    h.data = DataRef::inline(23);
    let mut p = vec![];
    ArrayCopy { head: h, data: &[0; 23] }.encode(&mut p);
    assert!(ArrayCopy::decode(Opcode::ArrayCopy, &p).is_err());
    h.data = DataRef::inline(24);
    let mut p = vec![];
    ArrayCopy { head: h, data: &[0; 24] }.encode(&mut p);
    assert_eq!(ArrayCopy::decode(Opcode::ArrayCopy, &p).unwrap().data.len(), 24);
    // Sizes whose product overflows are refused, not wrapped.
    let mut h = copy_head(SIDE_HOST, SIDE_ARRAY, u64::MAX, 2, 2);
    h.data = DataRef::area(0, 0);
    let mut p = vec![];
    ArrayCopy { head: h, data: &[] }.encode(&mut p);
    assert!(ArrayCopy::decode(Opcode::ArrayCopy, &p).is_err());
}

#[test]
fn closed_fields_of_arrays_and_objects_are_checked() {
    let mut a = ArrayCreate { channels: 3.into(), ..Default::default() };
    assert!(ArrayCreate::decode(Opcode::ArrayCreate, a.as_bytes()).is_err());
    a.channels = 4.into();
    assert!(ArrayCreate::decode(Opcode::ArrayCreate, a.as_bytes()).is_ok());
    let mut t = TexObjectCreate::default();
    t.res.kind = 4.into();
    assert!(TexObjectCreate::decode(Opcode::TexObjectCreate, t.as_bytes()).is_err());
    t.res.kind = RESOURCE_PITCH2D.into();
    t.surface = 2.into();
    assert!(TexObjectCreate::decode(Opcode::TexObjectCreate, t.as_bytes()).is_err());
}

#[test]
fn mipmap_levels_halve_each_dimension_but_layers() {
    assert_eq!(mipmap_extent([64, 32, 0], 0, 3), [8, 4, 0]);
    assert_eq!(mipmap_extent([64, 1, 16], 0, 5), [2, 1, 1]);
    assert_eq!(mipmap_extent([64, 32, 6], 0x04, 2), [16, 8, 6], "cubemap faces stay");
    assert_eq!(mipmap_extent([64, 32, 9], 0x01, 9), [1, 1, 9], "layers stay, sides end at 1");
    assert_eq!(array_format_bytes(0x20), Some(4));
    assert_eq!(array_format_bytes(0x91), None, "block-compressed formats are not offered");
}
