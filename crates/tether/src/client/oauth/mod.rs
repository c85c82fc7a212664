//! The client as an OAuth 2.1 client of a protected MCP server (MCP authorization, both
//! eras): [`OAuthProvider`], an [`AuthProvider`](super::AuthProvider) any
//! [`Client`](super::Client) takes, configured by [`OAuthClientConfig`]; the one interactive
//! step, showing the user the authorization URL, is the application's [`UserAgent`].
//!
//! The parts, each without I/O where it can be: `challenge` (the `WWW-Authenticate` Bearer
//! challenge), `discovery` (where metadata is and what makes it acceptable), `register`
//! (which client id), `authorize` (PKCE, `state`, the URL, the redirect's checks), `grant`
//! (the token endpoint), `callback` (the loopback listener), `cache` (tokens on disk and the
//! lock between processes), `wire` (form bodies and bounded reads), `config`
//! ([`OAuthClientConfig`], [`UserAgent`], the HTTP client for authorization servers), and
//! `provider`, which
//! strings them together and decides when to refresh, sign in again or step up.

mod authorize;
mod cache;
mod callback;
mod challenge;
mod config;
mod discovery;
mod grant;
mod provider;
mod register;
pub(crate) mod wire;

pub use cache::{CachedSignIn, cached_sign_ins};
pub use challenge::BearerChallenge;
pub use config::{DEFAULT_CALLBACK_TIMEOUT, DEFAULT_MAX_STEP_UPS, OAuthClientConfig, UserAgent};
pub use provider::OAuthProvider;
