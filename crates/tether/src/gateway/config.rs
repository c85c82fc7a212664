//! What a gateway runs and how ([`GatewayConfig`]), what its children are (`Launch`),
//! and the bounds every child shares.

use std::ffi::OsString;
use std::sync::Arc;
use std::time::Duration;

use super::in_process::InProcessServer;

/// Default for [`GatewayConfig::initialize_timeout`]: generous for a server started through
/// `npx` or `uvx` on a cold cache.
pub const DEFAULT_INITIALIZE_TIMEOUT: Duration = Duration::from_secs(30);

/// Default for [`GatewayConfig::max_line_bytes`]: the SSE event limit of `tether-sse`, so any
/// message the child may write can also be sent.
pub const DEFAULT_MAX_LINE_BYTES: usize = 16 * 1024 * 1024;

/// How long a child may take to exit after its stdin closed before its process group is
/// killed.
pub(super) const EXIT_GRACE: Duration = Duration::from_secs(2);

/// What the gateway's children are.
#[derive(Clone)]
pub(crate) enum Launch {
    /// A process running [`GatewayConfig::program`], spoken to over its stdio.
    Process,
    /// A server in this process, handed messages as values (`in_process`).
    #[cfg_attr(
        not(feature = "rmcp"),
        expect(
            dead_code,
            reason = "only the rmcp adapter launches in-process servers"
        )
    )]
    InProcess(Arc<dyn InProcessServer>),
}

impl std::fmt::Debug for Launch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Process => "Process",
            Self::InProcess(_) => "InProcess",
        })
    }
}

/// The server→client requests a 2026-07-28 client answers, as `input_required` questions.
pub(super) const QUESTION_METHODS: [&str; 3] =
    ["elicitation/create", "sampling/createMessage", "roots/list"];

/// Messages queued for a child's input before writers wait.
pub(super) const STDIN_QUEUE: usize = 64;

/// Which callers share a child of the gateway.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum ChildScope {
    /// One child per legacy session, started by its `initialize` with the client's own
    /// handshake (the default); 2026-07-28 requests get one per principal.
    #[default]
    Session,
    /// One child per principal, for its legacy sessions and its 2026-07-28 requests alike,
    /// started on first use with the gateway's handshake.
    Principal,
    /// One child for every caller, started on first use with the gateway's handshake.
    Shared,
}

/// What the gateway runs and how.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct GatewayConfig {
    /// The stdio server's program.
    pub program: OsString,
    /// Its arguments.
    pub args: Vec<OsString>,
    /// How long the child may take to answer `initialize`.
    pub initialize_timeout: Duration,
    /// The longest line the child may write to stdout.
    pub max_line_bytes: usize,
    /// Which callers share a child. With `Principal` or `Shared`, the child's ids and
    /// progress tokens are the gateway's (as for 2026-07-28 requests), and what it says
    /// outside any request has no session to go to and is dropped.
    pub children: ChildScope,
    /// Children running at once at most (checked as each starts); a request that would
    /// start one more is refused with -32603 and `data.reason` `busy`. `None`: no bound.
    pub max_children: Option<usize>,
}

impl GatewayConfig {
    /// Runs `program` with `args`, with the default limits.
    pub fn new(program: impl Into<OsString>, args: impl IntoIterator<Item = OsString>) -> Self {
        Self {
            program: program.into(),
            args: args.into_iter().collect(),
            initialize_timeout: DEFAULT_INITIALIZE_TIMEOUT,
            max_line_bytes: DEFAULT_MAX_LINE_BYTES,
            children: ChildScope::Session,
            max_children: None,
        }
    }
}

/// The separator of [`FederationConfig::separator`] by default: `py_count` is the `count`
/// tool of the upstream named `py`.
pub const DEFAULT_SEPARATOR: &str = "_";

/// What a [`FederatedGateway`](super::federation::FederatedGateway) runs: its upstreams, and how their
/// names are joined to the names of their tools and prompts.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct FederationConfig {
    /// The upstreams, in the order lists show them.
    pub upstreams: Vec<UpstreamConfig>,
    /// Between an upstream's prefix and a tool's or prompt's own name.
    pub separator: String,
}

impl FederationConfig {
    /// These upstreams, joined by [`DEFAULT_SEPARATOR`].
    #[must_use]
    pub fn new(upstreams: Vec<UpstreamConfig>) -> Self {
        Self {
            upstreams,
            separator: DEFAULT_SEPARATOR.to_owned(),
        }
    }

    /// Checks that every federated name has exactly one upstream: names present and
    /// distinct, prefixes of visible characters, and no prefix that, with the separator,
    /// begins another upstream's (`a` and `a_b` would both claim `a_b_x`).
    ///
    /// # Errors
    ///
    /// The first problem found, naming the upstreams involved.
    pub fn validate(&self) -> Result<(), FederationError> {
        if self.upstreams.is_empty() {
            return Err(FederationError::NoUpstreams);
        }
        if self.separator.is_empty() || !self.separator.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(FederationError::BadSeparator(self.separator.clone()));
        }
        for (index, upstream) in self.upstreams.iter().enumerate() {
            for (label, value) in [
                ("name", upstream.name.as_str()),
                ("prefix", upstream.prefix()),
            ] {
                if value.is_empty() || !value.bytes().all(|b| b.is_ascii_graphic()) {
                    return Err(FederationError::BadName {
                        upstream: upstream.name.clone(),
                        what: label,
                    });
                }
            }
            for earlier in &self.upstreams[..index] {
                if earlier.name == upstream.name {
                    return Err(FederationError::DuplicateName(upstream.name.clone()));
                }
                let (a, b) = (
                    format!("{}{}", earlier.prefix(), self.separator),
                    format!("{}{}", upstream.prefix(), self.separator),
                );
                if a.starts_with(&b) || b.starts_with(&a) {
                    return Err(FederationError::PrefixCollision {
                        first: earlier.name.clone(),
                        second: upstream.name.clone(),
                        separator: self.separator.clone(),
                    });
                }
            }
        }
        Ok(())
    }
}

/// What an upstream of a federation runs.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum UpstreamServer {
    /// A stdio server, run as the gateway runs one (a child per legacy session, one per
    /// 2026-07-28 principal).
    Command(GatewayConfig),
    /// A remote Streamable HTTP server, reached through tether's client.
    #[cfg(feature = "client")]
    Url(RemoteConfig),
}

/// A remote upstream: where it is and how tether's client reaches it
/// ([`RemoteGateway`](super::remote::RemoteGateway)).
#[cfg(feature = "client")]
#[derive(Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct RemoteConfig {
    /// The remote's MCP endpoint, `http://…/mcp` or `https://…/mcp`.
    pub url: String,
    /// Headers sent on every request to it (an API key), never the caller's.
    pub headers: Vec<(String, String)>,
}

/// The headers' names only: their values are credentials.
#[cfg(feature = "client")]
impl std::fmt::Debug for RemoteConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<&str> = self.headers.iter().map(|(name, _)| name.as_str()).collect();
        f.debug_struct("RemoteConfig")
            .field("url", &self.url)
            .field("headers", &names)
            .finish()
    }
}

#[cfg(feature = "client")]
impl RemoteConfig {
    /// The server at `url`, with no credentials.
    #[must_use]
    pub fn new(url: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            headers: Vec::new(),
        }
    }
}

/// One upstream of a federation: its server, what it is called, and which of its tools and
/// prompts callers may see.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct UpstreamConfig {
    /// Its name, in logs and errors, and the prefix of its names unless `prefix` is set.
    pub name: String,
    /// The prefix of its tools' and prompts' federated names, if not its name.
    pub prefix: Option<String>,
    /// The server.
    pub server: UpstreamServer,
    /// Which tools callers see and may call.
    pub tools: NameFilter,
    /// Which prompts callers see and may get.
    pub prompts: NameFilter,
    /// Requests it serves at once at most; one more is refused with -32603 and
    /// `data.reason` `busy`. `None`: no bound.
    pub max_in_flight: Option<usize>,
}

impl UpstreamConfig {
    /// An upstream called `name` running `program` with `args`, every tool and prompt shown.
    pub fn command(
        name: impl Into<String>,
        program: impl Into<OsString>,
        args: impl IntoIterator<Item = OsString>,
    ) -> Self {
        Self {
            name: name.into(),
            prefix: None,
            server: UpstreamServer::Command(GatewayConfig::new(program, args)),
            tools: NameFilter::default(),
            prompts: NameFilter::default(),
            max_in_flight: None,
        }
    }

    /// An upstream called `name` at a remote server, every tool and prompt shown.
    #[cfg(feature = "client")]
    pub fn url(name: impl Into<String>, remote: RemoteConfig) -> Self {
        Self {
            name: name.into(),
            prefix: None,
            server: UpstreamServer::Url(remote),
            tools: NameFilter::default(),
            prompts: NameFilter::default(),
            max_in_flight: None,
        }
    }

    /// The prefix of its federated names.
    #[must_use]
    pub fn prefix(&self) -> &str {
        self.prefix.as_deref().unwrap_or(&self.name)
    }
}

/// Allow and deny rules over names; a pattern is a name, with `*` matching any run of
/// characters. A name is allowed when no `allow` is given or one matches, and no `deny`
/// matches.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct NameFilter {
    /// Patterns of the names shown; empty shows all.
    pub allow: Vec<String>,
    /// Patterns of the names hidden, whatever `allow` says.
    pub deny: Vec<String>,
}

impl NameFilter {
    /// These rules.
    #[must_use]
    pub fn new(allow: Vec<String>, deny: Vec<String>) -> Self {
        Self { allow, deny }
    }

    /// Whether `name` is shown and may be used.
    #[must_use]
    pub fn allows(&self, name: &str) -> bool {
        let matches = |pattern: &String| glob_matches(pattern, name);
        (self.allow.is_empty() || self.allow.iter().any(matches)) && !self.deny.iter().any(matches)
    }
}

/// Whether `name` matches `pattern`, whose `*`s match any run of characters.
fn glob_matches(pattern: &str, name: &str) -> bool {
    let mut parts = pattern.split('*');
    let first = parts.next().unwrap_or("");
    let Some(mut rest) = name.strip_prefix(first) else {
        return false;
    };
    let parts: Vec<&str> = parts.collect();
    let Some((last, middle)) = parts.split_last() else {
        return rest.is_empty();
    };
    for part in middle {
        match rest.find(part) {
            Some(at) => rest = &rest[at + part.len()..],
            None => return false,
        }
    }
    rest.len() >= last.len() && rest.ends_with(last)
}

/// Why a [`FederationConfig`] cannot be served.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum FederationError {
    /// There is nothing to federate.
    #[error("no upstreams: give at least one")]
    NoUpstreams,
    /// The separator is empty or holds spaces or control characters.
    #[error("the separator {0:?} must be one or more visible characters")]
    BadSeparator(String),
    /// A name or prefix is empty or holds spaces or control characters.
    #[error("upstream {upstream:?}: its {what} must be one or more visible characters")]
    BadName {
        /// The upstream's name.
        upstream: String,
        /// `name` or `prefix`.
        what: &'static str,
    },
    /// Two upstreams have the same name.
    #[error("two upstreams are named {0:?}")]
    DuplicateName(String),
    /// One upstream's prefix and separator begin the other's, so a federated name could
    /// belong to either.
    #[error(
        "upstreams {first:?} and {second:?} collide: with the separator {separator:?}, one's \
         prefix begins the other's, so a name could belong to both; give one a `prefix`"
    )]
    PrefixCollision {
        /// The upstream listed first.
        first: String,
        /// The upstream listed second.
        second: String,
        /// The separator.
        separator: String,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    fn upstream(name: &str) -> UpstreamConfig {
        UpstreamConfig::command(name, "true", [])
    }

    #[test]
    fn globs_match_whole_names() {
        for (pattern, name, matches) in [
            ("count", "count", true),
            ("count", "counter", false),
            ("get_*", "get_user", true),
            ("get_*", "set_user", false),
            ("*_user", "get_user", true),
            ("*", "anything", true),
            ("a*b*c", "aXbYc", true),
            ("a*b*c", "aXcYb", false),
            ("ab*ba", "aba", false),
        ] {
            assert_eq!(glob_matches(pattern, name), matches, "{pattern} ~ {name}");
        }
    }

    #[test]
    fn deny_wins_over_allow_and_no_allow_allows_all() {
        let filter = NameFilter::new(vec!["get_*".into()], vec!["get_secret".into()]);
        assert!(filter.allows("get_user"));
        assert!(!filter.allows("get_secret"));
        assert!(!filter.allows("delete_user"));
        assert!(NameFilter::new(vec![], vec!["rm".into()]).allows("ls"));
    }

    #[test]
    fn validation_refuses_what_would_route_ambiguously() {
        let config = |upstreams: Vec<UpstreamConfig>| FederationConfig::new(upstreams);
        assert_eq!(config(vec![]).validate(), Err(FederationError::NoUpstreams));
        assert_eq!(
            config(vec![upstream("a"), upstream("a")]).validate(),
            Err(FederationError::DuplicateName("a".into()))
        );
        assert!(matches!(
            config(vec![upstream("a"), upstream("a_b")]).validate(),
            Err(FederationError::PrefixCollision { first, second, .. }) if first == "a" && second == "a_b"
        ));
        let mut renamed = upstream("a_b");
        renamed.prefix = Some("ab".into());
        assert_eq!(config(vec![upstream("a"), renamed]).validate(), Ok(()));
        assert!(matches!(
            config(vec![upstream("a b")]).validate(),
            Err(FederationError::BadName { what: "name", .. })
        ));
        let mut spaced = config(vec![upstream("a")]);
        spaced.separator = " ".into();
        assert!(matches!(
            spaced.validate(),
            Err(FederationError::BadSeparator(_))
        ));
        assert_eq!(
            config(vec![upstream("py"), upstream("ts")]).validate(),
            Ok(())
        );
    }
}
