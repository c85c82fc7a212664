//! `tether serve --config FILE`: the gateway's TOML file (docs/GATEWAY.md).
//!
//! The file has `[[upstream]]` tables, the upstreams of a [`FederatedGateway`]
//! (`tether::gateway`), an optional top-level `separator`, and an optional `[serve]` table
//! whose keys are `tether serve`'s own flags by their long names (`bind = "127.0.0.1:9000"`,
//! `allowed-origin = ["…"]`, `json-response = true`). Flags go in as command-line arguments
//! ([`expand_argv`]), ahead of the user's, and only where the command line does not give the
//! flag, so the command line wins and every flag is settable without a second list of them.
//!
//! Every error names the file, the line and the key: unknown keys and wrong types through
//! serde's spans, what [`FederationConfig::validate`] refuses at the upstream's `name`, and
//! a `[serve]` value that `tether serve` refuses at its key.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::parser::ValueSource;
use serde::Deserialize;
use tether::gateway::{
    ChildScope, FederationConfig, FederationError, NameFilter, RemoteConfig, UpstreamConfig,
    UpstreamServer,
};
use toml::Spanned;

use crate::UsageError;

/// The file as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    separator: Option<Spanned<String>>,
    #[serde(default)]
    serve: BTreeMap<Spanned<String>, Spanned<toml::Value>>,
    #[serde(default)]
    upstream: Vec<Upstream>,
}

/// One `[[upstream]]` table.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Upstream {
    name: Spanned<String>,
    command: Option<Spanned<Vec<String>>>,
    url: Option<Spanned<String>>,
    prefix: Option<String>,
    init_timeout_secs: Option<Spanned<u64>>,
    /// `command` upstreams: who shares a child, `session` (the default), `principal` or
    /// `shared`.
    children: Option<Spanned<Children>>,
    /// `command` upstreams: children running at once at most.
    max_children: Option<Spanned<usize>>,
    /// Requests served at once at most.
    max_in_flight: Option<Spanned<usize>>,
    /// `url` upstreams: headers sent on every request (an API key).
    #[serde(default)]
    headers: BTreeMap<String, String>,
    /// `url` upstreams: a file holding the bearer token sent to the remote server; relative
    /// to the config file's directory.
    bearer_token_file: Option<Spanned<PathBuf>>,
    #[serde(default)]
    allow_tools: Vec<String>,
    #[serde(default)]
    deny_tools: Vec<String>,
    #[serde(default)]
    allow_prompts: Vec<String>,
    #[serde(default)]
    deny_prompts: Vec<String>,
}

/// `children = "…"`.
#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(rename_all = "lowercase")]
enum Children {
    Session,
    Principal,
    Shared,
}

/// A config file read and checked.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Loaded {
    pub(crate) federation: FederationConfig,
    /// The `[serve]` table, by key: its value and line.
    serve: BTreeMap<String, (toml::Value, usize)>,
}

impl Loaded {
    /// Whether `other`'s `[serve]` table says the same (a reload cannot change it).
    pub(crate) fn same_serve_table(&self, other: &Self) -> bool {
        let values = |loaded: &Self| {
            loaded
                .serve
                .iter()
                .map(|(key, (value, _))| (key.clone(), value.clone()))
                .collect::<Vec<_>>()
        };
        values(self) == values(other)
    }
}

/// Where in the file something is, for errors.
struct Located<'a> {
    path: &'a Path,
    text: &'a str,
}

impl Located<'_> {
    fn line(&self, offset: usize) -> usize {
        self.text[..offset.min(self.text.len())]
            .matches('\n')
            .count()
            + 1
    }

    fn error(&self, offset: usize, message: impl std::fmt::Display) -> UsageError {
        UsageError(format!(
            "{}:{}: {message}",
            self.path.display(),
            self.line(offset)
        ))
    }
}

/// Reads and checks the config file at `path`.
pub(crate) fn load(path: &Path) -> Result<Loaded, UsageError> {
    contents(path, std::fs::read(path))
}

/// [`load`] of what reading `path` gave (a reload has read it already, to see it changed).
pub(crate) fn contents(path: &Path, read: std::io::Result<Vec<u8>>) -> Result<Loaded, UsageError> {
    let bytes =
        read.map_err(|error| UsageError(format!("--config {}: {error}", path.display())))?;
    let text = String::from_utf8(bytes)
        .map_err(|error| UsageError(format!("--config {}: not UTF-8: {error}", path.display())))?;
    parse(path, &text)
}

/// [`load`] of `text`, as read from `path`.
fn parse(path: &Path, text: &str) -> Result<Loaded, UsageError> {
    let at = Located { path, text };
    let file: File = toml::from_str(text).map_err(|error| {
        let offset = error.span().map_or(0, |span| span.start);
        at.error(offset, error.message().trim_end())
    })?;
    let mut upstreams = Vec::new();
    let mut name_lines = Vec::new();
    for upstream in file.upstream {
        let name_at = upstream.name.span().start;
        let name = upstream.name.into_inner();
        let mut config = match (upstream.command, upstream.url) {
            (Some(command), None) => {
                let command_at = command.span().start;
                let mut words = command.into_inner().into_iter().map(OsString::from);
                let Some(program) = words.next() else {
                    return Err(at.error(command_at, format!("upstream {name:?}: `command` is empty; give the program and its arguments")));
                };
                if let Some(key) = [
                    (!upstream.headers.is_empty()).then_some("headers"),
                    upstream
                        .bearer_token_file
                        .as_ref()
                        .map(|_| "bearer_token_file"),
                ]
                .into_iter()
                .flatten()
                .next()
                {
                    return Err(at.error(
                        command_at,
                        format!("upstream {name:?}: `{key}` is for `url` upstreams"),
                    ));
                }
                UpstreamConfig::command(name.clone(), program, words)
            }
            (None, Some(url)) => {
                let url_at = url.span().start;
                let url = url.into_inner();
                if !(url.starts_with("http://") || url.starts_with("https://")) {
                    return Err(at.error(
                        url_at,
                        format!("upstream {name:?}: `url` must be an http:// or https:// URL"),
                    ));
                }
                let mut remote = RemoteConfig::new(url);
                remote.headers = upstream.headers.clone().into_iter().collect();
                if let Some(file) = &upstream.bearer_token_file {
                    let file_path = path.parent().unwrap_or(Path::new(".")).join(file.get_ref());
                    let token = crate::remote::read_secret_file("bearer_token_file", &file_path)
                        .map_err(|error| {
                            at.error(file.span().start, format!("upstream {name:?}: {error}"))
                        })?;
                    remote
                        .headers
                        .push(("Authorization".to_owned(), format!("Bearer {token}")));
                }
                UpstreamConfig::url(name.clone(), remote)
            }
            (Some(_), Some(url)) => {
                return Err(at.error(
                    url.span().start,
                    format!("upstream {name:?}: give `command` or `url`, not both"),
                ));
            }
            (None, None) => {
                return Err(at.error(
                    name_at,
                    format!("upstream {name:?} needs `command = [\"program\", \"arg\", …]` or `url = \"http://…/mcp\"`"),
                ));
            }
        };
        config.prefix = upstream.prefix;
        if let Some(timeout) = upstream.init_timeout_secs {
            let timeout_at = timeout.span().start;
            let UpstreamServer::Command(server) = &mut config.server else {
                return Err(at.error(
                    timeout_at,
                    format!("upstream {name:?}: `init_timeout_secs` is for `command` upstreams"),
                ));
            };
            if *timeout.get_ref() == 0 {
                return Err(at.error(
                    timeout_at,
                    format!("upstream {name:?}: `init_timeout_secs` must be at least 1"),
                ));
            }
            server.initialize_timeout = Duration::from_secs(timeout.into_inner());
        }
        if let Some(children) = upstream.children {
            let UpstreamServer::Command(server) = &mut config.server else {
                return Err(at.error(
                    children.span().start,
                    format!("upstream {name:?}: `children` is for `command` upstreams"),
                ));
            };
            server.children = match children.into_inner() {
                Children::Session => ChildScope::Session,
                Children::Principal => ChildScope::Principal,
                Children::Shared => ChildScope::Shared,
            };
        }
        for (key, limit) in [
            ("max_children", &upstream.max_children),
            ("max_in_flight", &upstream.max_in_flight),
        ] {
            if let Some(limit) = limit
                && *limit.get_ref() == 0
            {
                return Err(at.error(
                    limit.span().start,
                    format!("upstream {name:?}: `{key}` must be at least 1"),
                ));
            }
        }
        if let Some(max) = upstream.max_children {
            let UpstreamServer::Command(server) = &mut config.server else {
                return Err(at.error(
                    max.span().start,
                    format!("upstream {name:?}: `max_children` is for `command` upstreams"),
                ));
            };
            server.max_children = Some(max.into_inner());
        }
        config.max_in_flight = upstream.max_in_flight.map(Spanned::into_inner);
        config.tools = NameFilter::new(upstream.allow_tools, upstream.deny_tools);
        config.prompts = NameFilter::new(upstream.allow_prompts, upstream.deny_prompts);
        name_lines.push((name, name_at));
        upstreams.push(config);
    }
    let mut federation = FederationConfig::new(upstreams);
    let separator_at = file.separator.as_ref().map_or(0, |s| s.span().start);
    if let Some(separator) = file.separator {
        federation.separator = separator.into_inner();
    }
    federation.validate().map_err(|error| {
        // At the upstream the error is about: the later one of two.
        let named = match &error {
            FederationError::DuplicateName(name) => Some(name.as_str()),
            FederationError::PrefixCollision { second, .. } => Some(second.as_str()),
            FederationError::BadName { upstream, .. } => Some(upstream.as_str()),
            _ => None,
        };
        let offset = match (&error, named) {
            (FederationError::BadSeparator(_), _) => separator_at,
            (_, Some(named)) => name_lines
                .iter()
                .rev()
                .find(|(name, _)| name == named)
                .map_or(0, |(_, at)| *at),
            _ => 0,
        };
        at.error(offset, error)
    })?;
    let serve = file
        .serve
        .into_iter()
        .map(|(key, value)| {
            let line = at.line(key.span().start);
            (key.into_inner(), (value.into_inner(), line))
        })
        .collect();
    Ok(Loaded { federation, serve })
}

/// The arguments the `[serve]` table of `--config`'s file adds, and where each came from.
#[derive(Debug, Default)]
pub(crate) struct Expansion {
    /// The file, when `--config` was given.
    path: Option<PathBuf>,
    /// Each added flag (`--bind`), with the key and line it came from.
    added: Vec<(String, String, usize)>,
}

impl Expansion {
    /// `error` (of parsing the expanded arguments) told at the file's line, when a value the
    /// file gave is what `tether serve` refused.
    pub(crate) fn locate(&self, error: &clap::Error) -> Option<UsageError> {
        let path = self.path.as_ref()?;
        let refused = match error.get(clap::error::ContextKind::InvalidArg)? {
            clap::error::ContextValue::String(arg) => arg.clone(),
            _ => return None,
        };
        let (_, key, line) = self
            .added
            .iter()
            .find(|(flag, ..)| refused.split([' ', '=']).next() == Some(flag.as_str()))?;
        let message = error.kind().as_str().unwrap_or("invalid value");
        let detail = error
            .render()
            .to_string()
            .lines()
            .next()
            .unwrap_or_default()
            .trim_start_matches("error: ")
            .to_owned();
        Some(UsageError(format!(
            "{}:{line}: [serve] key `{key}`: {message}: {detail}",
            path.display()
        )))
    }
}

/// `argv` with the `[serve]` table of `tether serve --config FILE` put in as flags, for
/// `command` (the whole `tether` command) to parse: each key the command line does not give,
/// right after `serve`. Anything else (no `serve`, no `--config`, arguments clap refuses) is
/// left for the real parse to report.
///
/// # Errors
///
/// The file cannot be read or is not valid, or `[serve]` names no flag of `tether serve` or
/// gives one a value of the wrong shape.
pub(crate) fn expand_argv(
    mut argv: Vec<OsString>,
    command: clap::Command,
) -> Result<(Vec<OsString>, Expansion), UsageError> {
    let Ok(matches) = command.clone().try_get_matches_from(&argv) else {
        return Ok((argv, Expansion::default()));
    };
    let Some(("serve", serve)) = matches.subcommand() else {
        return Ok((argv, Expansion::default()));
    };
    let Some(path) = serve.get_one::<PathBuf>("config").cloned() else {
        return Ok((argv, Expansion::default()));
    };
    let loaded = load(&path)?;
    let Some(serve_command) = command.find_subcommand("serve") else {
        return Ok((argv, Expansion::default()));
    };
    let mut added = Vec::new();
    let mut arguments = Vec::new();
    for (key, (value, line)) in &loaded.serve {
        let at = |message: String| {
            UsageError(format!(
                "{}:{line}: [serve] key `{key}`: {message}",
                path.display()
            ))
        };
        let Some(arg) = serve_command
            .get_arguments()
            .find(|arg| arg.get_long() == Some(key.as_str()))
            .filter(|arg| arg.get_id() != "config")
        else {
            return Err(at("`tether serve` has no such flag".to_owned()));
        };
        if serve.value_source(arg.get_id().as_str()) == Some(ValueSource::CommandLine) {
            continue;
        }
        let flag = format!("--{key}");
        let takes_value = arg.get_action().takes_values();
        let repeatable = matches!(arg.get_action(), clap::ArgAction::Append);
        let words: Vec<String> = match value {
            toml::Value::Boolean(on) if !takes_value => {
                if *on {
                    vec![flag.clone()]
                } else {
                    Vec::new()
                }
            }
            toml::Value::Boolean(_) => {
                return Err(at("takes a value, not true or false".to_owned()));
            }
            _ if !takes_value => return Err(at("is a switch: give true or false".to_owned())),
            toml::Value::Array(values) if repeatable => values
                .iter()
                .map(|value| scalar(value).map(|value| format!("{flag}={value}")))
                .collect::<Option<_>>()
                .ok_or_else(|| at("its list must hold strings or numbers".to_owned()))?,
            toml::Value::Array(_) => return Err(at("takes one value, not a list".to_owned())),
            value => vec![format!(
                "{flag}={}",
                scalar(value).ok_or_else(|| at("must be a string or a number".to_owned()))?
            )],
        };
        if !words.is_empty() {
            added.push((flag, key.clone(), *line));
        }
        arguments.extend(words.into_iter().map(OsString::from));
    }
    // `tether` takes no options before its subcommand, so `serve` is the second word.
    let at = argv
        .iter()
        .position(|word| word == "serve")
        .map_or(argv.len(), |i| i + 1);
    argv.splice(at..at, arguments);
    Ok((
        argv,
        Expansion {
            path: Some(path),
            added,
        },
    ))
}

/// A TOML string, integer or float as a flag's value.
fn scalar(value: &toml::Value) -> Option<String> {
    match value {
        toml::Value::String(text) => Some(text.clone()),
        toml::Value::Integer(n) => Some(n.to_string()),
        toml::Value::Float(x) => Some(x.to_string()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(text: &str) -> Result<Loaded, String> {
        parse(Path::new("gw.toml"), text).map_err(|error| error.0)
    }

    #[test]
    fn upstreams_become_the_federation() {
        let loaded = parsed(
            r#"
separator = "__"
[[upstream]]
name = "py"
command = ["python3", "server.py", "--stdio"]
deny_tools = ["secret*"]
init_timeout_secs = 5
children = "shared"

[[upstream]]
name = "ts"
prefix = "node"
command = ["node", "server.mjs"]

[[upstream]]
name = "far"
url = "https://mcp.example.com/mcp"
headers = { "X-Api-Key" = "k" }
"#,
        )
        .unwrap();
        let [py, ts, far] = loaded.federation.upstreams.as_slice() else {
            panic!("three upstreams");
        };
        assert_eq!(loaded.federation.separator, "__");
        let UpstreamServer::Command(server) = &py.server else {
            panic!("py runs a command");
        };
        assert_eq!(server.program, "python3");
        assert_eq!(server.args, ["server.py", "--stdio"]);
        assert_eq!(server.initialize_timeout, Duration::from_secs(5));
        assert_eq!(server.children, ChildScope::Shared);
        let UpstreamServer::Command(node) = &ts.server else {
            panic!("ts runs a command");
        };
        assert_eq!(node.children, ChildScope::Session, "the default");
        assert!(!py.tools.allows("secret_thing") && py.tools.allows("count"));
        assert_eq!(ts.prefix(), "node");
        let UpstreamServer::Url(remote) = &far.server else {
            panic!("far is remote");
        };
        assert_eq!(remote.url, "https://mcp.example.com/mcp");
        assert_eq!(remote.headers, [("X-Api-Key".to_owned(), "k".to_owned())]);
    }

    #[test]
    fn errors_name_the_file_line_and_key() {
        let cases = [
            (
                "[[upstream]]\nname = \"a\"\ncommand = [\"x\"]\ncolour = 1\n",
                "gw.toml:4:",
                "colour",
            ),
            (
                "[[upstream]]\nname = \"a\"\n",
                "gw.toml:2:",
                "needs `command",
            ),
            (
                "[[upstream]]\nname = \"a\"\ncommand = []\n",
                "gw.toml:3:",
                "`command` is empty",
            ),
            (
                "[[upstream]]\nname = \"a\"\ncommand = [\"x\"]\n[[upstream]]\nname = \"a\"\ncommand = [\"y\"]\n",
                "gw.toml:5:",
                "two upstreams are named \"a\"",
            ),
            (
                "[[upstream]]\nname = \"a\"\ncommand = [\"x\"]\n[[upstream]]\nname = \"a_b\"\ncommand = [\"y\"]\n",
                "gw.toml:5:",
                "collide",
            ),
            (
                "[[upstream]]\nname = \"r\"\nurl = \"ftp://x/mcp\"\n",
                "gw.toml:3:",
                "http:// or https://",
            ),
            (
                "[[upstream]]\nname = \"r\"\nurl = \"http://x/mcp\"\ninit_timeout_secs = 3\n",
                "gw.toml:4:",
                "for `command` upstreams",
            ),
            (
                "[[upstream]]\nname = \"r\"\nurl = \"http://x/mcp\"\nbearer_token_file = \"/nonexistent/token\"\n",
                "gw.toml:4:",
                "bearer_token_file",
            ),
            (
                "[[upstream]]\nname = \"r\"\ncommand = [\"x\"]\nheaders = { a = \"b\" }\n",
                "gw.toml:3:",
                "for `url` upstreams",
            ),
            (
                "[[upstream]]\nname = \"a\"\ncommand = \"x\"\n",
                "gw.toml:3:",
                "sequence",
            ),
            ("", "gw.toml:1:", "no upstreams"),
            ("[[upstream]\n", "gw.toml:1:", ""),
            (
                "[[upstream]]\nname = \"r\"\nurl = \"http://x/mcp\"\nchildren = \"shared\"\n",
                "gw.toml:4:",
                "for `command` upstreams",
            ),
            (
                "[[upstream]]\nname = \"a\"\ncommand = [\"x\"]\nmax_in_flight = 0\n",
                "gw.toml:4:",
                "at least 1",
            ),
            (
                "[[upstream]]\nname = \"r\"\nurl = \"http://x/mcp\"\nmax_children = 2\n",
                "gw.toml:4:",
                "for `command` upstreams",
            ),
            (
                "[[upstream]]\nname = \"a\"\ncommand = [\"x\"]\nchildren = \"many\"\n",
                "gw.toml:4:",
                "unknown variant",
            ),
        ];
        for (text, at, says) in cases {
            let error = parsed(text).expect_err(text);
            assert!(
                error.starts_with(at) && error.contains(says),
                "{text:?} gave {error:?}"
            );
        }
    }
}
