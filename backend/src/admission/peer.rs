//! Who a peer is, for counting what it holds: a local user, a guest
//! domain, an IPv4 address, or an IPv6 /64 (one host is commonly given a
//! whole /64, so counting its addresses one by one would let it hold as
//! much as 2^64 strangers).

use std::net::IpAddr;

/// The peer a TCP or TLS connection from `ip` counts as: `tcp:ADDRESS` for
/// IPv4 (and IPv4-mapped IPv6), `tcp:PREFIX::/64` for IPv6.
pub fn tcp_peer(ip: IpAddr) -> String {
    match ip {
        IpAddr::V4(v4) => format!("tcp:{v4}"),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => format!("tcp:{v4}"),
            None => {
                let prefix = u128::from(v6) & !((1u128 << 64) - 1);
                format!("tcp:{}/64", std::net::Ipv6Addr::from(prefix))
            }
        },
    }
}

/// The peer a local connection counts as: its user.
pub fn local_peer(uid: u32) -> String {
    format!("uid:{uid}")
}

/// The peer a Xen guest's device counts as: its domain.
pub fn xen_peer(domid: u16) -> String {
    format!("xen:{domid}")
}

/// What a Xen guest's snapshots and interprocess handles are scoped to:
/// its virtual machine (`xen-vm:UUID`), which keeps its UUID across
/// `xl save` and `xl restore` where its domain id changes. `uuid` is what
/// the toolstack wrote under `/vm/UUID/uuid`; `None` unless it has the
/// form of one (36 characters, hexadecimal digits and dashes at 8, 13,
/// 18 and 23).
pub fn xen_vm_scope(uuid: &[u8]) -> Option<String> {
    let well_formed = uuid.len() == 36
        && uuid.iter().enumerate().all(|(i, b)| if [8, 13, 18, 23].contains(&i) { *b == b'-' } else { b.is_ascii_hexdigit() });
    well_formed.then(|| format!("xen-vm:{}", String::from_utf8_lossy(uuid).to_ascii_lowercase()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_vm_scope_needs_a_well_formed_uuid() {
        assert_eq!(xen_vm_scope(b"AF94108E-eb39-11f1-a3c6-6e7118d8b4b6").as_deref(), Some("xen-vm:af94108e-eb39-11f1-a3c6-6e7118d8b4b6"));
        for bad in [
            &b""[..],
            b"af94108e-eb39-11f1-a3c6-6e7118d8b4b",
            b"af94108e-eb39-11f1-a3c6-6e7118d8b4b6x",
            b"af94108e/eb39-11f1-a3c6-6e7118d8b4b6",
            b"af94108e-eb39-11f1-a3c6-6e7118d8b4bg",
        ] {
            assert_eq!(xen_vm_scope(bad), None, "{}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn ipv6_peers_are_their_64_and_mapped_ipv4_is_ipv4() {
        let a: IpAddr = "2001:db8:1:2:aaaa::1".parse().unwrap();
        let b: IpAddr = "2001:db8:1:2:ffff:ffff:ffff:ffff".parse().unwrap();
        let c: IpAddr = "2001:db8:1:3::1".parse().unwrap();
        assert_eq!(tcp_peer(a), "tcp:2001:db8:1:2::/64");
        assert_eq!(tcp_peer(a), tcp_peer(b));
        assert_ne!(tcp_peer(a), tcp_peer(c));
        assert_eq!(tcp_peer("::ffff:10.0.0.7".parse().unwrap()), "tcp:10.0.0.7");
        assert_eq!(tcp_peer("10.0.0.7".parse().unwrap()), "tcp:10.0.0.7");
        assert_eq!(tcp_peer("::1".parse().unwrap()), "tcp:::/64");
    }
}
