//! The address guard of the HTTP tools (CONTRACT §5): which IP addresses a request may connect
//! to, and a `ureq` resolver that resolves each host exactly once, drops every refused address,
//! and hands ureq's connector only the addresses it checked, so there is no second lookup for a
//! rebinding DNS server to answer differently. Pinned hosts (`--resolve`) and IP literals listed
//! in `x-allowed-domains` are exempt from the private-address rule. This module must never
//! return an address it did not check.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::{Arc, Mutex};

use ureq::config::Config;
use ureq::http::Uri;
use ureq::unversioned::resolver::{DefaultResolver, ResolvedSocketAddrs, Resolver};
use ureq::unversioned::transport::NextTimeout;

use crate::skill::policy::Policy;
use crate::tools::{ResolvePin, ToolError};

/// Why an address may not be connected to, or None for a globally routable one.
pub fn refused_class(ip: IpAddr) -> Option<&'static str> {
    match ip {
        IpAddr::V4(v4) => refused_v4(v4),
        IpAddr::V6(v6) => refused_v6(v6),
    }
}

fn refused_v4(ip: Ipv4Addr) -> Option<&'static str> {
    let [a, b, c, _] = ip.octets();
    Some(match (a, b) {
        (0, _) => "unspecified",
        (127, _) => "loopback",
        (10, _) | (192, 168) => "private",
        (172, 16..=31) => "private",
        (169, 254) => "link-local",
        (100, 64..=127) => "CGNAT",
        (192, 0) if c == 0 => "IETF protocol assignments",
        (198, 18..=19) => "benchmarking",
        (224..=239, _) => "multicast",
        (240..=255, _) => "reserved/broadcast",
        _ => return None,
    })
}

fn refused_v6(ip: Ipv6Addr) -> Option<&'static str> {
    if ip.is_unspecified() {
        return Some("unspecified");
    }
    if ip.is_loopback() {
        return Some("loopback");
    }
    let seg = ip.segments();
    // IPv4-mapped (::ffff:a.b.c.d), IPv4-compatible (::a.b.c.d) and NAT64 (64:ff9b::a.b.c.d)
    // all reach an IPv4 address: judge that one.
    let embedded = Ipv4Addr::new(
        (seg[6] >> 8) as u8,
        seg[6] as u8,
        (seg[7] >> 8) as u8,
        seg[7] as u8,
    );
    if seg[..5] == [0, 0, 0, 0, 0] && (seg[5] == 0xffff || seg[5] == 0) {
        return refused_v4(embedded);
    }
    if seg[..6] == [0x64, 0xff9b, 0, 0, 0, 0] {
        return refused_v4(embedded);
    }
    match seg[0] {
        s if s & 0xfe00 == 0xfc00 => Some("private (unique local)"),
        s if s & 0xffc0 == 0xfe80 => Some("link-local"),
        s if s & 0xffc0 == 0xfec0 => Some("site-local"),
        s if s & 0xff00 == 0xff00 => Some("multicast"),
        _ => None,
    }
}

/// A host as the policy sees it: lowercase, no trailing dot, IPv6 without brackets.
pub fn policy_host(host: &str) -> String {
    host.trim_start_matches('[')
        .trim_end_matches(']')
        .trim_end_matches('.')
        .to_ascii_lowercase()
}

/// A resolver for one tool call. A refusal is recorded so the call can report it as a
/// `domain_violation` (ureq itself only sees "host not found").
pub struct GuardedResolver {
    lookup: Lookup,
    policy: Arc<Policy>,
    pins: Vec<ResolvePin>,
    refusal: Arc<Mutex<Option<ToolError>>>,
    connected: Arc<Mutex<Vec<SocketAddr>>>,
}

impl fmt::Debug for GuardedResolver {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GuardedResolver")
            .field("pins", &self.pins)
            .finish_non_exhaustive()
    }
}

/// The name lookup: the system resolver, or a fixed answer in tests.
pub type Lookup = fn(&Uri, &Config, NextTimeout) -> Result<ResolvedSocketAddrs, ureq::Error>;

fn system_lookup(
    uri: &Uri,
    config: &Config,
    timeout: NextTimeout,
) -> Result<ResolvedSocketAddrs, ureq::Error> {
    DefaultResolver::default().resolve(uri, config, timeout)
}

/// What the resolver reports back to the call.
#[derive(Clone, Default)]
pub struct GuardReport {
    pub refusal: Arc<Mutex<Option<ToolError>>>,
    /// The addresses handed to the connector for the last resolution.
    pub addrs: Arc<Mutex<Vec<SocketAddr>>>,
}

impl GuardReport {
    pub fn take_refusal(&self) -> Option<ToolError> {
        self.refusal
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take()
    }
}

impl GuardedResolver {
    pub fn new(policy: Arc<Policy>, pins: Vec<ResolvePin>, report: &GuardReport) -> Self {
        Self::with_lookup(policy, pins, report, system_lookup)
    }

    pub fn with_lookup(
        policy: Arc<Policy>,
        pins: Vec<ResolvePin>,
        report: &GuardReport,
        lookup: Lookup,
    ) -> Self {
        Self {
            lookup,
            policy,
            pins,
            refusal: Arc::clone(&report.refusal),
            connected: Arc::clone(&report.addrs),
        }
    }

    fn refuse(&self, host: &str, detail: String) -> ureq::Error {
        let err = ToolError::Domain {
            host: host.to_owned(),
            detail,
        };
        *self
            .refusal
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(err);
        ureq::Error::HostNotFound
    }

    /// The addresses `host:port` may be connected to, or a refusal.
    fn allowed_addrs(
        &self,
        uri: &Uri,
        config: &Config,
        timeout: NextTimeout,
    ) -> Result<Vec<SocketAddr>, ureq::Error> {
        let raw_host = uri.host().ok_or(ureq::Error::HostNotFound)?;
        let host = policy_host(raw_host);
        let default_port = if uri.scheme_str() == Some("https") {
            443
        } else {
            80
        };
        let port = uri.port_u16().unwrap_or(default_port);
        // The call checked the host before sending; checking again here means no code path can
        // reach the network with a host the policy never saw.
        if !self.policy.domain_allowed(&host) {
            return Err(self.refuse(&host, format!("host {host} is not in x-allowed-domains")));
        }
        if let Some(pin) = self
            .pins
            .iter()
            .find(|p| policy_host(&p.host) == host && p.port == port)
        {
            return Ok(vec![SocketAddr::new(pin.addr, port)]);
        }
        if let Ok(ip) = host.parse::<IpAddr>() {
            // An IP literal the skill's own frontmatter lists is what the author asked for.
            return Ok(vec![SocketAddr::new(ip, port)]);
        }
        let resolved = (self.lookup)(uri, config, timeout)?;
        let mut refused = Vec::new();
        let allowed: Vec<SocketAddr> = resolved
            .iter()
            .filter(|addr| match refused_class(addr.ip()) {
                Some(class) => {
                    refused.push(format!("{} ({class})", addr.ip()));
                    false
                }
                None => true,
            })
            .copied()
            .collect();
        if allowed.is_empty() {
            return Err(self.refuse(
                &host,
                format!("address refused: {host} resolves to {}", refused.join(", ")),
            ));
        }
        Ok(allowed)
    }
}

impl Resolver for GuardedResolver {
    fn resolve(
        &self,
        uri: &Uri,
        config: &Config,
        timeout: NextTimeout,
    ) -> Result<ResolvedSocketAddrs, ureq::Error> {
        let addrs = self.allowed_addrs(uri, config, timeout)?;
        let mut out = self.empty();
        for addr in &addrs {
            if out.try_push(*addr).is_err() {
                break;
            }
        }
        *self
            .connected
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = addrs;
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn private_and_special_addresses_are_refused() {
        for refused in [
            "127.0.0.1",
            "127.255.0.1",
            "0.0.0.0",
            "10.1.2.3",
            "172.16.0.1",
            "172.31.255.255",
            "192.168.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "100.127.255.255",
            "224.0.0.1",
            "255.255.255.255",
            "::",
            "::1",
            "::ffff:127.0.0.1",
            "::ffff:169.254.169.254",
            "::127.0.0.1",
            "64:ff9b::a9fe:a9fe",
            "fc00::1",
            "fd12:3456::1",
            "fe80::1",
            "ff02::1",
        ] {
            assert!(
                refused_class(refused.parse().unwrap()).is_some(),
                "{refused}"
            );
        }
        for allowed in [
            "93.184.216.34",
            "172.32.0.1",
            "100.128.0.1",
            "8.8.8.8",
            "2606:4700::1111",
            "::ffff:8.8.8.8",
        ] {
            assert_eq!(refused_class(allowed.parse().unwrap()), None, "{allowed}");
        }
    }

    #[test]
    fn hosts_are_normalised_for_the_policy() {
        assert_eq!(policy_host("API.Example.COM."), "api.example.com");
        assert_eq!(policy_host("[::1]"), "::1");
    }
}
