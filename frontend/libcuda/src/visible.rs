//! `CUDA_VISIBLE_DEVICES`, as NVIDIA's driver reads it: the program sees
//! the listed devices of its backend, renumbered from 0 in the list's order.
//!
//! Entries are comma-separated device indices or UUIDs (`GPU-` and enough
//! of the UUID to name one device). The list ends at the first entry that
//! names no device, or one already listed; unset, every device is visible;
//! set and empty (or starting with a bad entry), none is, and `cuInit`
//! answers `CUDA_ERROR_NO_DEVICE`. A `CUdevice` this library hands out is
//! the device's number among all the backends' devices
//! ([`crate::state::backends`]); the program's ordinals are the list's
//! positions.
//! This is the program's own choice, as natively: it is not a boundary a
//! program cannot cross.

use std::sync::OnceLock;

/// The backend ordinals the program sees, in its order (`None`: all).
static VISIBLE: OnceLock<Option<Vec<i32>>> = OnceLock::new();

/// Which of `count` devices, with `uuids` (16 bytes each, as
/// `cuDeviceGetUuid` gives them), `spec` lets the program see.
pub fn parse(spec: &str, count: i32, uuids: &dyn Fn(i32) -> Option<[u8; 16]>) -> Vec<i32> {
    let mut seen = Vec::new();
    for entry in spec.split(',').map(str::trim) {
        let found = if let Ok(i) = entry.parse::<i64>() {
            (0..i64::from(count)).contains(&i).then_some(i as i32)
        } else if let Some(hex) = entry.strip_prefix("GPU-") {
            let want: String = hex.chars().filter(|c| *c != '-').collect::<String>().to_ascii_lowercase();
            let matching: Vec<i32> = (0..count)
                .filter(|d| {
                    uuids(*d).is_some_and(|u| {
                        let have: String = u.iter().map(|b| format!("{b:02x}")).collect();
                        !want.is_empty() && have.starts_with(&want)
                    })
                })
                .collect();
            // A prefix that names two devices names none.
            (matching.len() == 1).then(|| matching[0])
        } else {
            None
        };
        match found {
            Some(d) if !seen.contains(&d) => seen.push(d),
            _ => break,
        }
    }
    seen
}

/// Reads `CUDA_VISIBLE_DEVICES` once (at `cuInit`, once the backends'
/// devices are numbered), against the backends' devices; says how many
/// the program sees (`None`: all, unrestricted).
pub fn init() -> Result<Option<usize>, pvgpu_frontend::Error> {
    use crate::state::backends;
    if VISIBLE.get().is_none() {
        let list = match std::env::var("CUDA_VISIBLE_DEVICES") {
            Ok(spec) => {
                let uuid = |d| backends::on_device(d).ok().and_then(|(c, local)| c.device_props(local).ok()).map(|p| p.uuid);
                Some(parse(&spec, backends::device_count(), &uuid))
            }
            Err(_) => None,
        };
        let _ = VISIBLE.set(list);
    }
    Ok(restricted().map(<[i32]>::len))
}

fn restricted() -> Option<&'static [i32]> {
    VISIBLE.get().and_then(Option::as_deref)
}

/// The backend ordinal of the program's device `ordinal` (`None`: it sees
/// no such device); unrestricted, the same.
pub fn backend_ordinal(ordinal: i32) -> Option<i32> {
    match restricted() {
        Some(list) => usize::try_from(ordinal).ok().and_then(|i| list.get(i).copied()),
        None => Some(ordinal),
    }
}

/// How many devices the program sees of the backend's `count`.
pub fn count(count: i32) -> i32 {
    restricted().map_or(count, |l| l.len() as i32)
}

/// Whether the program sees backend device `dev`.
pub fn sees(dev: i32) -> bool {
    program_ordinal(dev).is_some()
}

/// The program's ordinal of backend device `dev`, if it sees it.
pub fn program_ordinal(dev: i32) -> Option<i32> {
    match restricted() {
        Some(list) => list.iter().position(|d| *d == dev).map(|p| p as i32),
        None => Some(dev),
    }
}

#[cfg(test)]
mod tests {
    use super::parse;

    fn uuid(d: i32) -> Option<[u8; 16]> {
        let mut u = [0u8; 16];
        u[0] = 0xa0 + d as u8;
        u[1] = 0x11;
        Some(u)
    }

    #[test]
    fn lists_end_at_the_first_entry_naming_no_device() {
        assert_eq!(parse("0,1,2", 3, &uuid), [0, 1, 2]);
        assert_eq!(parse("2, 0", 3, &uuid), [2, 0]);
        assert_eq!(parse("1,5,0", 3, &uuid), [1], "an index past the devices ends the list");
        assert_eq!(parse("0,0,1", 3, &uuid), [0], "a device listed twice ends it");
        assert!(parse("", 3, &uuid).is_empty());
        assert!(parse("-1", 3, &uuid).is_empty());
        assert_eq!(parse("GPU-a1, GPU-A011-0000", 3, &uuid), [1, 0]);
        assert!(parse("GPU-", 3, &uuid).is_empty());
        assert!(parse("GPU-b", 3, &uuid).is_empty(), "no such UUID");
        assert!(parse("MIG-1", 3, &uuid).is_empty());
    }
}
