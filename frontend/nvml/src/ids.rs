//! How NVML writes a device's identifiers: its UUID as `GPU-` and five
//! groups of hex digits, its PCI address as `domain:bus:device.function`,
//! and the PCI bus ids callers may pass back.

use std::fmt::Write;

/// The UUID as NVML writes it: `GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`.
pub fn uuid_string(uuid: &[u8; 16]) -> String {
    let mut s = String::from("GPU");
    for (i, b) in uuid.iter().enumerate() {
        if matches!(i, 0 | 4 | 6 | 8 | 10) {
            s.push('-');
        }
        let _ = write!(s, "{b:02x}");
    }
    s
}

/// A device's place on the PCI bus.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PciAddr {
    /// Domain (segment).
    pub domain: u32,
    /// Bus.
    pub bus: u32,
    /// Device on the bus.
    pub device: u32,
}

impl PciAddr {
    /// `nvmlPciInfo_t::busId`: `%08X:%02X:%02X.0`.
    pub fn bus_id(&self) -> String {
        format!("{:08X}:{:02X}:{:02X}.0", self.domain, self.bus, self.device)
    }

    /// `nvmlPciInfo_t::busIdLegacy`: `%04X:%02X:%02X.0`.
    pub fn bus_id_legacy(&self) -> String {
        format!("{:04X}:{:02X}:{:02X}.0", self.domain, self.bus, self.device)
    }

    /// A bus id in one of the forms `nvmlDeviceGetHandleByPciBusId`
    /// accepts (hexadecimal): `domain:bus:device.function`,
    /// `domain:bus:device`, or `bus:device.function` (domain 0). The
    /// function is read and ignored: a GPU is function 0.
    pub fn parse(s: &str) -> Option<PciAddr> {
        let hex = |t: &str| if t.is_empty() { None } else { u32::from_str_radix(t, 16).ok() };
        let parts: Vec<&str> = s.trim().split(':').collect();
        let (domain, bus, last) = match parts.as_slice() {
            [d, b, last] => (hex(d)?, hex(b)?, *last),
            [b, last] if last.contains('.') => (0, hex(b)?, *last),
            _ => return None,
        };
        let device = match last.split_once('.') {
            Some((dev, func)) => {
                hex(func)?;
                hex(dev)?
            }
            None => hex(last)?,
        };
        Some(PciAddr { domain, bus, device })
    }
}

/// Copies `s` into a fixed C string field, NUL-terminated (cut short if it
/// does not fit, which the formats above never need).
pub fn fixed<const N: usize>(s: &str) -> [std::ffi::c_char; N] {
    let mut out = [0; N];
    for (o, b) in out.iter_mut().zip(s.bytes().take(N - 1)) {
        *o = b as std::ffi::c_char;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uuid_is_written_as_nvml_does() {
        let u = [0x9a, 0x1b, 0x2c, 0x3d, 0x4e, 0x5f, 0x60, 0x71, 0x82, 0x93, 0xa4, 0xb5, 0xc6, 0xd7, 0xe8, 0xf9];
        assert_eq!(uuid_string(&u), "GPU-9a1b2c3d-4e5f-6071-8293-a4b5c6d7e8f9");
        assert_eq!(uuid_string(&[0; 16]).len() + 1, 41);
    }

    #[test]
    fn bus_ids_are_written_and_read_back() {
        let a = PciAddr { domain: 0, bus: 0x1b, device: 0 };
        assert_eq!(a.bus_id(), "00000000:1B:00.0");
        assert_eq!(a.bus_id_legacy(), "0000:1B:00.0");
        assert_eq!(PciAddr::parse(&a.bus_id()), Some(a));
        assert_eq!(PciAddr::parse(&a.bus_id_legacy()), Some(a));
        assert_eq!(PciAddr::parse("0:1b:0"), Some(a));
        assert_eq!(PciAddr::parse("1b:00.0"), Some(a));
        assert_eq!(PciAddr::parse(" 00000001:c1:1f.0 "), Some(PciAddr { domain: 1, bus: 0xc1, device: 0x1f }));
        for bad in ["", "1b", "1b:00", "x:1b:00.0", "0:1b:00.", "0:0:1b:00.0", "0::00.0"] {
            assert_eq!(PciAddr::parse(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn fixed_strings_are_terminated() {
        let f: [std::ffi::c_char; 4] = fixed("abcdef");
        assert_eq!(f, [b'a' as _, b'b' as _, b'c' as _, 0]);
    }
}
