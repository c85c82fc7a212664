//! `Host` and `Origin` validation against DNS rebinding (S-SEC-1, S-SEC-2, T56–T60).
//!
//! A page on an attacker's domain that re-resolves to 127.0.0.1 can make a browser send
//! requests to a local MCP server; such requests carry the attacker's name in `Host` and its
//! page's `Origin`. The rules, as pure functions over header values:
//!
//! - **Host.** With an empty allow-list the server assumes it serves loopback (it cannot know
//!   its bind address from inside a mounted service) and accepts only `localhost`,
//!   `127.0.0.1` and `[::1]`, any port. Otherwise an entry `name` accepts that host on any
//!   port, `name:port` exactly that, and `*` anything (for deployments behind a proxy that
//!   checks it). A request with no host at all is refused.
//! - **Origin.** A missing `Origin` is accepted: non-browser clients do not send one (T58).
//!   With an empty allow-list, `http` and `https` origins on the loopback names are accepted
//!   (any port); with a list, an origin must equal an entry (case-insensitive) or the list
//!   must contain `*`. The opaque origin `null` is refused unless listed.
//!
//! Comparison is ASCII case-insensitive (host names are). This module does not know statuses;
//! the endpoint maps a refusal to 403 through `ServerError`.

/// The host names a server with no `allowed_hosts` accepts.
const LOOPBACK_HOSTS: [&str; 3] = ["localhost", "127.0.0.1", "[::1]"];

/// The allow-list entry that accepts any host or origin.
const ANY: &str = "*";

/// Splits `host[:port]` (with `[v6]` brackets kept on the host) into host and optional port.
/// `None` when the shape is wrong (empty host, a non-numeric port, junk after `]`).
fn split_authority(authority: &str) -> Option<(&str, Option<&str>)> {
    let (host, port) = if authority.starts_with('[') {
        let end = authority.find(']')?;
        let (host, rest) = authority.split_at(end + 1);
        match rest {
            "" => (host, None),
            _ => (host, Some(rest.strip_prefix(':')?)),
        }
    } else {
        match authority.rsplit_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (authority, None),
        }
    };
    let port_ok = port.is_none_or(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()));
    (!host.is_empty() && port_ok).then_some((host, port))
}

fn is_loopback_name(host: &str) -> bool {
    LOOPBACK_HOSTS.iter().any(|h| h.eq_ignore_ascii_case(host))
}

/// Whether a request's host (the `Host` header, or the URI authority under HTTP/2) is allowed.
pub(crate) fn host_allowed(host: Option<&str>, allowed: &[String]) -> bool {
    let Some((name, port)) = host.and_then(split_authority) else {
        return false;
    };
    if allowed.is_empty() {
        return is_loopback_name(name);
    }
    allowed.iter().any(|entry| {
        if entry == ANY {
            return true;
        }
        match split_authority(entry) {
            Some((entry_name, None)) => entry_name.eq_ignore_ascii_case(name),
            Some((entry_name, Some(entry_port))) => {
                entry_name.eq_ignore_ascii_case(name) && port == Some(entry_port)
            }
            None => false,
        }
    })
}

/// Whether a request's `Origin` is allowed.
pub(crate) fn origin_allowed(origin: Option<&str>, allowed: &[String]) -> bool {
    let Some(origin) = origin else {
        return true;
    };
    if allowed.is_empty() {
        return is_loopback_origin(origin);
    }
    let origin = origin.trim_end_matches('/');
    allowed
        .iter()
        .any(|entry| entry == ANY || entry.trim_end_matches('/').eq_ignore_ascii_case(origin))
}

/// `http(s)://<loopback name>[:port]`, nothing else (no path, no userinfo).
fn is_loopback_origin(origin: &str) -> bool {
    let lower = origin.to_ascii_lowercase();
    let Some(authority) = lower
        .strip_prefix("http://")
        .or_else(|| lower.strip_prefix("https://"))
    else {
        return false;
    };
    split_authority(authority).is_some_and(|(host, _)| is_loopback_name(host))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(entries: &[&str]) -> Vec<String> {
        entries.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn default_hosts_are_loopback_with_any_port() {
        for host in [
            "localhost",
            "LOCALHOST:8080",
            "127.0.0.1:1",
            "[::1]",
            "[::1]:443",
        ] {
            assert!(host_allowed(Some(host), &[]), "{host}");
        }
        for host in [
            "evil.example",
            "evil.example:8080",
            "127.0.0.2",
            "localhost.evil.example",
            "[::2]:80",
            "localhost:",
            "localhost:80x",
            "",
        ] {
            assert!(!host_allowed(Some(host), &[]), "{host}");
        }
        assert!(!host_allowed(None, &[]));
    }

    #[test]
    fn configured_hosts() {
        let allowed = list(&["mcp.example.com", "api.example.com:8443"]);
        assert!(host_allowed(Some("MCP.example.com:1234"), &allowed));
        assert!(host_allowed(Some("api.example.com:8443"), &allowed));
        assert!(!host_allowed(Some("api.example.com:8080"), &allowed));
        assert!(!host_allowed(Some("localhost"), &allowed));
        assert!(host_allowed(Some("anything:1"), &list(&["*"])));
    }

    #[test]
    fn origins() {
        assert!(origin_allowed(None, &[]));
        for origin in [
            "http://localhost",
            "http://127.0.0.1:3000",
            "https://[::1]:8443",
        ] {
            assert!(origin_allowed(Some(origin), &[]), "{origin}");
        }
        for origin in [
            "http://evil.example",
            "null",
            "file://localhost",
            "http://localhost.evil.example",
            "http://localhost/path",
        ] {
            assert!(!origin_allowed(Some(origin), &[]), "{origin}");
        }
        let allowed = list(&["https://app.example.com"]);
        assert!(origin_allowed(Some("https://APP.example.com"), &allowed));
        assert!(!origin_allowed(Some("http://localhost"), &allowed));
        assert!(origin_allowed(Some("null"), &list(&["*"])));
    }
}
