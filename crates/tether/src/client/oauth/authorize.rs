//! One authorization code flow's request and response, without I/O: a fresh PKCE verifier and
//! `state` per flow (RFC 7636; never shared between flows or processes), the authorization
//! URL with `resource` (RFC 8707) and the scope, and the checks on the redirect that comes
//! back: `state` equal, `iss` equal to the issuer when the server says it sends one
//! (RFC 9207), an `error` reported as the server gave it; and the scope rules (what to ask
//! for, whether a grant covers a challenge).

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use reqwest::Url;

use super::discovery::ServerMetadata;
use crate::client::error::AuthError;

/// The PKCE verifier and `state` of one flow.
#[derive(Clone)]
pub(crate) struct FlowSecrets {
    /// 43 characters of base64url: 32 random bytes (RFC 7636 §4.1).
    pub(crate) verifier: String,
    /// 16 random bytes, base64url.
    pub(crate) state: String,
}

impl std::fmt::Debug for FlowSecrets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("FlowSecrets(..)")
    }
}

impl FlowSecrets {
    /// Fresh secrets from the operating system's random source.
    pub(crate) fn new() -> Result<Self, AuthError> {
        Ok(Self {
            verifier: random_base64url::<32>()?,
            state: random_base64url::<16>()?,
        })
    }

    /// `BASE64URL(SHA256(verifier))` (RFC 7636 §4.2).
    pub(crate) fn challenge(&self) -> String {
        URL_SAFE_NO_PAD.encode(ring::digest::digest(
            &ring::digest::SHA256,
            self.verifier.as_bytes(),
        ))
    }
}

fn random_base64url<const N: usize>() -> Result<String, AuthError> {
    let mut bytes = [0u8; N];
    getrandom::fill(&mut bytes)
        .map_err(|e| AuthError::Internal(format!("no random bytes: {e}")))?;
    Ok(URL_SAFE_NO_PAD.encode(bytes))
}

/// What an authorization request asks for.
#[derive(Debug, Clone)]
pub(crate) struct AuthorizationRequest<'a> {
    pub(crate) client_id: &'a str,
    pub(crate) redirect_uri: &'a str,
    pub(crate) resource: &'a str,
    pub(crate) scope: Option<&'a str>,
}

/// The URL the user agent is sent to (RFC 6749 §4.1.1 with PKCE and `resource`).
pub(crate) fn authorization_url(
    metadata: &ServerMetadata,
    request: &AuthorizationRequest<'_>,
    secrets: &FlowSecrets,
) -> Result<Url, AuthError> {
    let mut url =
        Url::parse(&metadata.authorization_endpoint).map_err(|_| AuthError::BadMetadata {
            url: metadata.issuer.clone(),
            reason: "its authorization_endpoint is not a URL".to_owned(),
        })?;
    {
        let mut query = url.query_pairs_mut();
        query
            .append_pair("response_type", "code")
            .append_pair("client_id", request.client_id)
            .append_pair("redirect_uri", request.redirect_uri)
            .append_pair("code_challenge", &secrets.challenge())
            .append_pair("code_challenge_method", "S256")
            .append_pair("state", &secrets.state)
            .append_pair("resource", request.resource);
        if let Some(scope) = request.scope.filter(|s| !s.is_empty()) {
            query.append_pair("scope", scope);
        }
    }
    Ok(url)
}

/// Reads the redirect's query: the code, once `state` and (when the server advertises it)
/// `iss` are checked. An `error` answer is [`AuthError::Denied`]: the user declined or the
/// server refused.
pub(crate) fn code_from_redirect(
    query: &[(String, String)],
    secrets: &FlowSecrets,
    metadata: &ServerMetadata,
) -> Result<String, AuthError> {
    let get = |name: &str| {
        query
            .iter()
            .find(|(key, _)| key == name)
            .map(|(_, value)| value.as_str())
    };
    // `state` first: an answer to another flow says nothing about this one, error or not.
    if get("state") != Some(secrets.state.as_str()) {
        return Err(AuthError::StateMismatch);
    }
    // RFC 9207 §2.4: when the server says it sends `iss`, a response without it or with
    // another value is refused (a mix-up attack); when it does not say so, an `iss` that is
    // present must still match.
    match get("iss") {
        Some(iss) if iss != metadata.issuer => {
            return Err(AuthError::IssMismatch {
                expected: metadata.issuer.clone(),
                found: Some(iss.to_owned()),
            });
        }
        None if metadata.authorization_response_iss_parameter_supported => {
            return Err(AuthError::IssMismatch {
                expected: metadata.issuer.clone(),
                found: None,
            });
        }
        _ => {}
    }
    if let Some(error) = get("error") {
        return Err(AuthError::Denied {
            error: error.to_owned(),
            description: get("error_description").map(str::to_owned),
        });
    }
    get("code")
        .filter(|code| !code.is_empty())
        .map(str::to_owned)
        .ok_or_else(|| AuthError::Callback("the redirect carries no code".to_owned()))
}

/// The scope to ask for: the challenge's, else everything the resource's metadata lists,
/// else the authorization server's `scopes_supported` is not used (it names scopes of other
/// resources too), so none. Earlier grants are kept (a step-up asks for the union, MCP
/// 2026-07-28), in the order first seen, without duplicates.
pub(crate) fn scope_to_request<'a>(
    earlier: Option<&'a str>,
    challenged: Option<&'a str>,
    resource_scopes: Option<&'a [String]>,
) -> Option<String> {
    let mut scopes: Vec<&str> = Vec::new();
    let mut add = |scope: &'a str| {
        if !scopes.contains(&scope) {
            scopes.push(scope);
        }
    };
    earlier
        .unwrap_or("")
        .split_ascii_whitespace()
        .for_each(&mut add);
    match challenged.filter(|s| !s.trim().is_empty()) {
        Some(challenged) => challenged.split_ascii_whitespace().for_each(&mut add),
        None => resource_scopes
            .unwrap_or(&[])
            .iter()
            .map(String::as_str)
            .for_each(&mut add),
    }
    (!scopes.is_empty()).then(|| scopes.join(" "))
}

/// Whether every scope of `wanted` is in `granted`.
pub(crate) fn covers(granted: Option<&str>, wanted: &str) -> bool {
    let granted: Vec<&str> = granted.unwrap_or("").split_ascii_whitespace().collect();
    wanted
        .split_ascii_whitespace()
        .all(|scope| granted.contains(&scope))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn metadata(iss_supported: bool) -> ServerMetadata {
        serde_json::from_value(serde_json::json!({
            "issuer": "https://as.example.com",
            "authorization_endpoint": "https://as.example.com/authorize?prompt=consent",
            "token_endpoint": "https://as.example.com/token",
            "code_challenge_methods_supported": ["S256"],
            "authorization_response_iss_parameter_supported": iss_supported,
        }))
        .unwrap()
    }

    #[test]
    fn the_pkce_challenge_is_rfc_7636s_s256() {
        // RFC 7636 Appendix B.
        let secrets = FlowSecrets {
            verifier: "dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk".to_owned(),
            state: String::new(),
        };
        assert_eq!(
            secrets.challenge(),
            "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM"
        );
        let (a, b) = (FlowSecrets::new().unwrap(), FlowSecrets::new().unwrap());
        assert_eq!(a.verifier.len(), 43);
        assert_ne!(a.verifier, b.verifier);
        assert_ne!(a.state, b.state);
    }

    #[test]
    fn the_authorization_url_carries_pkce_state_resource_and_scope() {
        let secrets = FlowSecrets::new().unwrap();
        let url = authorization_url(
            &metadata(false),
            &AuthorizationRequest {
                client_id: "app",
                redirect_uri: "http://127.0.0.1:5000/callback",
                resource: "https://mcp.example.com/mcp",
                scope: Some("a b"),
            },
            &secrets,
        )
        .unwrap();
        let pairs: Vec<(String, String)> = url.query_pairs().into_owned().collect();
        let get = |k: &str| {
            pairs
                .iter()
                .find(|(key, _)| key == k)
                .map(|(_, v)| v.as_str())
        };
        assert_eq!(
            get("prompt"),
            Some("consent"),
            "the endpoint's own query is kept"
        );
        assert_eq!(get("response_type"), Some("code"));
        assert_eq!(get("code_challenge_method"), Some("S256"));
        assert_eq!(get("code_challenge"), Some(secrets.challenge().as_str()));
        assert_eq!(get("state"), Some(secrets.state.as_str()));
        assert_eq!(get("resource"), Some("https://mcp.example.com/mcp"));
        assert_eq!(get("scope"), Some("a b"));
        assert_eq!(get("redirect_uri"), Some("http://127.0.0.1:5000/callback"));
    }

    fn query(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn the_redirect_is_checked_for_state_then_iss_then_error() {
        let secrets = FlowSecrets::new().unwrap();
        let state = secrets.state.as_str();
        let iss = "https://as.example.com";
        assert_eq!(
            code_from_redirect(
                &query(&[("code", "c"), ("state", state)]),
                &secrets,
                &metadata(false)
            )
            .unwrap(),
            "c"
        );
        assert!(matches!(
            code_from_redirect(
                &query(&[("code", "c"), ("state", "other")]),
                &secrets,
                &metadata(false)
            ),
            Err(AuthError::StateMismatch)
        ));
        assert!(matches!(
            code_from_redirect(&query(&[("code", "c")]), &secrets, &metadata(false)),
            Err(AuthError::StateMismatch)
        ));
        // iss advertised: required and exact.
        let with_iss = metadata(true);
        assert_eq!(
            code_from_redirect(
                &query(&[("code", "c"), ("state", state), ("iss", iss)]),
                &secrets,
                &with_iss
            )
            .unwrap(),
            "c"
        );
        for pairs in [
            vec![("code", "c"), ("state", state)],
            vec![
                ("code", "c"),
                ("state", state),
                ("iss", "https://as.example.com/"),
            ],
            vec![("code", "c"), ("state", state), ("iss", "https://evil")],
        ] {
            assert!(matches!(
                code_from_redirect(&query(&pairs), &secrets, &with_iss),
                Err(AuthError::IssMismatch { .. })
            ));
        }
        // Not advertised, but present and wrong: refused too.
        assert!(matches!(
            code_from_redirect(
                &query(&[("code", "c"), ("state", state), ("iss", "https://evil")]),
                &secrets,
                &metadata(false)
            ),
            Err(AuthError::IssMismatch { .. })
        ));
        match code_from_redirect(
            &query(&[
                ("error", "access_denied"),
                ("error_description", "no"),
                ("state", state),
            ]),
            &secrets,
            &metadata(false),
        ) {
            Err(AuthError::Denied { error, description }) => {
                assert_eq!(error, "access_denied");
                assert_eq!(description.as_deref(), Some("no"));
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn covers_is_a_subset_test_on_scope_words() {
        assert!(covers(Some("a b c"), "c a"));
        assert!(covers(None, ""));
        assert!(!covers(Some("a b"), "a x"));
        assert!(!covers(None, "a"));
    }

    #[test]
    fn the_scope_is_the_challenges_else_the_resources_and_step_up_keeps_earlier_grants() {
        let listed = ["read".to_owned(), "write".to_owned()];
        assert_eq!(
            scope_to_request(None, Some("x y"), Some(&listed)).as_deref(),
            Some("x y")
        );
        assert_eq!(
            scope_to_request(None, None, Some(&listed)).as_deref(),
            Some("read write")
        );
        assert_eq!(scope_to_request(None, Some("  "), None), None);
        assert_eq!(scope_to_request(None, None, None), None);
        assert_eq!(
            scope_to_request(Some("read x"), Some("write x"), Some(&listed)).as_deref(),
            Some("read x write")
        );
    }
}
