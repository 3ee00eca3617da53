//! Which address a request comes from, when reverse proxies stand in front of the service.
//!
//! Forwarding headers are believed only from peers in `TRUSTED_PROXIES`: anyone else could
//! write them and pick their own rate-limit bucket. Behind trusted proxies the client is the
//! right-most forwarded address that is not itself a trusted proxy (each proxy appends the
//! peer it saw, so addresses left of the first untrusted one are the client's own claims).
//!
//! Every per-address limit counts a [`ClientKey`], never the address itself.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr};
use std::str::FromStr;

/// An address block such as `10.0.0.0/8`, `2001:db8::/32`, or one address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cidr {
    network: IpAddr,
    prefix: u8,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InvalidCidr(pub String);

impl fmt::Display for InvalidCidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "`{}` is not an address or an address block", self.0)
    }
}

impl FromStr for Cidr {
    type Err = InvalidCidr;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let invalid = || InvalidCidr(text.to_owned());
        let (address, prefix) = match text.trim().split_once('/') {
            Some((a, p)) => (a, Some(p)),
            None => (text.trim(), None),
        };
        let network: IpAddr = address.parse().map_err(|_| invalid())?;
        let max = if network.is_ipv4() { 32 } else { 128 };
        let prefix = match prefix {
            Some(p) => p
                .parse::<u8>()
                .ok()
                .filter(|p| *p <= max)
                .ok_or_else(invalid)?,
            None => max,
        };
        Ok(Self { network, prefix })
    }
}

impl Cidr {
    pub fn contains(&self, address: IpAddr) -> bool {
        fn masked(bits: u128, prefix: u8, width: u8) -> u128 {
            if prefix == 0 {
                0
            } else {
                bits >> (width - prefix)
            }
        }
        match (self.network, canonical(address)) {
            (IpAddr::V4(net), IpAddr::V4(a)) => {
                masked(u32::from(net).into(), self.prefix, 32)
                    == masked(u32::from(a).into(), self.prefix, 32)
            }
            (IpAddr::V6(net), IpAddr::V6(a)) => {
                masked(u128::from(net), self.prefix, 128) == masked(u128::from(a), self.prefix, 128)
            }
            _ => false,
        }
    }
}

/// An IPv4 peer seen on a dual-stack socket arrives as `::ffff:a.b.c.d`.
fn canonical(address: IpAddr) -> IpAddr {
    match address {
        IpAddr::V6(v6) => v6
            .to_ipv4_mapped()
            .map(IpAddr::V4)
            .unwrap_or(IpAddr::V6(v6)),
        v4 => v4,
    }
}

/// The client every per-address limit counts (requests, logins and registrations, `/metrics`
/// tokens, sockets): an IPv4 address, or an IPv6 /64. One host, or one customer's network,
/// holds a whole /64, so counting single IPv6 addresses would give it 2^64 budgets. An IPv4
/// address seen on a dual-stack socket (`::ffff:a.b.c.d`) is itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ClientKey {
    V4(Ipv4Addr),
    /// The network half (high 64 bits) of an IPv6 address.
    V6Network(u64),
    /// No peer address is known: all such requests share one budget.
    Unknown,
}

impl ClientKey {
    pub fn of(address: IpAddr) -> Self {
        match canonical(address) {
            IpAddr::V4(v4) => Self::V4(v4),
            IpAddr::V6(v6) => Self::V6Network((u128::from(v6) >> 64) as u64),
        }
    }
}

/// As cache keys name it: `203.0.113.7`, `2001:db8:1:2::/64`, `unknown`.
impl fmt::Display for ClientKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::V4(v4) => write!(f, "{v4}"),
            Self::V6Network(network) => {
                let group = |i: u32| (network >> (48 - 16 * i)) & 0xffff;
                write!(
                    f,
                    "{:x}:{:x}:{:x}:{:x}::/64",
                    group(0),
                    group(1),
                    group(2),
                    group(3)
                )
            }
            Self::Unknown => f.write_str("unknown"),
        }
    }
}

/// The client's address: `peer` itself unless it is a trusted proxy, else the right-most
/// forwarded address not in `trusted` (or the left-most when every one is trusted).
/// `forwarded` is the chain in header order, client first.
pub fn client_address(peer: IpAddr, forwarded: &[IpAddr], trusted: &[Cidr]) -> IpAddr {
    let is_trusted = |a: IpAddr| trusted.iter().any(|c| c.contains(a));
    let peer = canonical(peer);
    if !is_trusted(peer) {
        return peer;
    }
    forwarded
        .iter()
        .rev()
        .map(|a| canonical(*a))
        .find(|a| !is_trusted(*a))
        .or_else(|| forwarded.first().map(|a| canonical(*a)))
        .unwrap_or(peer)
}

/// The addresses of an `X-Forwarded-For` header (`a, b, c`). An entry that is not an address
/// ends the chain there: what lies left of garbage cannot be attributed to anyone.
pub fn parse_x_forwarded_for(value: &str) -> Vec<IpAddr> {
    parse_chain(value.split(','), |entry| entry.trim().parse().ok())
}

fn parse_chain<'a>(
    entries: impl DoubleEndedIterator<Item = &'a str>,
    parse: impl Fn(&str) -> Option<IpAddr>,
) -> Vec<IpAddr> {
    let mut chain: Vec<IpAddr> = entries.rev().map_while(parse).collect();
    chain.reverse();
    chain
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::net::Ipv6Addr;

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    fn cidrs(list: &[&str]) -> Vec<Cidr> {
        list.iter().map(|c| c.parse().unwrap()).collect()
    }

    #[test]
    fn blocks_contain_their_addresses() {
        let block: Cidr = "10.0.0.0/8".parse().unwrap();
        assert!(block.contains(ip("10.200.1.2")));
        assert!(!block.contains(ip("11.0.0.1")));
        assert!(block.contains(ip("::ffff:10.1.1.1")));
        let one: Cidr = "192.0.2.7".parse().unwrap();
        assert!(one.contains(ip("192.0.2.7")) && !one.contains(ip("192.0.2.8")));
        let v6: Cidr = "2001:db8::/32".parse().unwrap();
        assert!(v6.contains(ip("2001:db8:1::5")) && !v6.contains(ip("2001:db9::1")));
        let all: Cidr = "0.0.0.0/0".parse().unwrap();
        assert!(all.contains(ip("203.0.113.9")));
        for bad in ["10.0.0.0/33", "nonsense", "::/129", "10.0.0.0/"] {
            assert!(bad.parse::<Cidr>().is_err(), "{bad}");
        }
    }

    #[test]
    fn forwarding_headers_count_only_from_trusted_peers() {
        let trusted = cidrs(&["10.0.0.0/8"]);
        let chain = parse_x_forwarded_for("198.51.100.1, 203.0.113.5");
        // An untrusted peer's header is ignored.
        assert_eq!(
            client_address(ip("203.0.113.99"), &chain, &trusted),
            ip("203.0.113.99")
        );
        // Behind a trusted proxy: the right-most untrusted entry, not the client's own claim.
        assert_eq!(
            client_address(ip("10.0.0.2"), &chain, &trusted),
            ip("203.0.113.5")
        );
        // Two trusted hops.
        let chain = parse_x_forwarded_for("203.0.113.5, 10.0.0.9");
        assert_eq!(
            client_address(ip("10.0.0.2"), &chain, &trusted),
            ip("203.0.113.5")
        );
        // No header behind a proxy: the proxy itself.
        assert_eq!(
            client_address(ip("10.0.0.2"), &[], &trusted),
            ip("10.0.0.2")
        );
        // Nothing trusted by default.
        assert_eq!(client_address(ip("10.0.0.2"), &chain, &[]), ip("10.0.0.2"));
    }

    #[test]
    fn clients_are_ipv4_hosts_or_ipv6_networks() {
        let key = |text: &str| ClientKey::of(ip(text)).to_string();
        assert_eq!(key("203.0.113.7"), "203.0.113.7");
        assert_eq!(key("::ffff:203.0.113.7"), "203.0.113.7");
        assert_eq!(key("2001:db8:1:2:aaaa::1"), "2001:db8:1:2::/64");
        assert_eq!(key("2001:db8:1:2:bbbb::9"), key("2001:db8:1:2::5"));
        assert_ne!(key("2001:db8:1:3::1"), key("2001:db8:1:2::1"));
        assert_eq!(key("::1"), "0:0:0:0::/64");
        assert_eq!(ClientKey::Unknown.to_string(), "unknown");
        // A mapped address is the IPv4 client, not the ::ffff:0:0/96 network's.
        assert_ne!(
            ClientKey::of(ip("::ffff:203.0.113.7")),
            ClientKey::of(ip("::ffff:203.0.113.8"))
        );
    }

    proptest! {
        /// Two IPv6 addresses are one client exactly when their high 64 bits agree.
        #[test]
        fn ipv6_clients_are_their_slash_64(a: u128, b: u128) {
            let v6 = |bits: u128| ClientKey::of(IpAddr::V6(Ipv6Addr::from(bits)));
            let low = u128::from(u64::MAX);
            let a_with_b_low = (a & !low) | (b & low);
            // `::ffff:a.b.c.d` is an IPv4 client, its own rule above.
            let mapped = |bits: u128| bits >> 32 == 0xffff;
            prop_assume!(!mapped(a) && !mapped(b) && !mapped(a_with_b_low));
            prop_assert_eq!(v6(a), v6(a_with_b_low));
            prop_assert_eq!(v6(a) == v6(b), a >> 64 == b >> 64);
        }
    }

    #[test]
    fn the_header_parses_entry_by_entry() {
        assert_eq!(
            parse_x_forwarded_for(" 198.51.100.1 ,203.0.113.5"),
            vec![ip("198.51.100.1"), ip("203.0.113.5")]
        );
        // Garbage ends the chain: only what follows it is kept.
        assert_eq!(
            parse_x_forwarded_for("1.2.3.4, junk\r\nX: y, 203.0.113.5"),
            vec![ip("203.0.113.5")]
        );
    }
}
