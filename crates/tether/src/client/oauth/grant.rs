//! The token endpoint: how the client authenticates there (`client_secret_basic`,
//! `client_secret_post` or `none`, chosen from what the registration and the server's
//! metadata say), the authorization code exchange with the PKCE verifier, and refreshes.
//! Every request carries `resource` (RFC 8707), refreshes included: the audience of the
//! token is the MCP server, whatever the authorization server advertises.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::discovery::ServerMetadata;
use super::wire::{MAX_ANSWER_BYTES, error_answer, form_body, form_encode, read_limited};
use crate::client::error::AuthError;

/// How long a token request may take.
const TOKEN_TIMEOUT: Duration = Duration::from_secs(30);

/// How the client proves itself at the token endpoint (RFC 7591 §2 names).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum TokenAuthMethod {
    /// `client_secret_basic`: HTTP Basic with the form-encoded id and secret.
    ClientSecretBasic,
    /// `client_secret_post`: id and secret in the body.
    ClientSecretPost,
    /// `none`: a public client; its id in the body.
    None,
}

impl TokenAuthMethod {
    /// The method for a client with or without a secret: the registration's when it named
    /// one, else basic when the server lists it (or lists nothing: RFC 8414 §2's default),
    /// else post when listed.
    pub(crate) fn choose(
        has_secret: bool,
        registered: Option<Self>,
        metadata: &ServerMetadata,
    ) -> Self {
        if !has_secret {
            return Self::None;
        }
        if let Some(method) = registered.filter(|m| *m != Self::None) {
            return method;
        }
        match metadata.token_endpoint_auth_methods_supported.as_deref() {
            None => Self::ClientSecretBasic,
            Some(methods) if methods.iter().any(|m| m == "client_secret_basic") => {
                Self::ClientSecretBasic
            }
            Some(methods) if methods.iter().any(|m| m == "client_secret_post") => {
                Self::ClientSecretPost
            }
            Some(_) => Self::ClientSecretBasic,
        }
    }
}

/// The client's identity at one authorization server.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub(crate) struct ClientIdentity {
    pub(crate) client_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) client_secret: Option<String>,
    pub(crate) auth_method: TokenAuthMethod,
}

/// A token endpoint's answer (RFC 6749 §5.1).
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct TokenAnswer {
    pub(crate) access_token: String,
    #[serde(default)]
    pub(crate) token_type: Option<String>,
    #[serde(default)]
    pub(crate) expires_in: Option<u64>,
    #[serde(default)]
    pub(crate) refresh_token: Option<String>,
    #[serde(default)]
    pub(crate) scope: Option<String>,
}

/// The grant being exchanged.
pub(crate) enum Grant<'a> {
    /// A code, with the flow's PKCE verifier and redirect URI.
    Code {
        code: &'a str,
        verifier: &'a str,
        redirect_uri: &'a str,
    },
    /// A refresh token. No `scope`: a refresh keeps the grant's scope (it cannot widen it).
    Refresh { refresh_token: &'a str },
}

/// Exchanges `grant` at the token endpoint for a token for `resource`.
pub(crate) async fn exchange(
    http: &reqwest::Client,
    metadata: &ServerMetadata,
    client: &ClientIdentity,
    grant: Grant<'_>,
    resource: &str,
) -> Result<TokenAnswer, AuthError> {
    let mut pairs: Vec<(&str, &str)> = match &grant {
        Grant::Code {
            code,
            verifier,
            redirect_uri,
        } => vec![
            ("grant_type", "authorization_code"),
            ("code", code),
            ("code_verifier", verifier),
            ("redirect_uri", redirect_uri),
        ],
        Grant::Refresh { refresh_token } => vec![
            ("grant_type", "refresh_token"),
            ("refresh_token", refresh_token),
        ],
    };
    pairs.push(("resource", resource));
    let mut request = http
        .post(&metadata.token_endpoint)
        .header(
            reqwest::header::CONTENT_TYPE,
            "application/x-www-form-urlencoded",
        )
        .header(reqwest::header::ACCEPT, "application/json")
        .timeout(TOKEN_TIMEOUT);
    match client.auth_method {
        TokenAuthMethod::ClientSecretBasic => {
            request = request.basic_auth(
                form_encode(&client.client_id),
                client.client_secret.as_deref().map(form_encode),
            );
        }
        TokenAuthMethod::ClientSecretPost => {
            pairs.push(("client_id", &client.client_id));
            if let Some(secret) = &client.client_secret {
                pairs.push(("client_secret", secret));
            }
        }
        TokenAuthMethod::None => pairs.push(("client_id", &client.client_id)),
    }
    let response = request
        .body(form_body(&pairs))
        .send()
        .await
        .map_err(|e| AuthError::unreachable(&metadata.token_endpoint, e))?;
    let status = response.status().as_u16();
    let body = read_limited(response, MAX_ANSWER_BYTES).await?;
    if !(200..300).contains(&status) {
        let (error, description) = error_answer(&body);
        return Err(AuthError::TokenRefused {
            status,
            error,
            description,
        });
    }
    let answer: TokenAnswer =
        serde_json::from_slice(&body).map_err(|e| AuthError::BadMetadata {
            url: metadata.token_endpoint.clone(),
            reason: format!("the token answer is not one: {e}"),
        })?;
    // RFC 6749 §7.1: only bearer tokens are understood here.
    if let Some(kind) = answer.token_type.as_deref()
        && !kind.eq_ignore_ascii_case("bearer")
    {
        return Err(AuthError::BadMetadata {
            url: metadata.token_endpoint.clone(),
            reason: format!("token_type {kind:?} is not Bearer"),
        });
    }
    Ok(answer)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn metadata(methods: Option<&[&str]>) -> ServerMetadata {
        serde_json::from_value(serde_json::json!({
            "issuer": "https://as",
            "authorization_endpoint": "https://as/a",
            "token_endpoint": "https://as/t",
            "token_endpoint_auth_methods_supported": methods,
        }))
        .unwrap()
    }

    #[test]
    fn the_auth_method_follows_the_secret_the_registration_and_the_metadata() {
        use TokenAuthMethod::{ClientSecretBasic, ClientSecretPost};
        let none = TokenAuthMethod::None;
        assert_eq!(
            TokenAuthMethod::choose(false, Some(ClientSecretPost), &metadata(Option::None)),
            none
        );
        assert_eq!(
            TokenAuthMethod::choose(
                true,
                Some(ClientSecretPost),
                &metadata(Some(&["client_secret_basic"]))
            ),
            ClientSecretPost
        );
        assert_eq!(
            TokenAuthMethod::choose(true, Option::None, &metadata(Option::None)),
            ClientSecretBasic
        );
        assert_eq!(
            TokenAuthMethod::choose(
                true,
                Option::None,
                &metadata(Some(&["client_secret_post", "none"]))
            ),
            ClientSecretPost
        );
        assert_eq!(
            TokenAuthMethod::choose(
                true,
                Some(none),
                &metadata(Some(&["client_secret_basic", "client_secret_post"]))
            ),
            ClientSecretBasic
        );
    }
}
