//! The client's address, for the per-address limits. Behind a balancer every connection comes
//! from the balancer; the balancer writes the address it saw into `X-Forwarded-For` (or
//! `Forwarded`). That header is believed only when the connection itself comes from a trusted
//! proxy (`RELAY_TRUSTED_PROXIES`): anyone else could write whatever they like into it.
//!
//! Each proxy appends the address it received the request from, so the list is read from the
//! right: skip every trusted proxy, and the first address that is not one is the client. Whatever
//! lies to its left was written by the client (or by proxies nobody vouches for) and is ignored.

use std::net::IpAddr;

use axum::http::HeaderMap;
use ipnet::IpNet;

use crate::config::ForwardedHeader;

/// What a per-address limit counts for `ip`: an IPv4 address as it is (an IPv4-mapped IPv6 one
/// as its IPv4 address), an IPv6 address by its /64, which one host or user commonly holds
/// whole (counting single IPv6 addresses would give them 2^64 budgets).
pub fn limit_bucket(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(v4) => IpAddr::V4(v4),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => {
                let prefix = u128::from(v6) & !((1u128 << 64) - 1);
                IpAddr::V6(std::net::Ipv6Addr::from(prefix))
            }
        },
    }
}

/// The address the per-address limits charge for a request that arrived from `peer`.
pub fn client_ip(
    peer: IpAddr,
    headers: &HeaderMap,
    trusted: &[IpNet],
    header: ForwardedHeader,
) -> IpAddr {
    let is_trusted = |ip: &IpAddr| trusted.iter().any(|net| net.contains(ip));
    let mut current = peer.to_canonical();
    if !is_trusted(&current) {
        return current;
    }
    let hops = match header {
        ForwardedHeader::XForwardedFor => x_forwarded_for(headers),
        ForwardedHeader::Forwarded => forwarded(headers),
    };
    for hop in hops.iter().rev() {
        match hop {
            // A hop that is not an address ("unknown", an obfuscated name, garbage): nothing to
            // its left can be vouched for, so the last proxy that wrote it is charged.
            None => return current,
            Some(ip) => {
                current = ip.to_canonical();
                if !is_trusted(&current) {
                    return current;
                }
            }
        }
    }
    // Every hop is a trusted proxy: the leftmost one is the client as far as anyone knows.
    current
}

/// The addresses of every `X-Forwarded-For` line, left to right.
fn x_forwarded_for(headers: &HeaderMap) -> Vec<Option<IpAddr>> {
    headers
        .get_all("x-forwarded-for")
        .iter()
        .flat_map(|line| {
            let text = line.to_str().unwrap_or("\u{0}");
            text.split(',').map(parse_node).collect::<Vec<_>>()
        })
        .collect()
}

/// The `for=` of each element of every `Forwarded` line (RFC 7239), left to right. An element
/// without `for=` counts as a hop that is not an address.
fn forwarded(headers: &HeaderMap) -> Vec<Option<IpAddr>> {
    let mut hops = Vec::new();
    for line in headers.get_all("forwarded") {
        let Ok(text) = line.to_str() else {
            hops.push(None);
            continue;
        };
        for element in split_unquoted(text, ',') {
            let node = split_unquoted(element, ';').into_iter().find_map(|pair| {
                let (name, value) = pair.split_once('=')?;
                name.trim()
                    .eq_ignore_ascii_case("for")
                    .then(|| unquote(value.trim()))
            });
            hops.push(node.as_deref().and_then(parse_node));
        }
    }
    hops
}

/// Splits on `sep` outside double quotes.
fn split_unquoted(text: &str, sep: char) -> Vec<&str> {
    let mut parts = Vec::new();
    let mut quoted = false;
    let mut escaped = false;
    let mut start = 0;
    for (i, c) in text.char_indices() {
        if escaped {
            escaped = false;
        } else if quoted && c == '\\' {
            escaped = true;
        } else if c == '"' {
            quoted = !quoted;
        } else if c == sep && !quoted {
            parts.push(&text[start..i]);
            start = i + c.len_utf8();
        }
    }
    parts.push(&text[start..]);
    parts
}

/// A quoted-string's content (backslash escapes removed), or the token as it is.
fn unquote(value: &str) -> String {
    let Some(inner) = value.strip_prefix('"').and_then(|v| v.strip_suffix('"')) else {
        return value.to_owned();
    };
    let mut out = String::with_capacity(inner.len());
    let mut chars = inner.chars();
    while let Some(c) = chars.next() {
        if c == '\\' {
            if let Some(next) = chars.next() {
                out.push(next);
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// One node of either header: `192.0.2.1`, `192.0.2.1:4711`, `2001:db8::1`, `[2001:db8::1]`,
/// `[2001:db8::1]:4711`. Anything else (`unknown`, `_hidden`, garbage) is `None`.
fn parse_node(node: &str) -> Option<IpAddr> {
    let node = node.trim().trim_matches('"');
    if let Some(rest) = node.strip_prefix('[') {
        let (inside, after) = rest.split_once(']')?;
        if !(after.is_empty() || after.starts_with(':')) {
            return None;
        }
        return inside.parse::<std::net::Ipv6Addr>().ok().map(IpAddr::V6);
    }
    if let Ok(ip) = node.parse::<IpAddr>() {
        return Some(ip);
    }
    node.parse::<std::net::SocketAddrV4>()
        .ok()
        .map(|s| IpAddr::V4(*s.ip()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::parse_proxies;
    use axum::http::HeaderValue;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn ipv6_counts_by_its_64() {
        let a = limit_bucket(ip("2001:db8:1:2:aaaa::1"));
        assert_eq!(a, limit_bucket(ip("2001:db8:1:2:ffff:ffff:ffff:ffff")));
        assert_ne!(a, limit_bucket(ip("2001:db8:1:3::1")));
        assert_eq!(a, ip("2001:db8:1:2::"));
        assert_eq!(limit_bucket(ip("::ffff:192.0.2.7")), ip("192.0.2.7"));
        assert_eq!(limit_bucket(ip("192.0.2.7")), ip("192.0.2.7"));
    }

    fn headers(name: &'static str, lines: &[&str]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for line in lines {
            h.append(name, HeaderValue::from_str(line).unwrap());
        }
        h
    }

    fn xff(peer: &str, lines: &[&str], trusted: &str) -> IpAddr {
        client_ip(
            ip(peer),
            &headers("x-forwarded-for", lines),
            &parse_proxies(trusted).unwrap(),
            ForwardedHeader::XForwardedFor,
        )
    }

    fn fwd(peer: &str, lines: &[&str], trusted: &str) -> IpAddr {
        client_ip(
            ip(peer),
            &headers("forwarded", lines),
            &parse_proxies(trusted).unwrap(),
            ForwardedHeader::Forwarded,
        )
    }

    #[test]
    fn headers_from_an_untrusted_peer_are_ignored() {
        assert_eq!(
            xff("198.51.100.7", &["203.0.113.9"], ""),
            ip("198.51.100.7")
        );
        assert_eq!(
            xff("198.51.100.7", &["203.0.113.9"], "10.0.0.0/8"),
            ip("198.51.100.7")
        );
        assert_eq!(
            fwd("198.51.100.7", &["for=203.0.113.9"], "10.0.0.0/8"),
            ip("198.51.100.7")
        );
    }

    #[test]
    fn one_trusted_proxy_gives_the_address_it_saw() {
        assert_eq!(
            xff("10.0.0.2", &["203.0.113.9"], "10.0.0.0/8"),
            ip("203.0.113.9")
        );
        // What the client wrote itself sits to the left of what the proxy appended.
        assert_eq!(
            xff("10.0.0.2", &["1.1.1.1, 203.0.113.9"], "10.0.0.0/8"),
            ip("203.0.113.9")
        );
        // HAProxy adds its own line after the client's.
        assert_eq!(
            xff("10.0.0.2", &["1.1.1.1", "203.0.113.9"], "10.0.0.0/8"),
            ip("203.0.113.9")
        );
        // No header at all: the proxy itself.
        assert_eq!(xff("10.0.0.2", &[], "10.0.0.0/8"), ip("10.0.0.2"));
    }

    #[test]
    fn several_proxies_are_skipped_from_the_right() {
        let trusted = "10.0.0.0/8, 192.168.1.1";
        assert_eq!(
            xff(
                "10.0.0.2",
                &["6.6.6.6, 203.0.113.9, 192.168.1.1, 10.1.2.3"],
                trusted
            ),
            ip("203.0.113.9")
        );
        // Every hop trusted: the leftmost.
        assert_eq!(
            xff("10.0.0.2", &["10.9.9.9, 10.1.2.3"], trusted),
            ip("10.9.9.9")
        );
    }

    #[test]
    fn a_hop_that_is_not_an_address_stops_the_walk() {
        assert_eq!(
            xff("10.0.0.2", &["203.0.113.9, unknown"], "10.0.0.0/8"),
            ip("10.0.0.2")
        );
        assert_eq!(
            xff(
                "10.0.0.2",
                &["203.0.113.9, 10.0.0.5, garbage"],
                "10.0.0.0/8"
            ),
            ip("10.0.0.2")
        );
        assert_eq!(
            xff("10.0.0.2", &["garbage, 10.0.0.5"], "10.0.0.0/8"),
            ip("10.0.0.5")
        );
    }

    #[test]
    fn ports_brackets_and_mapped_addresses() {
        assert_eq!(
            xff("10.0.0.2", &["203.0.113.9:4711"], "10.0.0.0/8"),
            ip("203.0.113.9")
        );
        assert_eq!(
            xff("10.0.0.2", &["[2001:db8::1]:4711"], "10.0.0.0/8"),
            ip("2001:db8::1")
        );
        assert_eq!(
            xff("10.0.0.2", &["2001:db8::1"], "10.0.0.0/8"),
            ip("2001:db8::1")
        );
        // An IPv4 peer seen on a dual-stack socket is still that IPv4 address.
        assert_eq!(
            xff("::ffff:10.0.0.2", &["203.0.113.9"], "10.0.0.0/8"),
            ip("203.0.113.9")
        );
        assert_eq!(
            xff("fd00::2", &["::ffff:203.0.113.9"], "fd00::/8"),
            ip("203.0.113.9")
        );
    }

    #[test]
    fn forwarded_elements_and_quoting() {
        let trusted = "10.0.0.0/8";
        assert_eq!(
            fwd(
                "10.0.0.2",
                &["for=6.6.6.6, for=\"[2001:db8:cafe::17]:4711\";proto=https;by=10.0.0.2"],
                trusted
            ),
            ip("2001:db8:cafe::17")
        );
        assert_eq!(
            fwd(
                "10.0.0.2",
                &["For=203.0.113.9;proto=http", "for=10.3.3.3"],
                trusted
            ),
            ip("203.0.113.9")
        );
        assert_eq!(
            fwd("10.0.0.2", &["for=\"a,b\";by=x, for=203.0.113.9"], trusted),
            ip("203.0.113.9")
        );
        assert_eq!(fwd("10.0.0.2", &["for=unknown"], trusted), ip("10.0.0.2"));
        assert_eq!(fwd("10.0.0.2", &["for=_hidden"], trusted), ip("10.0.0.2"));
        assert_eq!(fwd("10.0.0.2", &["proto=https"], trusted), ip("10.0.0.2"));
        // The header that is not configured is never read.
        let mut h = headers("x-forwarded-for", &["203.0.113.9"]);
        h.append("forwarded", HeaderValue::from_static("for=6.6.6.6"));
        assert_eq!(
            client_ip(
                ip("10.0.0.2"),
                &h,
                &parse_proxies(trusted).unwrap(),
                ForwardedHeader::XForwardedFor
            ),
            ip("203.0.113.9")
        );
    }

    #[test]
    fn proxy_lists_parse() {
        let nets = parse_proxies("10.0.0.0/8, 127.0.0.1 ::1,fd00::/8").unwrap();
        assert_eq!(nets.len(), 4);
        assert!(nets[1].contains(&ip("127.0.0.1")) && !nets[1].contains(&ip("127.0.0.2")));
        assert!(parse_proxies("").unwrap().is_empty());
        assert!(parse_proxies("10.0.0.0/33").is_err());
        assert!(parse_proxies("example.com").is_err());
        assert!(
            parse_proxies("10.0.0.0/8,nope")
                .unwrap_err()
                .contains("nope")
        );
    }
}
