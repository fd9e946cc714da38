use super::*;
use proptest::prelude::*;
use zerocopy::IntoBytes;

mod array;
mod graph;

fn msg(op: Opcode, fixed: &[u8], tail: &[u8]) -> (Header, Vec<u8>) {
    let mut p = fixed.to_vec();
    p.extend_from_slice(tail);
    (Header::request(op, 7, FLAG_REPLY, p.len()), p)
}

#[test]
fn ctx_info_round_trips_through_its_reply() {
    let i = CtxInfo { api_version: 13000, flags: 0x9, least_priority: 0, greatest_priority: -5 };
    let rep = CtxInfoRep::from(i);
    assert_eq!(rep.as_bytes(), [&13000u32.to_le_bytes()[..], &9u32.to_le_bytes(), &0i32.to_le_bytes(), &(-5i32).to_le_bytes()].concat());
    assert_eq!(CtxInfo::from(rep), i);
}

#[test]
fn header_round_trip() {
    let h = Header::request(Opcode::LaunchKernel, 42, FLAG_REPLY, 100);
    let b = h.as_bytes().to_vec();
    assert_eq!(b.len(), HEADER_LEN);
    assert_eq!(Header::parse(&b).unwrap(), h);
    assert!(h.wants_reply());
    let r = h.reply(crate::CuResult::NOT_FOUND, 0);
    assert_eq!(r.request_id.get(), 42);
    assert_eq!(r.status.get(), 500);
    assert_eq!(r.flags.get(), FLAG_IS_REPLY);
}

#[test]
fn unknown_opcode_is_an_error() {
    let mut h = Header::request(Opcode::Nop, 1, 0, 0);
    h.opcode = 0xBEEF.into();
    assert_eq!(Request::decode(&h, &[]), Err(DecodeError::UnknownOpcode(0xBEEF)));
    h.opcode = 0.into();
    assert_eq!(Request::decode(&h, &[]), Err(DecodeError::UnknownOpcode(0)));
}

#[test]
fn every_opcode_round_trips_its_number() {
    for &op in Opcode::ALL {
        assert_eq!(Opcode::try_from(op as u16), Ok(op));
    }
}

#[test]
fn output_for_standard_error_is_output_with_its_status() {
    let (out, err) = (Header::output(5), Header::output_stderr(5));
    assert!(out.is_output() && !out.is_stderr());
    assert!(err.is_output() && err.is_stderr(), "a frontend that knows only output prints it");
    assert_eq!((err.payload_len.get(), err.flags.get()), (5, out.flags.get()));
    let mut reply = Header::request(Opcode::Nop, 1, 0, 0).reply(CuResult(OUTPUT_STDERR), 0);
    assert!(!reply.is_stderr(), "a reply with that status is not output");
    reply.flags = out.flags;
    assert!(reply.is_stderr());
}

#[test]
fn wrong_version_is_rejected() {
    let mut h = Header::request(Opcode::Nop, 1, 0, 0);
    h.version = 2.into();
    assert_eq!(Request::decode(&h, &[]), Err(DecodeError::Version(2)));
    assert_eq!(Header::parse(h.as_bytes()), Err(DecodeError::Version(2)));
}

#[test]
fn lengths_must_be_exact() {
    let r = MemAlloc { ctx: 1.into(), size: 4096.into() };
    let (h, p) = msg(Opcode::MemAlloc, r.as_bytes(), &[]);
    assert_eq!(Request::decode(&h, &p), Ok(Request::MemAlloc(r)));
    let (h, p) = msg(Opcode::MemAlloc, r.as_bytes(), &[0]);
    assert!(matches!(Request::decode(&h, &p), Err(DecodeError::Length { .. })));
    let (h, p) = msg(Opcode::MemAlloc, &r.as_bytes()[..15], &[]);
    assert!(matches!(Request::decode(&h, &p), Err(DecodeError::Length { .. })));
    let (h, p) = msg(Opcode::Nop, &[1], &[]);
    assert!(matches!(Request::decode(&h, &p), Err(DecodeError::Length { .. })));
}

#[test]
fn payload_len_must_match_the_bytes() {
    let (mut h, p) = msg(Opcode::Nop, &[], &[]);
    h.payload_len = 4.into();
    assert_eq!(Request::decode(&h, &p), Err(DecodeError::Truncated));
}

#[test]
fn names_are_checked() {
    let r = SymbolHead { module: 3.into(), name_len: 7.into(), reserved: 0.into() };
    let (h, p) = msg(Opcode::ModuleGetFunction, r.as_bytes(), b"mat_sum");
    assert_eq!(Request::decode(&h, &p), Ok(Request::ModuleGetFunction(ModuleGetFunction::new(3, "mat_sum"))));
    let (h, p) = msg(Opcode::ModuleGetFunction, r.as_bytes(), b"mat\0sum");
    assert_eq!(Request::decode(&h, &p), Err(DecodeError::BadName));
    let (h, p) = msg(Opcode::ModuleGetFunction, r.as_bytes(), b"mat_su");
    assert!(matches!(Request::decode(&h, &p), Err(DecodeError::Length { .. })));
    let r0 = SymbolHead { module: 3.into(), name_len: 0.into(), reserved: 0.into() };
    let (h, p) = msg(Opcode::ModuleGetGlobal, r0.as_bytes(), b"");
    assert_eq!(Request::decode(&h, &p), Err(DecodeError::BadName));
}

#[test]
fn inline_data_must_match_its_declared_length() {
    let r = HtoDHead { dst: 0x1000.into(), stream: 0.into(), flags: 0.into(), reserved: 0.into(), data: DataRef::inline(4) };
    let (h, p) = msg(Opcode::MemcpyHtoD, r.as_bytes(), &[1, 2, 3, 4]);
    assert_eq!(Request::decode(&h, &p), Ok(Request::MemcpyHtoD(MemcpyHtoD { head: r, data: &[1, 2, 3, 4] })));
    let (h, p) = msg(Opcode::MemcpyHtoD, r.as_bytes(), &[1, 2, 3]);
    assert!(matches!(Request::decode(&h, &p), Err(DecodeError::Length { .. })));
    let a = HtoDHead { data: DataRef::area(4096, 1 << 20), ..r };
    let (h, p) = msg(Opcode::MemcpyHtoD, a.as_bytes(), &[]);
    assert_eq!(Request::decode(&h, &p), Ok(Request::MemcpyHtoD(MemcpyHtoD { head: a, data: &[] })));
    let bad = HtoDHead { data: DataRef { loc: 9.into(), ..DataRef::inline(0) }, ..r };
    let (h, p) = msg(Opcode::MemcpyHtoD, bad.as_bytes(), &[]);
    assert_eq!(Request::decode(&h, &p), Err(DecodeError::BadDataRef(9)));
}

#[test]
fn memset_element_size_is_checked() {
    let r = Memset { dptr: 1.into(), count: 1.into(), value: 0.into(), elem_size: 3.into(), stream: 0.into() };
    let (h, p) = msg(Opcode::Memset, r.as_bytes(), &[]);
    assert_eq!(Request::decode(&h, &p), Err(DecodeError::BadField("elem_size")));
}

#[test]
fn launch_params_are_bounded() {
    let r = LaunchHead { param_len: ((MAX_PARAM_BYTES + 1) as u32).into(), ..Default::default() };
    let (h, p) = msg(Opcode::LaunchKernel, r.as_bytes(), &[]);
    assert!(matches!(Request::decode(&h, &p), Err(DecodeError::TooLarge(_))));
}

#[test]
fn reply_lists_decode() {
    let f = FunctionHead { function: 9.into(), param_count: 2.into(), param_bytes: 16.into() };
    let mut p = f.as_bytes().to_vec();
    for (o, s) in [(0u32, 8u32), (8, 4)] {
        p.extend_from_slice(ParamInfo { offset: o.into(), size: s.into() }.as_bytes());
    }
    let g = FunctionRep::decode(Opcode::ModuleGetFunction, &p).unwrap();
    assert_eq!(g.head, f);
    assert_eq!(g.params.len(), 2);
    assert_eq!(g.params[1].offset.get(), 8);
    assert!(FunctionRep::decode(Opcode::ModuleGetFunction, &p[..p.len() - 1]).is_err());
    let too_many = FunctionHead { param_count: ((MAX_PARAMS + 1) as u32).into(), ..f };
    assert!(matches!(FunctionRep::decode(Opcode::ModuleGetFunction, too_many.as_bytes()), Err(DecodeError::TooLarge(_))));
}

#[test]
fn empty_replies_must_be_empty() {
    assert_eq!(<() as Reply>::decode(Opcode::Nop, &[]), Ok(()));
    assert!(<() as Reply>::decode(Opcode::Nop, &[0]).is_err());
}

#[test]
fn fixed_strings() {
    let a: [u8; 8] = fixed_str("cuda");
    assert_eq!(str_from_fixed(&a), "cuda");
    let b: [u8; 4] = fixed_str("toolong");
    assert_eq!(str_from_fixed(&b), "too");
}

/// Any value of a fixed-layout struct: its bytes drawn at random.
fn arb<T: zerocopy::FromBytes + zerocopy::KnownLayout + zerocopy::Immutable + std::fmt::Debug>() -> impl Strategy<Value = T> {
    proptest::collection::vec(any::<u8>(), core::mem::size_of::<T>()).prop_map(|b| T::read_from_bytes(&b).expect("size"))
}

/// A data reference that decodes: inline of `inline_len` bytes, or anywhere
/// in a data area.
fn arb_dref(inline_len: usize) -> impl Strategy<Value = DataRef> {
    prop_oneof![Just(DataRef::inline(inline_len)), (any::<u64>(), 0..=MAX_PAYLOAD).prop_map(|(o, l)| DataRef::area(o, l)),]
}

fn arb_name() -> impl Strategy<Value = String> {
    "[A-Za-z_][A-Za-z0-9_$.]{0,80}"
}

/// Every request, as an owned payload of its opcode. Tails follow their
/// heads' declarations; closed fields take values of their domain.
fn arb_request() -> impl Strategy<Value = (Opcode, Vec<u8>)> {
    macro_rules! fixed {
        ($($t:ident),*) => {
            vec![$( arb::<$t>().prop_map(|r| (Opcode::$t, r.as_bytes().to_vec())).boxed() ),*]
        };
    }
    let mut all = fixed!(
        Hello,
        Goodbye,
        Nop,
        Init,
        DriverGetVersion,
        DeviceGetCount,
        DataAreaDevice,
        AreaPinOnDemand,
        DeviceStatus,
        DeviceGet,
        DeviceGetProperties,
        DeviceGetAttribute,
        PrimaryCtxRetain,
        PrimaryCtxRelease,
        CtxCreate,
        CtxDestroy,
        CtxSynchronize,
        CtxGetInfo,
        CtxLimit,
        ModuleUnload,
        ModuleLoadCached,
        ModuleFunctionNames,
        FuncGetAttribute,
        FuncSetAttribute,
        MemAlloc,
        MemFree,
        MemGetInfo,
        MemcpyDtoD,
        MemAllocAsync,
        MemFreeAsync,
        MemPoolAttribute,
        MemPoolAccess,
        MemPoolCreate,
        MemPoolDestroy,
        MemAllocFromPool,
        MemPoolAttributeOf,
        MemPoolAccessOf,
        MemPoolTrim,
        MemAddressReserve,
        MemAddressFree,
        MemCreate,
        MemRelease,
        MemMap,
        MemUnmap,
        StreamCreate,
        StreamDestroy,
        StreamSynchronize,
        StreamQuery,
        StreamWaitEvent,
        EventCreate,
        EventRecord,
        EventQuery,
        EventSynchronize,
        EventElapsedTime,
        EventDestroy,
        HostMirrorUnmap,
        HostMirrorPull,
        LinkRead,
        LinkDestroy
    );
    all.push(
        (arb::<HostMirrorMap>(), 0u32..=1)
            .prop_map(|(mut r, p)| {
                r.pageable = p.into();
                (Opcode::HostMirrorMap, r.as_bytes().to_vec())
            })
            .boxed(),
    );
    all.push(
        (arb::<HostFnEvent>(), 0u32..=1)
            .prop_map(|(mut r, d)| {
                r.destroy = d.into();
                (Opcode::HostFnEvent, r.as_bytes().to_vec())
            })
            .boxed(),
    );
    all.push(
        (any::<u64>(), proptest::collection::vec(any::<u8>(), 0..300), any::<bool>())
            .prop_flat_map(|(ctx, blob, inline)| {
                let d = if inline { Just(DataRef::inline(blob.len())).boxed() } else { arb_dref(blob.len()).boxed() };
                d.prop_map(move |dref| {
                    let tail = if matches!(dref.location(), Ok(DataLoc::Inline)) { blob.clone() } else { vec![] };
                    let mut p = vec![];
                    LinkModule { head: LinkModuleHead { ctx: ctx.into(), blob: dref }, blob: &tail }.encode(&mut p);
                    (Opcode::LinkModule, p)
                })
            })
            .boxed(),
    );
    all.push(
        (arb::<MirrorWriteHead>(), proptest::collection::vec(any::<u8>(), 0..300))
            .prop_map(|(mut h, data)| {
                h.len = (data.len() as u64).into();
                let mut p = vec![];
                HostMirrorWrite { head: h, data: &data }.encode(&mut p);
                (Opcode::HostMirrorWrite, p)
            })
            .boxed(),
    );
    all.push(
        (arb::<Memset>(), prop::sample::select(vec![1u32, 2, 4]))
            .prop_map(|(mut r, e)| {
                r.elem_size = e.into();
                (Opcode::Memset, r.as_bytes().to_vec())
            })
            .boxed(),
    );
    all.push(
        (arb::<MemGranularity>(), 0u32..=1)
            .prop_map(|(mut r, o)| {
                r.option = o.into();
                (Opcode::MemGranularity, r.as_bytes().to_vec())
            })
            .boxed(),
    );
    all.push(
        (arb::<MemSetAccess>(), prop::sample::select(vec![0u32, 1, 3]))
            .prop_map(|(mut r, f)| {
                r.flags = f.into();
                (Opcode::MemSetAccess, r.as_bytes().to_vec())
            })
            .boxed(),
    );
    all.push(
        (arb::<Occupancy>(), 0u32..=2)
            .prop_map(|(mut r, k)| {
                r.kind = k.into();
                (Opcode::Occupancy, r.as_bytes().to_vec())
            })
            .boxed(),
    );
    all.push(
        (arb::<MemcpyDtoH>(), arb_dref(0), 0..=MAX_PAYLOAD)
            .prop_map(|(mut r, d, len)| {
                r.data = DataRef { len: (len as u64).into(), ..d };
                (Opcode::MemcpyDtoH, r.as_bytes().to_vec())
            })
            .boxed(),
    );
    let bytes = || proptest::collection::vec(any::<u8>(), 0..300);
    all.push(
        (any::<u64>(), bytes(), any::<bool>())
            .prop_flat_map(|(ctx, img, inline)| {
                let d = if inline { Just(DataRef::inline(img.len())).boxed() } else { arb_dref(img.len()).boxed() };
                d.prop_map(move |image| {
                    let tail = if matches!(image.location(), Ok(DataLoc::Inline)) { img.clone() } else { vec![] };
                    let r = ModuleLoad { head: ModuleLoadHead { ctx: ctx.into(), image }, image: &tail };
                    let mut p = vec![];
                    r.encode(&mut p);
                    (Opcode::ModuleLoad, p)
                })
            })
            .boxed(),
    );
    all.push(
        (arb::<HtoDHead>(), bytes(), any::<bool>())
            .prop_map(|(mut h, data, inline)| {
                h.data = if inline { DataRef::inline(data.len()) } else { DataRef::area(h.dst.get(), data.len()) };
                let tail = if inline { &data[..] } else { &[] };
                let mut p = vec![];
                MemcpyHtoD { head: h, data: tail }.encode(&mut p);
                (Opcode::MemcpyHtoD, p)
            })
            .boxed(),
    );
    all.push(
        (arb::<LaunchHead>(), proptest::collection::vec(any::<u8>(), 0..=512))
            .prop_map(|(mut h, params)| {
                h.param_len = (params.len() as u32).into();
                let mut p = vec![];
                LaunchKernel { head: h, params: &params }.encode(&mut p);
                (Opcode::LaunchKernel, p)
            })
            .boxed(),
    );
    all.push(
        (arb::<Memset2D>(), prop::sample::select(vec![1u32, 2, 4]))
            .prop_map(|(mut r, e)| {
                r.elem_size = e.into();
                (Opcode::Memset2D, r.as_bytes().to_vec())
            })
            .boxed(),
    );
    all.push(
        (arb::<TensorMapEncode>(), 0u32..=1, 1u32..=5)
            .prop_map(|(mut r, k, rank)| {
                r.kind = k.into();
                r.rank = rank.into();
                (Opcode::TensorMapEncode, r.as_bytes().to_vec())
            })
            .boxed(),
    );
    all.push(
        (
            arb::<LaunchExHead>(),
            proptest::collection::vec(arb::<LaunchAttr>(), 0..=MAX_LAUNCH_ATTRS),
            proptest::collection::vec(any::<u8>(), 0..=256),
        )
            .prop_map(|(mut h, attrs, params)| {
                h.attr_count = (attrs.len() as u32).into();
                h.param_len = (params.len() as u32).into();
                let tail = [attrs.as_bytes(), &params].concat();
                let mut p = vec![];
                LaunchKernelEx { head: h, tail: &tail }.encode(&mut p);
                (Opcode::LaunchKernelEx, p)
            })
            .boxed(),
    );
    all.push(
        (arb::<OccupancyClustersHead>(), 0u32..=1, proptest::collection::vec(arb::<LaunchAttr>(), 0..=4))
            .prop_map(|(mut h, kind, attrs)| {
                h.kind = kind.into();
                h.attr_count = (attrs.len() as u32).into();
                let mut p = vec![];
                OccupancyClusters { head: h, attrs: &attrs }.encode(&mut p);
                (Opcode::OccupancyClusters, p)
            })
            .boxed(),
    );
    all.push(
        (arb::<Memcpy2DHead>(), 1u32..=3, 0u64..64, 0u64..16, any::<bool>())
            .prop_map(|(mut h, kind, width, height, inline)| {
                h.kind = kind.into();
                h.width = width.into();
                h.height = height.into();
                let n = (width * height) as usize;
                let bytes = vec![7u8; n];
                h.data = if kind == COPY_2D_DTOD {
                    DataRef::default()
                } else if inline {
                    DataRef::inline(n)
                } else {
                    DataRef::area(4096, n)
                };
                let tail: &[u8] = if kind == COPY_2D_HTOD && inline { &bytes } else { &[] };
                let mut p = vec![];
                Memcpy2D { head: h, data: tail }.encode(&mut p);
                (Opcode::Memcpy2D, p)
            })
            .boxed(),
    );
    for get_function in [true, false] {
        all.push(
            (any::<u64>(), arb_name())
                .prop_map(move |(m, name)| {
                    let mut p = vec![];
                    if get_function {
                        ModuleGetFunction::new(m, &name).encode(&mut p);
                        (Opcode::ModuleGetFunction, p)
                    } else {
                        ModuleGetGlobal::new(m, &name).encode(&mut p);
                        (Opcode::ModuleGetGlobal, p)
                    }
                })
                .boxed(),
        );
    }
    all.extend(graph::requests());
    all.extend(array::requests());
    assert_eq!(all.len(), Opcode::ALL.len(), "every opcode has a request strategy");
    prop::strategy::Union::new(all)
}

/// Encodes a reply and decodes it again, returning both encodings.
fn reply_round_trip<R: Reply>(op: Opcode, r: &R) -> (Vec<u8>, Vec<u8>) {
    let mut a = vec![];
    r.encode(&mut a);
    let back = R::decode(op, &a).expect("a reply decodes from its own encoding");
    let mut b = vec![];
    back.encode(&mut b);
    (a, b)
}

proptest! {
    /// Every well-formed request decodes to a value that encodes to the
    /// same bytes, under its own opcode.
    #[test]
    fn every_request_round_trips((op, payload) in arb_request()) {
        let h = Header::request(op, 9, FLAG_REPLY, payload.len());
        let req = Request::decode(&h, &payload).expect("a well-formed request decodes");
        prop_assert_eq!(req.opcode(), op);
        let mut again = vec![];
        req.encode(&mut again);
        prop_assert_eq!(&again, &payload);
        prop_assert_eq!(Request::decode(&h, &again), Ok(req));
    }

    /// Whatever bytes arrive under whatever opcode, decoding either fails or
    /// yields a request that encodes back to exactly those bytes.
    #[test]
    fn decoding_arbitrary_bytes_is_canonical(opcode in 0u16..128, payload in proptest::collection::vec(any::<u8>(), 0..400)) {
        let mut h = Header::request(Opcode::Nop, 1, FLAG_REPLY, payload.len());
        h.opcode = opcode.into();
        if let Ok(req) = Request::decode(&h, &payload) {
            let mut again = vec![];
            req.encode(&mut again);
            prop_assert_eq!(again, payload);
        }
    }

    /// Every reply decodes from its own encoding to a value that encodes the
    /// same way.
    #[test]
    fn every_reply_round_trips(
        hello in arb::<HelloRep>(), i in arb::<I32Rep>(), u in arb::<U64Rep>(), handle in arb::<HandleRep>(),
        global in arb::<GlobalRep>(), dptr in arb::<DptrRep>(), mem in arb::<MemInfoRep>(), ms in arb::<ElapsedRep>(),
        ctx in arb::<CtxInfoRep>(), occ in arb::<OccupancyRep>(), tmap in arb::<TensorMapRep>(), status in arb::<DeviceStatusRep>(),
        link in arb::<LinkRep>(),
        props in (arb::<DevicePropsHead>(), proptest::collection::vec(arb::<AttrPair>(), 0..200)),
        func in (arb::<FunctionHead>(), proptest::collection::vec(arb::<ParamInfo>(), 0..100)),
    ) {
        macro_rules! check {
            ($op:ident, $v:expr) => {{
                let (a, b) = reply_round_trip(Opcode::$op, &$v);
                prop_assert_eq!(a, b);
            }};
        }
        check!(Hello, hello);
        check!(DeviceGet, i);
        check!(CtxLimit, u);
        check!(StreamCreate, handle);
        check!(ModuleGetGlobal, global);
        check!(MemAlloc, dptr);
        check!(MemGetInfo, mem);
        check!(EventElapsedTime, ms);
        check!(CtxGetInfo, ctx);
        check!(Occupancy, occ);
        check!(TensorMapEncode, tmap);
        check!(DeviceStatus, status);
        check!(LinkModule, link);
        let (mut ph, attrs) = props;
        ph.attr_count = (attrs.len() as u32).into();
        let p = DevicePropsRep { head: ph, attrs };
        check!(DeviceGetProperties, p);
        prop_assert_eq!(DevicePropsRep::decode(Opcode::DeviceGetProperties, &reply_round_trip(Opcode::DeviceGetProperties, &p).0), Ok(p));
        let (mut fh, params) = func;
        fh.param_count = (params.len() as u32).into();
        let f = FunctionRep { head: fh, params };
        check!(ModuleGetFunction, f);
        check!(Nop, ());
        let names = NamesRep { names: vec!["a".into(), "_Z3fooPf".into()], total: 5 };
        check!(ModuleFunctionNames, names);
        check!(ModuleFunctionNames, NamesRep::default());
        let pull = MirrorPullRep { more: true, ranges: vec![(4096, vec![1, 2, 3]), (8192, vec![])] };
        check!(HostMirrorPull, pull);
        prop_assert_eq!(MirrorPullRep::decode(Opcode::HostMirrorPull, &reply_round_trip(Opcode::HostMirrorPull, &pull).0), Ok(pull));
    }
}

/// What the table says of each command.
#[test]
fn the_table_says_who_waits_prints_and_reports() {
    for op in [Opcode::Nop, Opcode::FuncGetAttribute, Opcode::Occupancy, Opcode::CtxLimit, Opcode::DeviceGet] {
        assert!(!op.may_print(), "{op:?}");
    }
    for op in [Opcode::CtxSynchronize, Opcode::StreamSynchronize, Opcode::MemcpyDtoH, Opcode::ModuleUnload, Opcode::Goodbye] {
        assert!(op.may_print(), "{op:?}");
    }
    for op in [Opcode::LaunchKernel, Opcode::MemFree, Opcode::EventRecord, Opcode::MemcpyHtoD] {
        assert!(op.posted(), "{op:?}");
    }
    for op in [Opcode::MemAlloc, Opcode::StreamSynchronize, Opcode::CtxSynchronize] {
        assert!(!op.posted(), "{op:?}");
    }
    let local: Vec<Opcode> = Opcode::ALL.iter().copied().filter(|o| !o.reports_pending()).collect();
    assert_eq!(
        local,
        [
            Opcode::Hello,
            Opcode::Goodbye,
            Opcode::Nop,
            Opcode::DriverGetVersion,
            Opcode::HostMirrorPull,
            Opcode::HostCallWait,
            Opcode::HostCallDone,
            Opcode::Resume,
            Opcode::AreaPinOnDemand
        ]
    );
    assert_eq!(Opcode::TensorMapEncode.handler(), "launch::tensor_map_encode");
    const { assert!(<LaunchKernel<'_> as Command<'_>>::POSTED) };
}
