//! Where a backend is, or listens: the address grammar both sides share.
//!
//! ```text
//! local:PATH        the local shared-memory transport, through the Unix socket PATH
//! tcp:HOST:PORT     TCP (a backend may listen on port 0 to pick one)
//! tls:HOST:PORT     TCP inside TLS
//! rdma:HOST:PORT    RDMA (rsockets over an RDMA device's address)
//! xen               a Xen vgpu device (frontend: the first free one;
//!                   backend: every guest's devices in XenStore)
//! xen:DEVID         a given vgpu device of this guest (frontend only)
//! ```

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;

/// A transport address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Addr {
    /// Local shared-memory transport through a Unix socket.
    Local(PathBuf),
    /// TCP, `host:port`.
    Tcp(String),
    /// TCP inside TLS, `host:port`: the backend proves its identity with a
    /// certificate and the traffic is encrypted.
    Tls(String),
    /// RDMA, `host:port`: a reliable connection through the RDMA
    /// connection manager to an address of an RDMA device's interface.
    Rdma(String),
    /// Xen vgpu devices: a given device id, or any.
    Xen(Option<u32>),
}

/// An address that does not follow the grammar.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "Bad address '{0}': use local:PATH, tcp:HOST:PORT, tls:HOST:PORT, rdma:HOST:PORT or xen (a frontend may name a vgpu device: xen:DEVICE)"
)]
pub struct AddrError(pub String);

impl FromStr for Addr {
    type Err = AddrError;
    fn from_str(s: &str) -> Result<Self, AddrError> {
        let bad = || AddrError(s.to_string());
        if let Some(p) = s.strip_prefix("local:") {
            if p.is_empty() { Err(bad()) } else { Ok(Addr::Local(PathBuf::from(p))) }
        } else if let Some((kind, a)) = s.split_once(':').filter(|(k, _)| matches!(*k, "tcp" | "tls" | "rdma")) {
            match a.rsplit_once(':') {
                Some((host, port)) if !host.is_empty() && port.parse::<u16>().is_ok() => Ok(match kind {
                    "tcp" => Addr::Tcp(a.to_string()),
                    "tls" => Addr::Tls(a.to_string()),
                    _ => Addr::Rdma(a.to_string()),
                }),
                _ => Err(bad()),
            }
        } else if s == "xen" {
            Ok(Addr::Xen(None))
        } else if let Some(d) = s.strip_prefix("xen:") {
            d.parse().map(|d| Addr::Xen(Some(d))).map_err(|_| bad())
        } else {
            Err(bad())
        }
    }
}

impl fmt::Display for Addr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Addr::Local(p) => write!(f, "local:{}", p.display()),
            Addr::Tcp(a) => write!(f, "tcp:{a}"),
            Addr::Tls(a) => write!(f, "tls:{a}"),
            Addr::Rdma(a) => write!(f, "rdma:{a}"),
            Addr::Xen(None) => write!(f, "xen"),
            Addr::Xen(Some(d)) => write!(f, "xen:{d}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_grammar() {
        assert_eq!("local:/run/pvgpu.sock".parse(), Ok(Addr::Local("/run/pvgpu.sock".into())));
        assert_eq!("tcp:127.0.0.1:7300".parse(), Ok(Addr::Tcp("127.0.0.1:7300".into())));
        assert_eq!("tcp:[::1]:0".parse(), Ok(Addr::Tcp("[::1]:0".into())));
        assert_eq!("tls:gpu-host:7301".parse(), Ok(Addr::Tls("gpu-host:7301".into())));
        assert_eq!("rdma:10.0.0.1:7400".parse(), Ok(Addr::Rdma("10.0.0.1:7400".into())));
        assert_eq!("xen".parse(), Ok(Addr::Xen(None)));
        assert_eq!("xen:3".parse(), Ok(Addr::Xen(Some(3))));
        for bad in [
            "",
            "local:",
            "tcp:host",
            "tcp::7300",
            "tcp:host:port",
            "tls:host",
            "rdma:host",
            "rdma::1",
            "xen:x",
            "udp:1.2.3.4:5",
            "/run/pvgpu.sock",
        ] {
            assert_eq!(bad.parse::<Addr>(), Err(AddrError(bad.into())), "{bad}");
        }
        for a in [
            Addr::Local("/x".into()),
            Addr::Tcp("h:1".into()),
            Addr::Tls("h:2".into()),
            Addr::Rdma("h:3".into()),
            Addr::Xen(None),
            Addr::Xen(Some(7)),
        ] {
            assert_eq!(a.to_string().parse(), Ok(a));
        }
    }
}
