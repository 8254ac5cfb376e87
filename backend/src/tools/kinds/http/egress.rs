//! Where an http tool may connect. By default nowhere inward: not loopback, private,
//! link-local, shared (CGNAT), reserved or documentation ranges (IPv4 and IPv6,
//! including IPv4-mapped, IPv4-translated, IPv4-compatible, NAT64 and 6to4 forms; the
//! local-use NAT64 and Teredo prefixes, whose IPv4 address cannot be read back for
//! certain, are private at best), and never a metadata, multicast, broadcast or
//! unspecified address. A tool may name the hosts it may reach (`allow_hosts`) and opt in to private ranges (`allow_private_networks`).
//! IPv4 link-local (169.254.0.0/16) counts as metadata: clouds serve instance metadata
//! and task or pod credentials there (169.254.169.254, 169.254.170.2, 169.254.170.23),
//! as AWS does on fd00:ec2::/32; so do Azure's WireServer (168.63.129.16) and Google's
//! IPv6 metadata server (fd20:ce::254).
//!
//! The check is made on the addresses a name resolves to, by the resolver the tool's
//! HTTP client connects through, so the connection goes to an address that was checked
//! (no window for DNS rebinding). Redirects are followed only within one origin. The
//! client ignores proxy settings (`HTTPS_PROXY` and the like): a proxy would resolve
//! the name itself, where this check cannot see the address.

use std::error::Error as StdError;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;

use reqwest::Url;
use reqwest::dns::{Addrs, Name, Resolve, Resolving};

/// What kind of place an address is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AddressClass {
    Public,
    /// Loopback, private, link-local and other ranges inside a network: reachable only
    /// with `allow_private_networks`.
    Private,
    /// Metadata and credential services, multicast, broadcast, unspecified: never.
    Forbidden,
}

/// Clouds' IPv6 metadata services: AWS's range for instance metadata and pod
/// credentials (fd00:ec2::/32) and Google's metadata server (fd20:ce::254).
fn is_metadata_v6(ip: Ipv6Addr) -> bool {
    ip.segments()[..2] == [0xfd00, 0x0ec2]
        || ip == Ipv6Addr::new(0xfd20, 0xce, 0, 0, 0, 0, 0, 0x254)
}

pub fn classify(ip: IpAddr) -> AddressClass {
    match ip {
        IpAddr::V4(v4) => classify_v4(v4),
        IpAddr::V6(v6) => classify_v6(v6),
    }
}

/// All of link-local, not a list of known services: clouds keep adding them there.
/// Besides: Alibaba's metadata and Azure's WireServer, which sit elsewhere.
fn is_metadata_v4(ip: Ipv4Addr) -> bool {
    ip.is_link_local()
        || ip == Ipv4Addr::new(100, 100, 100, 200)
        || ip == Ipv4Addr::new(168, 63, 129, 16)
}

fn classify_v4(ip: Ipv4Addr) -> AddressClass {
    let [a, b, c, _] = ip.octets();
    if is_metadata_v4(ip) || ip.is_unspecified() || ip.is_broadcast() || ip.is_multicast() || a == 0
    {
        return AddressClass::Forbidden;
    }
    let shared = a == 100 && (64..128).contains(&b);
    let protocol_assignments = a == 192 && b == 0 && c == 0;
    let benchmarking = a == 198 && (b == 18 || b == 19);
    let relay_anycast = a == 192 && b == 88 && c == 99;
    let reserved = a >= 240;
    if ip.is_loopback()
        || ip.is_private()
        || ip.is_documentation()
        || shared
        || protocol_assignments
        || benchmarking
        || relay_anycast
        || reserved
    {
        AddressClass::Private
    } else {
        AddressClass::Public
    }
}

fn classify_v6(ip: Ipv6Addr) -> AddressClass {
    if let Some(v4) = embedded_v4(ip) {
        return classify_v4(v4);
    }
    // A translator or relay on the operator's side carries these to IPv4 addresses this
    // check cannot read for certain: local-use NAT64 (64:ff9b:1::/48) places the IPv4
    // address by a prefix length only its network knows, Teredo (2001::/32) names a
    // server and a client. A metadata address in any place it could be read from
    // forbids it (other readings are mostly zeros); otherwise it is private.
    if let Some(candidates) = possible_v4(ip) {
        return if candidates.into_iter().any(is_metadata_v4) {
            AddressClass::Forbidden
        } else {
            AddressClass::Private
        };
    }
    if ip.is_unspecified() || ip.is_multicast() || is_metadata_v6(ip) {
        return AddressClass::Forbidden;
    }
    let segments = ip.segments();
    let site_local = segments[0] & 0xffc0 == 0xfec0;
    // 2001:db8::/32 and 3fff::/20.
    let documentation =
        segments[..2] == [0x2001, 0x0db8] || (segments[0] == 0x3fff && segments[1] < 0x1000);
    let discard = segments[..4] == [0x0100, 0, 0, 0];
    let benchmarking = segments[..3] == [0x2001, 2, 0];
    // Anycast for port control, TURN and DNS-SD: the nearest gateway answers.
    let gateway_anycast =
        segments[..7] == [0x2001, 1, 0, 0, 0, 0, 0] && (1..=3).contains(&segments[7]);
    let segment_routing = segments[0] == 0x5f00;
    if ip.is_loopback()
        || ip.is_unique_local()
        || ip.is_unicast_link_local()
        || site_local
        || documentation
        || discard
        || benchmarking
        || gateway_anycast
        || segment_routing
    {
        AddressClass::Private
    } else {
        AddressClass::Public
    }
}

/// The IPv4 address an IPv6 address stands for, in the forms that reach one:
/// IPv4-mapped, IPv4-translated (::ffff:0:0:0/96), IPv4-compatible, NAT64
/// (64:ff9b::/96) and 6to4 (2002::/16).
fn embedded_v4(ip: Ipv6Addr) -> Option<Ipv4Addr> {
    if let Some(v4) = ip.to_ipv4_mapped() {
        return Some(v4);
    }
    let s = ip.segments();
    let low =
        |hi: u16, lo: u16| Ipv4Addr::new((hi >> 8) as u8, hi as u8, (lo >> 8) as u8, lo as u8);
    if s[..6] == [0, 0, 0, 0, 0xffff, 0] {
        return Some(low(s[6], s[7]));
    }
    if s[..6] == [0, 0, 0, 0, 0, 0] && !ip.is_unspecified() && !ip.is_loopback() {
        return Some(low(s[6], s[7]));
    }
    if s[..6] == [0x64, 0xff9b, 0, 0, 0, 0] {
        return Some(low(s[6], s[7]));
    }
    if s[0] == 0x2002 {
        return Some(low(s[1], s[2]));
    }
    None
}

/// Every IPv4 address a local-use NAT64 or a Teredo address may stand for: RFC 6052's
/// places for the prefix lengths a /48 allows (/48, /56, /64, /96; bits 64–71 are
/// skipped), and Teredo's server and (inverted) client.
fn possible_v4(ip: Ipv6Addr) -> Option<Vec<Ipv4Addr>> {
    let b = ip.octets();
    let v4 = |octets: [u8; 4]| Ipv4Addr::from(octets);
    if ip.segments()[..3] == [0x64, 0xff9b, 1] {
        return Some(vec![
            v4([b[6], b[7], b[9], b[10]]),
            v4([b[7], b[9], b[10], b[11]]),
            v4([b[9], b[10], b[11], b[12]]),
            v4([b[12], b[13], b[14], b[15]]),
        ]);
    }
    if ip.segments()[..2] == [0x2001, 0] {
        return Some(vec![
            v4([b[4], b[5], b[6], b[7]]),
            v4([!b[12], !b[13], !b[14], !b[15]]),
        ]);
    }
    None
}

/// Why a destination was refused; found in a request error's source chain.
#[derive(Debug, Clone)]
pub struct EgressRefused(pub String);

impl fmt::Display for EgressRefused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "refused by the tool's egress policy: {}", self.0)
    }
}

impl StdError for EgressRefused {}

/// One tool's egress rules.
#[derive(Clone, Debug, Default)]
pub struct EgressPolicy {
    /// Lower-case exact hosts, or suffixes written `.example.com` / `*.example.com`.
    allow_hosts: Vec<String>,
    allow_private_networks: bool,
}

impl EgressPolicy {
    pub fn new(allow_hosts: &[String], allow_private_networks: bool) -> Result<Self, String> {
        let mut hosts = Vec::new();
        for host in allow_hosts {
            let host = host.trim().to_ascii_lowercase();
            let bare = host.trim_start_matches("*.").trim_start_matches('.');
            if bare.is_empty()
                || !bare
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | ':' | '[' | ']'))
            {
                return Err(format!("http.allow_hosts: `{host}` is not a host name"));
            }
            hosts.push(host.replacen("*.", ".", 1));
        }
        Ok(EgressPolicy {
            allow_hosts: hosts,
            allow_private_networks,
        })
    }

    fn host_allowed(&self, host: &str) -> bool {
        let host = host.to_ascii_lowercase();
        self.allow_hosts.is_empty()
            || self
                .allow_hosts
                .iter()
                .any(|allowed| match allowed.strip_prefix('.') {
                    Some(domain) => host.ends_with(allowed.as_str()) || host == domain,
                    None => &host == allowed,
                })
    }

    fn address_allowed(&self, ip: IpAddr) -> Result<(), EgressRefused> {
        match classify(ip) {
            AddressClass::Public => Ok(()),
            AddressClass::Private if self.allow_private_networks => Ok(()),
            AddressClass::Private => Err(EgressRefused(format!(
                "{ip} is a loopback or private address (allow_private_networks is off)"
            ))),
            AddressClass::Forbidden => Err(EgressRefused(format!(
                "{ip} is a metadata, multicast or unspecified address"
            ))),
        }
    }

    /// Checks a URL before it is requested: its scheme, its host against `allow_hosts`,
    /// and an address written in the URL itself (names are checked when resolved).
    pub fn check_url(&self, url: &Url) -> Result<(), EgressRefused> {
        if !matches!(url.scheme(), "http" | "https") {
            return Err(EgressRefused(format!(
                "the scheme `{}` is not http or https",
                url.scheme()
            )));
        }
        let Some(name) = url.host_str() else {
            return Err(EgressRefused("the URL has no host".to_owned()));
        };
        if !self.host_allowed(name) {
            return Err(EgressRefused(format!("{name} is not in allow_hosts")));
        }
        let literal = name.trim_start_matches('[').trim_end_matches(']');
        match literal.parse::<IpAddr>() {
            Ok(ip) => self.address_allowed(ip),
            // A name: checked on the addresses it resolves to.
            Err(_) => Ok(()),
        }
    }

    /// An HTTP client that connects only where this policy allows and follows
    /// redirects only within one origin.
    pub fn client(&self) -> Result<reqwest::Client, String> {
        crate::install_tls_provider();
        let redirects = self.clone();
        reqwest::Client::builder()
            .user_agent(concat!("toolgate/", env!("CARGO_PKG_VERSION")))
            .no_proxy()
            .dns_resolver(Arc::new(PolicyResolver {
                policy: self.clone(),
            }))
            .redirect(reqwest::redirect::Policy::custom(move |attempt| {
                let same_origin = attempt
                    .previous()
                    .last()
                    .is_some_and(|previous| previous.origin() == attempt.url().origin());
                if attempt.previous().len() > MAX_REDIRECTS {
                    attempt.error(EgressRefused("too many redirects".to_owned()))
                } else if !same_origin {
                    attempt.stop()
                } else if let Err(refused) = redirects.check_url(attempt.url()) {
                    attempt.error(refused)
                } else {
                    attempt.follow()
                }
            }))
            .build()
            .map_err(|err| format!("building the tool's HTTP client: {err}"))
    }
}

const MAX_REDIRECTS: usize = 5;

/// Resolves names and keeps only the addresses the policy allows.
struct PolicyResolver {
    policy: EgressPolicy,
}

impl Resolve for PolicyResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let policy = self.policy.clone();
        let host = name.as_str().to_owned();
        Box::pin(async move {
            if !policy.host_allowed(&host) {
                return Err(
                    Box::new(EgressRefused(format!("{host} is not in allow_hosts")))
                        as Box<dyn StdError + Send + Sync>,
                );
            }
            let resolved: Vec<SocketAddr> = tokio::net::lookup_host((host.as_str(), 0))
                .await
                .map_err(|err| Box::new(err) as Box<dyn StdError + Send + Sync>)?
                .collect();
            let mut refused = None;
            let allowed: Vec<SocketAddr> = resolved
                .into_iter()
                .filter(|addr| match policy.address_allowed(addr.ip()) {
                    Ok(()) => true,
                    Err(why) => {
                        refused.get_or_insert(why);
                        false
                    }
                })
                .collect();
            match (allowed.is_empty(), refused) {
                (true, Some(why)) => Err(Box::new(EgressRefused(format!(
                    "{host} resolves to {}",
                    why.0
                ))) as Box<dyn StdError + Send + Sync>),
                _ => Ok(Box::new(allowed.into_iter()) as Addrs),
            }
        })
    }
}

/// The egress refusal behind a request error, if that is what it was.
pub fn refusal(err: &reqwest::Error) -> Option<EgressRefused> {
    let mut source: Option<&(dyn StdError + 'static)> = Some(err);
    while let Some(current) = source {
        if let Some(refused) = current.downcast_ref::<EgressRefused>() {
            return Some(refused.clone());
        }
        source = current.source();
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn class(text: &str) -> AddressClass {
        classify(text.parse().expect("an address"))
    }

    #[test]
    fn inward_addresses_are_private_or_forbidden_in_every_form() {
        for private in [
            "127.0.0.1",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "100.64.0.1",
            "::1",
            "fc00::1",
            "fe80::1",
            "::ffff:127.0.0.1",
            "::ffff:10.0.0.1",
            "::127.0.0.1",
            "64:ff9b::7f00:1",
            "2002:7f00:1::",
            "fec0::1",
            // Local-use NAT64, whatever prefix length its network uses.
            "64:ff9b:1:7f00:1::",
            "64:ff9b:1::a00:1",
            // Teredo, benchmarking, the newer documentation prefix, SRv6.
            "2001:0:4136:e378:8000:63bf:3fff:fdd2",
            "2001:2::1",
            "3fff::1",
            "3fff:fff::1",
            "2001:1::1",
            "2001:1::3",
            "192.88.99.1",
            "5f00::1",
        ] {
            assert_eq!(class(private), AddressClass::Private, "{private}");
        }
        for forbidden in [
            "169.254.169.254",
            // ECS task and EKS pod credentials, and the rest of link-local.
            "169.254.170.2",
            "169.254.170.23",
            "169.254.1.1",
            "fd00:ec2::23",
            "fd20:ce::254",
            "168.63.129.16",
            "::ffff:169.254.170.2",
            "0.0.0.0",
            "255.255.255.255",
            "224.0.0.1",
            "::",
            "ff02::1",
            "fd00:ec2::254",
            "::ffff:169.254.169.254",
            "0.1.2.3",
            // IPv4-translated (SIIT) forms of the metadata address.
            "::ffff:0:a9fe:a9fe",
            "::ffff:0:169.254.169.254",
            // The metadata address through local-use NAT64, in each place a prefix
            // length may put it, and as Teredo's server or client.
            "64:ff9b:1:a9fe:a9:fe00::",
            "64:ff9b:1:a9:fe:a9fe::",
            "64:ff9b:1::a9:fea9:fe00:0",
            "64:ff9b:1::a9fe:a9fe",
            "2001:0:a9fe:a9fe::1",
            "2001:0:4136:e378:8000:63bf:5601:5601",
        ] {
            assert_eq!(class(forbidden), AddressClass::Forbidden, "{forbidden}");
        }
        for public in [
            "93.184.216.34",
            "2606:2800:220:1::",
            "8.8.8.8",
            "64:ff9b::808:808",
            "::ffff:0:808:808",
            "2001:4860:4860::8888",
            "3fff:1000::1",
        ] {
            assert_eq!(class(public), AddressClass::Public, "{public}");
        }
    }

    #[test]
    fn urls_are_checked_for_scheme_host_and_literal_address() {
        let default = EgressPolicy::default();
        let url = |text: &str| Url::parse(text).expect("a URL");
        assert!(default.check_url(&url("http://127.0.0.1:8080/x")).is_err());
        assert!(default.check_url(&url("http://[::ffff:7f00:1]/x")).is_err());
        assert!(
            default
                .check_url(&url("http://[::ffff:0:7f00:1]/x"))
                .is_err()
        );
        assert!(
            default
                .check_url(&url("http://[64:ff9b:1:7f00:1::]/x"))
                .is_err()
        );
        assert!(default.check_url(&url("file:///etc/passwd")).is_err());
        assert!(default.check_url(&url("https://example.com/x")).is_ok());
        let private = EgressPolicy::new(&[], true).expect("valid");
        assert!(private.check_url(&url("http://127.0.0.1:8080/x")).is_ok());
        assert!(private.check_url(&url("http://169.254.169.254/")).is_err());
        assert!(
            private
                .check_url(&url("http://169.254.170.2/v2/credentials/x"))
                .is_err()
        );
        let named = EgressPolicy::new(&["api.example.com".into(), "*.intuit.com".into()], false)
            .expect("valid");
        assert!(named.check_url(&url("https://api.example.com/")).is_ok());
        assert!(
            named
                .check_url(&url("https://quickbooks.api.intuit.com/"))
                .is_ok()
        );
        assert!(named.check_url(&url("https://evil.com/")).is_err());
        assert!(
            named
                .check_url(&url("https://api.example.com.evil.com/"))
                .is_err()
        );
        assert!(EgressPolicy::new(&["http://x/".into()], false).is_err());
    }
}
