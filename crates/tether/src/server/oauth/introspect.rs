//! Opaque access tokens, checked by RFC 7662 introspection: [`Introspector`] asks the
//! authorization server's introspection endpoint about a token, authenticating as the resource
//! server's own client; [`judge`] (pure) decides what an answer means.
//!
//! An answer is accepted only if it says `active`, names one of the configured issuers (or
//! none, when exactly one is configured), names this resource in `aud`, is within its `exp`
//! and `nbf` (with the leeway) and, where it says a `token_type`, says `Bearer`. A verdict may
//! be trusted (`super::verdicts` keeps it) until the token's `exp` and at most for the
//! configured time (the longest a revocation can go unseen); an inactive one too (a token never
//! becomes active again). A failed exchange (the endpoint unreachable, an error status, an
//! answer that is not JSON) is no verdict: the request gets 503 and the next one asks again,
//! while tokens already decided keep working.

use std::time::Duration;

use serde::Deserialize;

use super::token::{self, Rejection};
use super::verdicts::{Decided, trust_until_expiry};
use crate::client::oauth::wire::{MAX_ANSWER_BYTES, form_encode, read_limited};
use crate::server::auth::{AuthFailure, Credentials};

/// The default longest time an introspection answer is trusted.
pub const DEFAULT_INTROSPECTION_CACHE: Duration = Duration::from_secs(60);

/// How long one exchange with the introspection endpoint may take.
const EXCHANGE_TIMEOUT: Duration = Duration::from_secs(5);

/// Where and as whom tether introspects opaque tokens.
#[derive(Clone)]
#[non_exhaustive]
pub struct IntrospectionConfig {
    /// The introspection endpoint (the authorization server's `introspection_endpoint`).
    pub endpoint: String,
    /// The resource server's client id at the authorization server.
    pub client_id: String,
    /// Its client secret, sent with HTTP Basic authentication.
    pub client_secret: String,
    /// The longest time an answer is trusted before the endpoint is asked again.
    pub cache_for: Duration,
}

impl IntrospectionConfig {
    /// Introspection at `endpoint` as `client_id`, answers trusted for the default time.
    #[must_use]
    pub fn new(endpoint: String, client_id: String, client_secret: String) -> Self {
        Self {
            endpoint,
            client_id,
            client_secret,
            cache_for: DEFAULT_INTROSPECTION_CACHE,
        }
    }
}

impl std::fmt::Debug for IntrospectionConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IntrospectionConfig")
            .field("endpoint", &self.endpoint)
            .field("client_id", &self.client_id)
            .field("client_secret", &"<redacted>")
            .field("cache_for", &self.cache_for)
            .finish()
    }
}

/// An introspection answer, as far as tether reads it (RFC 7662 §2.2).
#[derive(Debug, Default, Deserialize)]
pub(crate) struct Answer {
    #[serde(default)]
    active: bool,
    iss: Option<String>,
    sub: Option<String>,
    client_id: Option<String>,
    scope: Option<String>,
    aud: Option<Audience>,
    exp: Option<u64>,
    nbf: Option<u64>,
    token_type: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum Audience {
    One(String),
    Many(Vec<String>),
}

impl Audience {
    fn names(&self, resource: &str) -> bool {
        match self {
            Self::One(one) => one == resource,
            Self::Many(many) => many.iter().any(|aud| aud == resource),
        }
    }
}

/// What an answer means at `now` (seconds since the epoch): the credentials and the token's
/// `exp`, or why it is refused.
pub(crate) fn judge(
    answer: Answer,
    issuers: &[String],
    resource: &str,
    now: u64,
    leeway: u64,
) -> Result<(Credentials, Option<u64>), Rejection> {
    if !answer.active {
        return Err(Rejection::Inactive);
    }
    let issuer = match &answer.iss {
        Some(iss) => issuers.iter().find(|known| *known == iss),
        None if issuers.len() == 1 => issuers.first(),
        None => None,
    }
    .ok_or(Rejection::Issuer)?;
    if !answer.aud.as_ref().is_some_and(|aud| aud.names(resource)) {
        return Err(Rejection::Audience);
    }
    if answer
        .exp
        .is_some_and(|exp| exp.saturating_add(leeway) < now)
    {
        return Err(Rejection::Expired);
    }
    if answer
        .nbf
        .is_some_and(|nbf| nbf > now.saturating_add(leeway))
    {
        return Err(Rejection::NotYetValid);
    }
    if answer
        .token_type
        .as_deref()
        .is_some_and(|kind| !kind.eq_ignore_ascii_case("bearer"))
    {
        return Err(Rejection::TokenType);
    }
    let scopes = token::scope_list(answer.scope.as_deref().unwrap_or_default());
    let credentials = token::credentials(issuer, answer.sub, answer.client_id, scopes)?;
    Ok((credentials, answer.exp))
}

/// Introspects opaque tokens (module docs).
#[derive(Debug)]
pub(crate) struct Introspector {
    config: IntrospectionConfig,
    http: reqwest::Client,
}

impl Introspector {
    pub(crate) fn new(config: IntrospectionConfig, http: reqwest::Client) -> Self {
        Self { config, http }
    }

    /// The endpoint's verdict on `token` at `now` (seconds since the epoch), and how long it
    /// may be trusted; an error when the endpoint could not be asked.
    pub(crate) async fn check(
        &self,
        token: &str,
        issuers: &[String],
        resource: &str,
        now: u64,
        leeway: u64,
    ) -> Decided {
        let answer = self.ask(token).await?;
        let verdict = judge(answer, issuers, resource, now, leeway);
        let exp = verdict.as_ref().ok().and_then(|(_, exp)| *exp);
        let trust = trust_until_expiry(self.config.cache_for, exp, now);
        Ok((verdict.map(|(credentials, _)| credentials), trust))
    }

    /// One exchange with the endpoint; any failure is the authorization server's, not the
    /// token's, so it is logged and answered 503.
    async fn ask(&self, token: &str) -> Result<Answer, AuthFailure> {
        let unavailable = |what: &str, detail: String| {
            tracing::warn!(
                endpoint = self.config.endpoint,
                detail,
                "introspection {what}"
            );
            AuthFailure::Unavailable
        };
        let body = format!("token={}&token_type_hint=access_token", form_encode(token));
        // RFC 6749 §2.3.1: the id and secret are form-encoded before they are joined.
        let response = self
            .http
            .post(&self.config.endpoint)
            .basic_auth(
                form_encode(&self.config.client_id),
                Some(form_encode(&self.config.client_secret)),
            )
            .header(
                http::header::CONTENT_TYPE,
                "application/x-www-form-urlencoded",
            )
            .header(http::header::ACCEPT, "application/json")
            .body(body)
            .timeout(EXCHANGE_TIMEOUT)
            .send()
            .await
            .map_err(|error| unavailable("failed", error.to_string()))?;
        let status = response.status();
        if !status.is_success() {
            return Err(unavailable("refused", format!("status {status}")));
        }
        let bytes = read_limited(response, MAX_ANSWER_BYTES)
            .await
            .map_err(|error| unavailable("failed", error.to_string()))?;
        serde_json::from_slice(&bytes)
            .map_err(|error| unavailable("answered something else", error.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ISSUER: &str = "https://as.example.com";
    const RESOURCE: &str = "https://mcp.example.com/mcp";
    const NOW: u64 = 1_800_000_000;

    fn answer(json: serde_json::Value) -> Answer {
        serde_json::from_value(json).expect("an answer")
    }

    fn active() -> serde_json::Value {
        serde_json::json!({
            "active": true, "iss": ISSUER, "aud": RESOURCE, "client_id": "app",
            "scope": "mcp:tools mcp:admin", "exp": NOW + 60, "token_type": "Bearer",
        })
    }

    fn judged(json: serde_json::Value) -> Result<(Credentials, Option<u64>), Rejection> {
        judge(answer(json), &[ISSUER.to_owned()], RESOURCE, NOW, 30)
    }

    fn with(key: &str, value: serde_json::Value) -> serde_json::Value {
        let mut json = active();
        json[key] = value;
        json
    }

    fn without(key: &str) -> serde_json::Value {
        let mut json = active();
        json.as_object_mut().expect("an object").remove(key);
        json
    }

    #[test]
    fn an_active_answer_for_this_resource_gives_its_subject_scopes_and_client() {
        let (credentials, exp) = judged(with("sub", "alice".into())).expect("accepted");
        assert_eq!(&*credentials.principal, "https://as.example.com alice");
        assert_eq!(
            credentials.scopes.as_deref(),
            Some(&["mcp:tools".to_owned(), "mcp:admin".to_owned()][..])
        );
        assert_eq!(credentials.client_id.as_deref(), Some("app"));
        assert_eq!(exp, Some(NOW + 60));
    }

    #[test]
    fn a_client_credentials_answer_without_sub_is_the_clients_own() {
        let (credentials, _) = judged(active()).expect("accepted");
        assert_eq!(&*credentials.principal, "https://as.example.com app");
        assert_eq!(
            judged(without("client_id")).err(),
            Some(Rejection::MissingClaim)
        );
    }

    #[test]
    fn an_inactive_answer_is_refused_whatever_else_it_says() {
        assert_eq!(
            judged(with("active", false.into())).err(),
            Some(Rejection::Inactive)
        );
        assert_eq!(
            judge(
                answer(serde_json::json!({})),
                &[ISSUER.to_owned()],
                RESOURCE,
                NOW,
                0
            )
            .err(),
            Some(Rejection::Inactive)
        );
    }

    #[test]
    fn the_issuer_must_be_configured_and_may_be_left_out_only_when_one_is() {
        assert_eq!(
            judged(with("iss", "https://as.example.com/".into())).err(),
            Some(Rejection::Issuer)
        );
        assert!(judged(without("iss")).is_ok());
        let two = [ISSUER.to_owned(), "https://other.example.com".to_owned()];
        assert_eq!(
            judge(answer(without("iss")), &two, RESOURCE, NOW, 0).err(),
            Some(Rejection::Issuer)
        );
        assert!(judge(answer(active()), &two, RESOURCE, NOW, 0).is_ok());
    }

    #[test]
    fn the_audience_must_name_this_resource() {
        assert_eq!(judged(without("aud")).err(), Some(Rejection::Audience));
        assert_eq!(
            judged(with("aud", "https://mcp.example.com/other".into())).err(),
            Some(Rejection::Audience)
        );
        assert!(judged(with("aud", serde_json::json!(["x", RESOURCE]))).is_ok());
    }

    #[test]
    fn expiry_and_not_before_hold_with_the_leeway() {
        assert!(judged(with("exp", (NOW - 30).into())).is_ok());
        assert_eq!(
            judged(with("exp", (NOW - 31).into())).err(),
            Some(Rejection::Expired)
        );
        assert!(judged(with("nbf", (NOW + 30).into())).is_ok());
        assert_eq!(
            judged(with("nbf", (NOW + 31).into())).err(),
            Some(Rejection::NotYetValid)
        );
    }

    #[test]
    fn only_bearer_tokens_are_taken() {
        assert!(judged(with("token_type", "bearer".into())).is_ok());
        assert!(judged(without("token_type")).is_ok());
        assert_eq!(
            judged(with("token_type", "DPoP".into())).err(),
            Some(Rejection::TokenType)
        );
    }

    #[test]
    fn form_encoding_escapes_what_a_form_must() {
        assert_eq!(form_encode("a-b.c_d*"), "a-b.c_d*");
        assert_eq!(form_encode("s3cr3t:+/ é"), "s3cr3t%3A%2B%2F+%C3%A9");
    }
}
