//! The backend's request decoder, fed what a guest can put in a ring record
//! or a TCP frame: a header and a payload.
//!
//! The input goes through exactly what `session_loop` does before a request
//! reaches a handler (`Header::parse`, then `Request::decode` on the rest),
//! and once more with the header's `payload_len` set to the payload's real
//! length, so that every input reaches the body decoders of its opcode.
//! Whatever decodes must re-encode to the very bytes it came from and
//! decode again to the same value (the protocol is canonical). The reply
//! decoders with lists and names (the frontend's side) and the decoder of
//! a link's description get the payload too.

#![no_main]

use libfuzzer_sys::fuzz_target;
use pvgpu_ring::proto::{
    BytesRep, CaptureInfoRep, DevicePropsRep, FunctionRep, HEADER_LEN, Header, IdsRep, LinkSpec, MirrorPullRep, NamesRep, Opcode, Reply, Request,
};
use zerocopy::IntoBytes;

/// Decodes `payload` under `h` and, if it decodes, checks it is canonical.
fn decode_and_round_trip(h: &Header, payload: &[u8]) {
    let Ok(req) = Request::decode(h, payload) else { return };
    assert_eq!(req.opcode() as u16, h.opcode.get(), "decoded under another opcode");
    let mut again = Vec::with_capacity(payload.len());
    req.encode(&mut again);
    assert_eq!(again, payload, "{req:?} re-encodes to other bytes");
    let h2 = Header::request(req.opcode(), h.request_id.get(), h.flags.get(), again.len());
    assert_eq!(Request::decode(&h2, &again).as_ref(), Ok(&req), "re-encoded request decodes differently");
    // What the backend does with a request besides dispatching it.
    let _ = req.opcode().reports_pending();
    if let Request::LaunchKernelEx(l) = &req {
        let _ = (l.attrs(), l.params());
    }
    // A link's description, as the backend reads it once copied out.
    if let Request::LinkModule(l) = &req {
        if let Ok(spec) = LinkSpec::decode(l.blob) {
            assert_eq!(spec.encode(), l.blob, "{spec:?} re-encodes to other bytes");
        }
    }
}

/// A reply decoder with a list or names: whatever decodes re-encodes to the
/// same bytes.
fn reply_round_trip<R: Reply + std::fmt::Debug>(op: Opcode, payload: &[u8]) {
    if let Ok(r) = R::decode(op, payload) {
        let mut again = Vec::new();
        r.encode(&mut again);
        assert_eq!(again, payload, "{r:?} re-encodes to other bytes");
    }
}

fuzz_target!(|data: &[u8]| {
    // As session_loop: the header, then whatever follows it.
    if let Ok(h) = Header::parse(data) {
        assert_eq!(h.as_bytes(), &data[..HEADER_LEN], "header fields moved");
        let payload = &data[HEADER_LEN.min(data.len())..];
        decode_and_round_trip(&h, payload);
        // The same payload with an honest length: the body decoders run.
        let mut honest = h;
        honest.payload_len = (payload.len() as u32).into();
        decode_and_round_trip(&honest, payload);
        reply_round_trip::<DevicePropsRep>(Opcode::DeviceGetProperties, payload);
        reply_round_trip::<FunctionRep>(Opcode::ModuleGetFunction, payload);
        reply_round_trip::<NamesRep>(Opcode::ModuleFunctionNames, payload);
        reply_round_trip::<CaptureInfoRep>(Opcode::StreamCaptureInfo, payload);
        reply_round_trip::<IdsRep>(Opcode::GraphNodes, payload);
        reply_round_trip::<BytesRep>(Opcode::GraphDot, payload);
        reply_round_trip::<MirrorPullRep>(Opcode::HostMirrorPull, payload);
        // A bare link description too (the backend reads those from the
        // data area, without a request around them).
        if let Ok(spec) = LinkSpec::decode(payload) {
            assert_eq!(spec.encode(), payload, "{spec:?} re-encodes to other bytes");
        }
    }
});
