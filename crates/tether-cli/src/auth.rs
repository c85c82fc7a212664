//! OAuth in the CLI (docs/CONTRACTS.md#oauth-client): the `--oauth-*` flags `call`,
//! `connect` and `auth` share, the opener that shows the authorization URL (always printed on
//! stderr, then handed to `--oauth-open` or the platform's opener), and `tether auth login |
//! logout | status`, which sign in ahead of time, forget a server, and list what is cached.
//! The flow itself is the library's [`OAuthProvider`].

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use tether::client::oauth::{OAuthClientConfig, OAuthProvider, UserAgent, cached_sign_ins};
use tether::client::{AuthError, AuthProvider};

use crate::{UsageError, remote};

/// Exit code for a failed authorization (docs/CONTRACTS.md#exit-codes).
pub(crate) const EXIT_AUTH: u8 = 5;

/// The OAuth flags of `call`, `connect` and `auth`. Kept in a `call`'s token file, so that
/// `--resume` signs in (or finds the cache) as the first process did.
#[derive(Debug, Clone, Default, clap::Args, Serialize, Deserialize)]
pub(crate) struct OAuthArgs {
    /// A pre-registered OAuth client id (else a metadata document or dynamic registration).
    #[arg(long, value_name = "ID")]
    #[serde(default)]
    oauth_client_id: Option<String>,
    /// The pre-registered client's secret, read from this file.
    #[arg(long, value_name = "F", requires = "oauth_client_id")]
    #[serde(default)]
    oauth_client_secret_file: Option<PathBuf>,
    /// This client's Client ID Metadata Document (an https URL), used as its client id where
    /// the authorization server takes one.
    #[arg(long, value_name = "URL")]
    #[serde(default)]
    oauth_client_metadata_url: Option<String>,
    /// Scopes to ask for beside the ones the server challenges with (space-separated).
    #[arg(long, value_name = "SCOPE")]
    #[serde(default)]
    oauth_scope: Option<String>,
    /// The command that opens the authorization URL (split like a shell command line, no
    /// shell; the URL is appended). Default: the platform's opener.
    #[arg(long, value_name = "CMD")]
    #[serde(default)]
    oauth_open: Option<String>,
    /// The token cache directory (default $XDG_CACHE_HOME/tether/oauth, else
    /// ~/.cache/tether/oauth).
    #[arg(long, value_name = "DIR")]
    #[serde(default)]
    oauth_cache: Option<PathBuf>,
    /// The port of the sign-in callback on 127.0.0.1 (default: a free one).
    #[arg(long, value_name = "PORT")]
    #[serde(default)]
    oauth_callback_port: Option<u16>,
    /// Never open a browser: a sign-in that is needed fails (exit 5) instead.
    #[arg(long)]
    #[serde(default)]
    oauth_non_interactive: bool,
    /// How long a sign-in waits for the browser (default 300 s).
    #[arg(long, value_name = "SECS", hide = true)]
    #[serde(default)]
    oauth_callback_timeout_secs: Option<u64>,
}

impl OAuthArgs {
    /// The same flags with their paths made absolute (a token file may be resumed from
    /// another directory).
    pub(crate) fn absolute(&self) -> Result<Self, UsageError> {
        let absolute =
            |flag: &str, path: &Option<PathBuf>| -> Result<Option<PathBuf>, UsageError> {
                path.as_ref()
                    .map(|path| {
                        std::path::absolute(path)
                            .map_err(|e| UsageError(format!("{flag} {}: {e}", path.display())))
                    })
                    .transpose()
            };
        Ok(Self {
            oauth_client_secret_file: absolute(
                "--oauth-client-secret-file",
                &self.oauth_client_secret_file,
            )?,
            oauth_cache: absolute("--oauth-cache", &self.oauth_cache)?,
            ..self.clone()
        })
    }

    fn cache_dir(&self) -> Result<PathBuf, UsageError> {
        self.oauth_cache
            .clone()
            .or_else(OAuthClientConfig::default_cache_dir)
            .ok_or_else(|| {
                UsageError(
                    "no token cache directory: set --oauth-cache (neither XDG_CACHE_HOME nor HOME is set)"
                        .to_owned(),
                )
            })
    }

    /// The library's configuration for these flags.
    pub(crate) fn config(&self) -> Result<OAuthClientConfig, UsageError> {
        let mut config = OAuthClientConfig::new(self.cache_dir()?);
        config.client_id.clone_from(&self.oauth_client_id);
        config.client_secret = self
            .oauth_client_secret_file
            .as_deref()
            .map(|path| remote::read_secret_file("--oauth-client-secret-file", path))
            .transpose()?;
        if let Some(url) = &self.oauth_client_metadata_url
            && !url.starts_with("https://")
        {
            return Err(UsageError(format!(
                "--oauth-client-metadata-url {url:?}: a client metadata document URL is https"
            )));
        }
        config
            .client_metadata_url
            .clone_from(&self.oauth_client_metadata_url);
        config.scope.clone_from(&self.oauth_scope);
        config.callback_port = self.oauth_callback_port.unwrap_or(0);
        if let Some(secs) = self.oauth_callback_timeout_secs {
            config.callback_timeout = Duration::from_secs(secs.max(1));
        }
        if !self.oauth_non_interactive {
            config.user_agent = Some(Arc::new(Opener::new(self.oauth_open.as_deref())?));
        }
        Ok(config)
    }

    /// The provider for `url`.
    pub(crate) fn provider(&self, url: &str) -> anyhow::Result<Arc<OAuthProvider>> {
        let config = self.config()?;
        Ok(Arc::new(OAuthProvider::new(url, config).map_err(
            |error| anyhow::Error::new(error).context("setting up OAuth"),
        )?))
    }

    /// The auth hook for `url`: the static token of `--bearer-token-file` if given (sent as
    /// is; no OAuth flow), else OAuth.
    pub(crate) fn auth_for(
        &self,
        url: &str,
        bearer_token_file: Option<&std::path::Path>,
    ) -> anyhow::Result<Arc<dyn AuthProvider>> {
        if let Some(path) = bearer_token_file {
            return Ok(remote::bearer_auth(path)?);
        }
        Ok(self.provider(url)?)
    }
}

/// Shows the authorization URL: on stderr always, then through the opener command, whose
/// exit status is reported and nothing more (a browser may outlive the sign-in).
struct Opener {
    command: Vec<String>,
}

impl Opener {
    fn new(command: Option<&str>) -> Result<Self, UsageError> {
        let command = match command {
            Some(line) => shlex::split(line)
                .filter(|words| !words.is_empty())
                .ok_or_else(|| UsageError(format!("--oauth-open {line:?}: not a command line")))?,
            None => default_opener(),
        };
        Ok(Self { command })
    }
}

fn default_opener() -> Vec<String> {
    let words: &[&str] = if cfg!(target_os = "macos") {
        &["open"]
    } else if cfg!(windows) {
        &["cmd", "/c", "start", ""]
    } else {
        &["xdg-open"]
    };
    words.iter().map(|w| (*w).to_owned()).collect()
}

#[async_trait]
impl UserAgent for Opener {
    async fn open(&self, url: &str) -> Result<(), AuthError> {
        eprintln!("tether: to sign in, open {url}");
        let (program, arguments) = self
            .command
            .split_first()
            .ok_or_else(|| AuthError::Internal("no opener command".to_owned()))?;
        let child = tokio::process::Command::new(program)
            .args(arguments)
            .arg(url)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .kill_on_drop(false)
            .spawn();
        match child {
            Ok(mut child) => {
                let program = program.clone();
                tokio::spawn(async move {
                    match child.wait().await {
                        Ok(status) if status.success() => {}
                        Ok(status) => {
                            eprintln!("tether: the opener {program} exited with {status}")
                        }
                        Err(error) => eprintln!("tether: the opener {program}: {error}"),
                    }
                });
            }
            // The URL is on stderr: the user can open it by hand.
            Err(error) => eprintln!("tether: could not run the opener {program}: {error}"),
        }
        Ok(())
    }
}

/// `tether auth`.
#[derive(Debug, clap::Args)]
pub(crate) struct AuthArgs {
    #[command(subcommand)]
    command: AuthCommand,
}

#[derive(Debug, clap::Subcommand)]
enum AuthCommand {
    /// Sign in to a protected MCP server now, so that `call` and `connect` find the token.
    Login {
        /// The MCP endpoint.
        url: String,
        #[command(flatten)]
        oauth: OAuthArgs,
    },
    /// Forget the tokens cached for a server.
    Logout {
        /// The MCP endpoint.
        url: String,
        #[command(flatten)]
        oauth: OAuthArgs,
    },
    /// List the cached sign-ins (never the tokens).
    Status {
        /// One JSON object per sign-in, one per line.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        oauth: OAuthArgs,
    },
}

/// Runs `tether auth`.
pub(crate) fn run(args: AuthArgs) -> anyhow::Result<ExitCode> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting the runtime")?;
    let code = runtime.block_on(async {
        match args.command {
            AuthCommand::Login { url, oauth } => {
                let provider = oauth.provider(&url)?;
                match provider.login().await {
                    Ok(()) => {
                        println!("tether: signed in to {url}");
                        Ok(ExitCode::SUCCESS)
                    }
                    Err(error) => Ok(auth_failed(&error)),
                }
            }
            AuthCommand::Logout { url, oauth } => {
                let mut quiet = oauth;
                quiet.oauth_non_interactive = true;
                let removed = quiet.provider(&url)?.logout().map_err(anyhow::Error::new)?;
                println!("tether: removed {removed} cached sign-in(s) for {url}");
                Ok(ExitCode::SUCCESS)
            }
            AuthCommand::Status { json, oauth } => status(&oauth, json),
        }
    });
    runtime.shutdown_timeout(Duration::from_secs(1));
    code
}

fn status(oauth: &OAuthArgs, json: bool) -> anyhow::Result<ExitCode> {
    let dir = oauth.cache_dir()?;
    let sign_ins = cached_sign_ins(&dir).map_err(anyhow::Error::new)?;
    let now = tether::store::tasks::now_ms() / 1000;
    for sign_in in &sign_ins {
        if json {
            println!("{}", serde_json::to_string(sign_in)?);
            continue;
        }
        let expiry = match sign_in.expires_at {
            Some(at) if at > now => format!("expires in {} s", at - now),
            Some(_) => "expired".to_owned(),
            None => "no expiry given".to_owned(),
        };
        println!(
            "{}  issuer {}  client {}  scope {:?}  {expiry}{}",
            sign_in.server_url,
            sign_in.issuer,
            sign_in.client_id,
            sign_in.scope.as_deref().unwrap_or(""),
            if sign_in.refreshable {
                ", refreshable"
            } else {
                ""
            }
        );
    }
    if sign_ins.is_empty() && !json {
        println!("tether: no sign-ins cached in {}", dir.display());
    }
    Ok(ExitCode::SUCCESS)
}

/// Prints an authorization failure (and its cause: the unreachable server's or the cache's
/// I/O error) and gives its exit code.
pub(crate) fn auth_failed(error: &AuthError) -> ExitCode {
    match std::error::Error::source(error) {
        Some(cause) => eprintln!("tether: authorization failed: {error}: {cause}"),
        None => eprintln!("tether: authorization failed: {error}"),
    }
    ExitCode::from(EXIT_AUTH)
}
