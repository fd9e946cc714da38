//! The xenbus device states that frontends and backends publish in their
//! XenStore `state` nodes (`xen/include/public/io/xenbus.h`), and helpers to
//! read and write them.
//!
//! The usual handshake, as between blkfront and blkback:
//!
//! ```text
//! frontend (guest)                         backend (Dom0)
//!   Initialising                             Initialising -> InitWait
//!   share ring, offer event channel,
//!   write ring-ref/event-channel (one
//!   transaction) -> Initialised
//!                                            map ring, bind channel -> Connected
//!   -> Connected
//!   ...
//!   Closing -> Closed                        Closing -> Closed
//! ```
//!
//! A peer writes its own `state`, so a value read from the other side is
//! untrusted: anything that is not one of the nine states is an error
//! value, never a panic.

use crate::XenError;
use crate::xenstore::{XsAccess, parse_u32};
use std::fmt;
use std::str::FromStr;

/// `enum xenbus_state`.
#[repr(u32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum XenbusState {
    /// 0: no state (node missing or not yet written).
    Unknown = 0,
    /// 1: starting up.
    Initialising = 1,
    /// 2: early initialisation done, waiting for the peer or hotplug
    /// scripts.
    InitWait = 2,
    /// 3: ready, waiting for the peer to connect.
    Initialised = 3,
    /// 4: connected.
    Connected = 4,
    /// 5: being closed (error or unplug).
    Closing = 5,
    /// 6: closed.
    Closed = 6,
    /// 7: reconfiguring.
    Reconfiguring = 7,
    /// 8: reconfigured.
    Reconfigured = 8,
}

impl XenbusState {
    /// Every state, in numeric order.
    pub const ALL: [XenbusState; 9] = [
        XenbusState::Unknown,
        XenbusState::Initialising,
        XenbusState::InitWait,
        XenbusState::Initialised,
        XenbusState::Connected,
        XenbusState::Closing,
        XenbusState::Closed,
        XenbusState::Reconfiguring,
        XenbusState::Reconfigured,
    ];

    /// The state numbered `v`.
    pub fn from_u32(v: u32) -> Option<XenbusState> {
        XenbusState::ALL.get(usize::try_from(v).ok()?).copied()
    }

    /// Parses the value of a `state` node (`"4"`; surrounding whitespace and
    /// trailing NULs allowed).
    pub fn from_wire(v: &[u8]) -> Option<XenbusState> {
        parse_u32(v).and_then(XenbusState::from_u32)
    }

    /// The value to write into a `state` node (`"4"`).
    pub fn as_wire(self) -> &'static str {
        ["0", "1", "2", "3", "4", "5", "6", "7", "8"][self as usize]
    }

    /// The name, as Linux's `xenbus_strstate` prints it (`"Connected"`).
    pub fn name(self) -> &'static str {
        match self {
            XenbusState::Unknown => "Unknown",
            XenbusState::Initialising => "Initialising",
            XenbusState::InitWait => "InitWait",
            XenbusState::Initialised => "Initialised",
            XenbusState::Connected => "Connected",
            XenbusState::Closing => "Closing",
            XenbusState::Closed => "Closed",
            XenbusState::Reconfiguring => "Reconfiguring",
            XenbusState::Reconfigured => "Reconfigured",
        }
    }

    /// Whether the device is going away or gone (Closing or Closed).
    pub fn is_closing(self) -> bool {
        matches!(self, XenbusState::Closing | XenbusState::Closed)
    }
}

/// Human-readable: the name and the number, `Connected (4)`. Use
/// [`XenbusState::as_wire`] for what goes into XenStore.
impl fmt::Display for XenbusState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.name(), *self as u32)
    }
}

/// Parses the XenStore form (`"4"`).
impl FromStr for XenbusState {
    type Err = XenError;

    fn from_str(s: &str) -> Result<Self, XenError> {
        XenbusState::from_wire(s.as_bytes()).ok_or_else(|| bad_state("", s.as_bytes()))
    }
}

fn bad_state(path: &str, v: &[u8]) -> XenError {
    let mut value = String::from_utf8_lossy(&v[..v.len().min(64)]).into_owned();
    if v.len() > 64 {
        value.push('…');
    }
    XenError::BadValue { path: path.to_string(), value, expected: "a xenbus state number from 0 to 8" }
}

/// The path of the `state` node under `dir`.
pub fn state_path(dir: &str) -> String {
    format!("{}/state", dir.trim_end_matches('/'))
}

/// Reads `<dir>/state`. A missing node reads as [`XenbusState::Unknown`]
/// (as Linux's `xenbus_read_driver_state` does); a value that is not a
/// state is [`XenError::BadValue`].
pub fn read_state(xs: &mut impl XsAccess, dir: &str) -> Result<XenbusState, XenError> {
    let path = state_path(dir);
    match xs.try_read(&path)? {
        None => Ok(XenbusState::Unknown),
        Some(v) => XenbusState::from_wire(&v).ok_or_else(|| bad_state(&path, &v)),
    }
}

/// Writes `state` into `<dir>/state`.
pub fn write_state(xs: &mut impl XsAccess, dir: &str, state: XenbusState) -> Result<(), XenError> {
    let path = state_path(dir);
    xs.write(&path, state.as_wire().as_bytes())?;
    tracing::debug!(%path, %state, "xenbus state written");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::xenstore::fake::{Fake, connect};

    #[test]
    fn states_parse_from_the_wire_and_print() {
        for s in XenbusState::ALL {
            assert_eq!(XenbusState::from_wire(s.as_wire().as_bytes()), Some(s));
            assert_eq!(s.as_wire().parse::<XenbusState>().unwrap(), s);
        }
        assert_eq!(XenbusState::from_wire(b"4\0"), Some(XenbusState::Connected));
        assert_eq!(XenbusState::from_wire(b" 6\n"), Some(XenbusState::Closed));
        for bad in [&b""[..], b"9", b"-1", b"4x", b"Connected", b"\xff", b"4294967296"] {
            assert_eq!(XenbusState::from_wire(bad), None, "{bad:?}");
        }
        assert!("9".parse::<XenbusState>().is_err());
        assert_eq!(XenbusState::Connected.to_string(), "Connected (4)");
        assert_eq!(XenbusState::Connected as u32, 4);
        assert!(XenbusState::Closing.is_closing() && !XenbusState::Connected.is_closing());
    }

    #[test]
    fn read_and_write_state_through_xenstore() {
        let (mut xs, t) = connect(Fake::default());
        let dir = "/local/domain/3/device/pvgpu/0";
        assert_eq!(read_state(&mut xs, dir).unwrap(), XenbusState::Unknown);
        write_state(&mut xs, dir, XenbusState::Initialised).unwrap();
        assert_eq!(xs.read(&state_path(dir)).unwrap(), b"3");
        assert_eq!(read_state(&mut xs, &format!("{dir}/")).unwrap(), XenbusState::Initialised);
        // Inside a transaction too.
        xs.transaction(|tx| write_state(tx, dir, XenbusState::Connected)).unwrap();
        assert_eq!(read_state(&mut xs, dir).unwrap(), XenbusState::Connected);
        // A hostile peer's garbage is an error value.
        xs.write(&state_path(dir), b"banana").unwrap();
        let e = read_state(&mut xs, dir).unwrap_err();
        assert!(matches!(&e, XenError::BadValue { path, .. } if path.ends_with("/state")), "{e}");
        drop(xs);
        t.join().unwrap();
    }
}
