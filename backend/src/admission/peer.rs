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

#[cfg(test)]
mod tests {
    use super::*;

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
