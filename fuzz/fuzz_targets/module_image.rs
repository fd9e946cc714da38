//! Module images as a guest sends them (`cuModuleLoadData`): PTX, cubin or
//! fatbin bytes.
//!
//! The input goes through what the backend does with an image before a
//! driver sees it (`exec::image::check_bounds`: the fatbin's containers and
//! entries, every compressed payload inflated, every cubin's ELF tables),
//! then through the host executor's parser (`exec::image::parse`: PTX
//! entries and globals, cubin symbols and `.nv.info` attributes, a fatbin's
//! first cubin or PTX), NUL-terminated as the session passes it. The
//! fatbin crate's own API runs too: `parse`, each entry's `decompressed`,
//! and `select` (what the frontend keeps of a fatbin for one GPU) for the
//! compute capability in the input's last byte.
//!
//! Checked besides "no panic": what `parse` returns lies inside the input;
//! an inflated payload has its declared size; what `select` returns is one
//! container of entries copied byte for byte from the input, which parses
//! again to those entries.

#![no_main]

use libfuzzer_sys::fuzz_target;
use pvgpu_backend::exec::image;

/// Whether `inner` lies inside `outer`.
fn within(inner: &[u8], outer: &[u8]) -> bool {
    let (o, i) = (outer.as_ptr_range(), inner.as_ptr_range());
    inner.is_empty() || (o.start <= i.start && i.end <= o.end)
}

fn fatbin_api(data: &[u8]) {
    let Ok(fat) = pvgpu_fatbin::parse(data) else { return };
    assert!(fat.len <= data.len() && fat.containers >= 1);
    for e in &fat.entries {
        assert!(within(e.raw, data) && within(e.payload, data), "entry outside the image");
        if let Ok(p) = e.decompressed() {
            if e.compressed() {
                assert_eq!(p.len() as u64, e.size, "inflated to another size than declared");
            } else {
                assert_eq!(&*p, e.payload);
            }
        }
    }
    // Compute capabilities as `major * 10 + minor`: 7.5 to 12.x, or any.
    let cc = data.last().map_or(90, |&b| if b < 128 { 75 + (b as u32 % 50) } else { b as u32 });
    if let Some(out) = pvgpu_fatbin::select(data, cc) {
        let kept = pvgpu_fatbin::parse(&out).expect("select wrote a fatbin that does not parse");
        assert_eq!(kept.containers, 1);
        assert_eq!(kept.len, out.len());
        assert!(!kept.entries.is_empty());
        for k in &kept.entries {
            assert!(fat.entries.iter().any(|e| e.raw == k.raw), "select made up an entry");
        }
    }
}

fuzz_target!(|data: &[u8]| {
    fatbin_api(data);
    // As session::module::load: bounds first, on the bytes as sent...
    let _ = image::check_bounds(data);
    // ...then the host executor's parser on the NUL-terminated copy.
    let mut copy = Vec::with_capacity(data.len() + 1);
    copy.extend_from_slice(data);
    copy.push(0);
    let _ = image::parse(&copy);
});
