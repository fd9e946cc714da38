//! Strategies for the requests of capture and graphs, and their replies'
//! round trips.

use super::arb;
use crate::proto::*;
use proptest::prelude::*;
use zerocopy::IntoBytes;

type Arb = BoxedStrategy<(Opcode, Vec<u8>)>;

fn ids() -> impl Strategy<Value = Vec<u64>> {
    proptest::collection::vec(any::<u64>(), 0..40)
}

/// Memory operations, each of a known kind.
fn mem_ops() -> impl Strategy<Value = Vec<MemOp>> {
    proptest::collection::vec((arb::<MemOp>(), 1u32..=6), 0..8).prop_map(|v| {
        v.into_iter()
            .map(|(mut o, k)| {
                o.kind = k.into();
                o
            })
            .collect()
    })
}

/// A node-adding request of head `H`: `set` writes the dependency count.
fn node_request<H, F>(op: Opcode, set: F) -> Arb
where
    H: zerocopy::FromBytes + zerocopy::KnownLayout + zerocopy::Immutable + IntoBytes + std::fmt::Debug + Clone + 'static,
    F: Fn(&mut H, u32) + Clone + Send + Sync + 'static,
{
    (arb::<H>(), ids())
        .prop_map(move |(mut h, deps)| {
            set(&mut h, deps.len() as u32);
            let mut p = h.as_bytes().to_vec();
            deps.iter().for_each(|d| p.extend_from_slice(&d.to_le_bytes()));
            (op, p)
        })
        .boxed()
}

/// Every request of the `graph` family.
pub(super) fn requests() -> Vec<Arb> {
    macro_rules! fixed {
        ($($t:ident),*) => {
            vec![$( arb::<$t>().prop_map(|r| (Opcode::$t, r.as_bytes().to_vec())).boxed() ),*]
        };
    }
    let mut all = fixed!(
        StreamEndCapture,
        StreamCaptureInfo,
        GraphCreate,
        GraphDestroy,
        GraphClone,
        GraphEdges,
        GraphNodeInfo,
        GraphNodeDestroy,
        GraphDot,
        GraphInstantiate,
        GraphExecDestroy,
        GraphExecUpdate,
        GraphExecMemsetSet,
        GraphExecMemcpySet,
        GraphExecChildSet,
        HostCallWait,
        HostCallDone,
        MemNodeParams,
        GraphNodeParams,
        GraphEventNodeSet,
        GraphNodeEnabled,
        GraphNodeFindInClone,
        GraphCopyNodeSet,
        GraphDeviceHandle
    );
    all.push(
        (arb::<GraphMemAttr>(), 0u32..=3, 0u32..=2)
            .prop_map(|(mut r, a, op)| {
                r.attr = a.into();
                r.op = op.into();
                (Opcode::GraphMemAttr, r.as_bytes().to_vec())
            })
            .boxed(),
    );
    all.push(node_request::<GraphMemHead, _>(Opcode::GraphAddMemNode, |h, n| h.dep_count = n.into()));
    all.push(
        (arb::<HostNodeParams>(), 0u32..=2)
            .prop_map(|(mut r, op)| {
                r.op = op.into();
                (Opcode::HostNodeParams, r.as_bytes().to_vec())
            })
            .boxed(),
    );
    all.push(
        (arb::<LaunchHostFunc>(), 0u32..=1)
            .prop_map(|(mut r, f)| {
                r.callback = f.into();
                (Opcode::LaunchHostFunc, r.as_bytes().to_vec())
            })
            .boxed(),
    );
    all.push(node_request::<GraphHostHead, _>(Opcode::GraphAddHostNode, |h, n| h.dep_count = n.into()));
    all.push(node_request::<GraphCondHead, _>(Opcode::GraphAddCondNode, |h, n| h.dep_count = n.into()));
    all.push(
        (arb::<StreamMemOpsHead>(), mem_ops())
            .prop_map(|(mut h, ops)| {
                h.count = (ops.len() as u32).into();
                let mut p = vec![];
                StreamMemOps { head: h, ops: &ops }.encode(&mut p);
                (Opcode::StreamMemOps, p)
            })
            .boxed(),
    );
    all.push(
        (arb::<GraphMemOpHead>(), ids(), mem_ops())
            .prop_map(|(mut h, deps, ops)| {
                h.count = (ops.len() as u32).into();
                h.dep_count = (deps.len() as u32).into();
                let (mut buf, mut p) = (vec![], vec![]);
                GraphAddMemOpNode::new(h, &deps, &ops, &mut buf).encode(&mut p);
                (Opcode::GraphAddMemOpNode, p)
            })
            .boxed(),
    );
    all.push(
        (arb::<GraphMemOpSetHead>(), mem_ops())
            .prop_map(|(mut h, ops)| {
                h.count = (ops.len() as u32).into();
                let mut p = vec![];
                GraphMemOpNodeSet { head: h, ops: &ops }.encode(&mut p);
                (Opcode::GraphMemOpNodeSet, p)
            })
            .boxed(),
    );
    all.push(
        (arb::<GraphCondHandle>(), 0u32..=1)
            .prop_map(|(mut r, f)| {
                r.flags = f.into();
                (Opcode::GraphCondHandle, r.as_bytes().to_vec())
            })
            .boxed(),
    );
    all.push(
        (arb::<StreamBeginCapture>(), 0u32..=2)
            .prop_map(|(mut r, m)| {
                r.mode = m.into();
                (Opcode::StreamBeginCapture, r.as_bytes().to_vec())
            })
            .boxed(),
    );
    all.push(
        (arb::<CaptureModeExchange>(), 0u32..=2)
            .prop_map(|(mut r, m)| {
                r.mode = m.into();
                (Opcode::CaptureModeExchange, r.as_bytes().to_vec())
            })
            .boxed(),
    );
    all.push(
        (arb::<GraphNodes>(), 0u32..=1)
            .prop_map(|(mut r, f)| {
                r.roots = f.into();
                (Opcode::GraphNodes, r.as_bytes().to_vec())
            })
            .boxed(),
    );
    all.push(
        (arb::<GraphNodeEdges>(), 0u32..=1)
            .prop_map(|(mut r, f)| {
                r.dependents = f.into();
                (Opcode::GraphNodeEdges, r.as_bytes().to_vec())
            })
            .boxed(),
    );
    all.push(
        (arb::<GraphLaunch>(), 0u32..=1)
            .prop_map(|(mut r, f)| {
                r.upload = f.into();
                (Opcode::GraphLaunch, r.as_bytes().to_vec())
            })
            .boxed(),
    );
    all.push(
        (arb::<GraphNodeEnable>(), 0u32..=1)
            .prop_map(|(mut r, f)| {
                r.enabled = f.into();
                (Opcode::GraphNodeEnable, r.as_bytes().to_vec())
            })
            .boxed(),
    );
    all.push(
        (arb::<GraphEdgesHead>(), ids(), 0u32..=1)
            .prop_map(|(mut h, v, remove)| {
                let n = v.len() / 2;
                h.count = (n as u32).into();
                h.remove = remove.into();
                let mut buf = vec![];
                let mut p = vec![];
                GraphEdgesChange::new(h, &v[..n], &v[n..2 * n], &mut buf).encode(&mut p);
                (Opcode::GraphEdgesChange, p)
            })
            .boxed(),
    );
    for op in [Opcode::GraphAddKernelNode, Opcode::GraphKernelNodeSet, Opcode::GraphExecKernelNodeSet] {
        all.push(
            (arb::<GraphKernelHead>(), ids(), proptest::collection::vec(any::<u8>(), 0..=256))
                .prop_map(move |(mut h, deps, params)| {
                    h.dep_count = (deps.len() as u32).into();
                    h.param_len = (params.len() as u32).into();
                    let mut buf = vec![];
                    let mut p = vec![];
                    match op {
                        Opcode::GraphAddKernelNode => GraphAddKernelNode::new(h, &deps, &params, &mut buf).encode(&mut p),
                        Opcode::GraphKernelNodeSet => GraphKernelNodeSet::new(h, &deps, &params, &mut buf).encode(&mut p),
                        _ => GraphExecKernelNodeSet::new(h, &deps, &params, &mut buf).encode(&mut p),
                    }
                    (op, p)
                })
                .boxed(),
        );
    }
    all.push(
        (arb::<KernelNodeAttr>(), 0u32..=2)
            .prop_map(|(mut r, op)| {
                r.op = op.into();
                (Opcode::KernelNodeAttr, r.as_bytes().to_vec())
            })
            .boxed(),
    );
    all.push(node_request::<GraphMemcpyHead, _>(Opcode::GraphAddMemcpyNode, |h, n| h.dep_count = n.into()));
    all.push(node_request::<GraphCopyHead, _>(Opcode::GraphAddCopyNode, |h, n| h.dep_count = n.into()));
    all.push(node_request::<GraphMemsetHead, _>(Opcode::GraphAddMemsetNode, |h, n| h.dep_count = n.into()));
    all.push(node_request::<GraphSimpleHead, _>(Opcode::GraphAddNode, |h, n| h.dep_count = n.into()));
    all.push(node_request::<UpdateCaptureDepsHead, _>(Opcode::StreamUpdateCaptureDeps, |h, n| h.dep_count = n.into()));
    all.push(node_request::<CaptureToGraphHead, _>(Opcode::StreamBeginCaptureToGraph, |h, n| {
        h.dep_count = n.into();
        h.mode = (h.mode.get() % 3).into();
    }));
    all
}

proptest! {
    /// The replies of capture and graphs decode from their own encoding
    /// to values that encode the same way.
    #[test]
    fn graph_replies_round_trip(
        info in (arb::<CaptureInfoHead>(), ids()),
        list in ids(),
        bytes in proptest::collection::vec(any::<u8>(), 0..300),
        node in arb::<NodeInfoRep>(),
        update in arb::<ExecUpdateRep>(),
        host in arb::<HostNodeRep>(),
        exec in arb::<InstantiateRep>(),
        mem_node in arb::<GraphMemNodeRep>(),
        mem in arb::<MemNodeRep>(),
        attr in arb::<AttrValueRep>(),
        params in (arb::<NodeParamsHead>(), proptest::collection::vec(any::<u8>(), 0..64)),
    ) {
        let params = NodeParamsRep { head: NodeParamsHead { param_len: (params.1.len() as u32).into(), ..params.0 }, params: params.1 };
        prop_assert_eq!(NodeParamsRep::decode(Opcode::GraphNodeParams, &encoded(&params)), Ok(params));
        let info = CaptureInfoRep { head: CaptureInfoHead { dep_count: (info.1.len() as u32).into(), ..info.0 }, deps: info.1 };
        prop_assert_eq!(CaptureInfoRep::decode(Opcode::StreamCaptureInfo, &encoded(&info)), Ok(info));
        let list = IdsRep { ids: list };
        prop_assert_eq!(IdsRep::decode(Opcode::GraphNodes, &encoded(&list)), Ok(list));
        let bytes = BytesRep { bytes };
        prop_assert_eq!(BytesRep::decode(Opcode::GraphDot, &encoded(&bytes)), Ok(bytes));
        prop_assert_eq!(NodeInfoRep::decode(Opcode::GraphNodeInfo, &encoded(&node)), Ok(node));
        prop_assert_eq!(ExecUpdateRep::decode(Opcode::GraphExecUpdate, &encoded(&update)), Ok(update));
        prop_assert_eq!(HostNodeRep::decode(Opcode::HostNodeParams, &encoded(&host)), Ok(host));
        prop_assert_eq!(InstantiateRep::decode(Opcode::GraphInstantiate, &encoded(&exec)), Ok(exec));
        prop_assert_eq!(GraphMemNodeRep::decode(Opcode::GraphAddMemNode, &encoded(&mem_node)), Ok(mem_node));
        prop_assert_eq!(MemNodeRep::decode(Opcode::MemNodeParams, &encoded(&mem)), Ok(mem));
        prop_assert_eq!(AttrValueRep::decode(Opcode::KernelNodeAttr, &encoded(&attr)), Ok(attr));
    }
}

fn encoded<R: Reply>(r: &R) -> Vec<u8> {
    let mut v = vec![];
    r.encode(&mut v);
    v
}
