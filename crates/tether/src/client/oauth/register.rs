//! Having a client id at an authorization server, in the order MCP authorization gives: a
//! pre-registered id (and secret), a Client ID Metadata Document URL when the server takes
//! one, else Dynamic Client Registration (RFC 7591) when it has a `registration_endpoint`;
//! else an error naming the options. The choice is pure ([`choose`]); the registration
//! request is one POST. Registrations are kept per issuer by the cache, so a changed
//! authorization server means a new one.

use std::time::Duration;

use serde::Deserialize;
use serde_json::json;

use super::discovery::ServerMetadata;
use super::grant::{ClientIdentity, TokenAuthMethod};
use super::wire::{MAX_ANSWER_BYTES, read_limited};
use crate::client::error::AuthError;

/// How long a registration may take.
const REGISTRATION_TIMEOUT: Duration = Duration::from_secs(30);

/// Where the client id comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Registration {
    /// Given by the application.
    PreRegistered(ClientIdentity),
    /// The Client ID Metadata Document's URL is the id; a public client.
    MetadataDocument(ClientIdentity),
    /// Register at this endpoint.
    Dynamic { endpoint: String },
}

/// Picks the registration for `metadata`'s server.
pub(crate) fn choose(
    client_id: Option<&str>,
    client_secret: Option<&str>,
    metadata_document: Option<&str>,
    metadata: &ServerMetadata,
) -> Result<Registration, AuthError> {
    if let Some(client_id) = client_id {
        return Ok(Registration::PreRegistered(ClientIdentity {
            client_id: client_id.to_owned(),
            client_secret: client_secret.map(str::to_owned),
            auth_method: TokenAuthMethod::choose(client_secret.is_some(), None, metadata),
        }));
    }
    if let Some(url) = metadata_document
        && metadata.client_id_metadata_document_supported
    {
        return Ok(Registration::MetadataDocument(ClientIdentity {
            client_id: url.to_owned(),
            client_secret: None,
            auth_method: TokenAuthMethod::None,
        }));
    }
    match &metadata.registration_endpoint {
        Some(endpoint) => Ok(Registration::Dynamic {
            endpoint: endpoint.clone(),
        }),
        None => Err(AuthError::RegistrationImpossible {
            issuer: metadata.issuer.clone(),
            cimd_supported: metadata.client_id_metadata_document_supported,
        }),
    }
}

/// RFC 7591 §3.2.1, the fields used.
#[derive(Deserialize)]
struct RegistrationAnswer {
    client_id: String,
    #[serde(default)]
    client_secret: Option<String>,
    #[serde(default)]
    token_endpoint_auth_method: Option<String>,
}

/// Registers a native client with `redirect_uri` at `endpoint`. A public client (`none`)
/// where the server takes one; else the method it lists first of the secret-based ones.
pub(crate) async fn register(
    http: &reqwest::Client,
    metadata: &ServerMetadata,
    endpoint: &str,
    client_name: &str,
    redirect_uri: &str,
) -> Result<ClientIdentity, AuthError> {
    let methods = metadata.token_endpoint_auth_methods_supported.as_deref();
    let asked = match methods {
        None => "none",
        Some(methods) if methods.iter().any(|m| m == "none") => "none",
        Some(methods) if methods.iter().any(|m| m == "client_secret_basic") => {
            "client_secret_basic"
        }
        Some(methods) if methods.iter().any(|m| m == "client_secret_post") => "client_secret_post",
        Some(_) => "none",
    };
    // MCP 2026-07-28: a registering client MUST send `application_type`, "native" for a
    // loopback redirect.
    let body = json!({
        "client_name": client_name,
        "redirect_uris": [redirect_uri],
        "grant_types": ["authorization_code", "refresh_token"],
        "response_types": ["code"],
        "token_endpoint_auth_method": asked,
        "application_type": "native",
    });
    let response = http
        .post(endpoint)
        .header(reqwest::header::ACCEPT, "application/json")
        .header(reqwest::header::CONTENT_TYPE, "application/json")
        .body(body.to_string())
        .timeout(REGISTRATION_TIMEOUT)
        .send()
        .await
        .map_err(|e| AuthError::unreachable(endpoint, e))?;
    let status = response.status().as_u16();
    let bytes = read_limited(response, MAX_ANSWER_BYTES).await?;
    if !(200..300).contains(&status) {
        return Err(AuthError::RegistrationRefused {
            issuer: metadata.issuer.clone(),
            status,
            body: String::from_utf8_lossy(&bytes[..bytes.len().min(512)]).into_owned(),
        });
    }
    let answer: RegistrationAnswer =
        serde_json::from_slice(&bytes).map_err(|e| AuthError::BadMetadata {
            url: endpoint.to_owned(),
            reason: format!("the registration answer is not one: {e}"),
        })?;
    let registered = match answer.token_endpoint_auth_method.as_deref() {
        Some("client_secret_post") => Some(TokenAuthMethod::ClientSecretPost),
        Some("client_secret_basic") => Some(TokenAuthMethod::ClientSecretBasic),
        _ => None,
    };
    Ok(ClientIdentity {
        auth_method: TokenAuthMethod::choose(answer.client_secret.is_some(), registered, metadata),
        client_id: answer.client_id,
        client_secret: answer.client_secret,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn metadata(registration: bool, cimd: bool) -> ServerMetadata {
        serde_json::from_value(json!({
            "issuer": "https://as",
            "authorization_endpoint": "https://as/a",
            "token_endpoint": "https://as/t",
            "registration_endpoint": registration.then_some("https://as/register"),
            "client_id_metadata_document_supported": cimd,
        }))
        .unwrap()
    }

    #[test]
    fn a_client_id_is_pre_registered_then_a_metadata_document_then_registered() {
        const DOCUMENT: &str = "https://app.example.com/client.json";
        let cimd = Some(DOCUMENT);
        assert!(matches!(
            choose(Some("app"), Some("s"), cimd, &metadata(true, true)),
            Ok(Registration::PreRegistered(ClientIdentity { client_id, client_secret: Some(_), auth_method: TokenAuthMethod::ClientSecretBasic })) if client_id == "app"
        ));
        assert!(matches!(
            choose(None, None, cimd, &metadata(true, true)),
            Ok(Registration::MetadataDocument(ClientIdentity { client_id, auth_method: TokenAuthMethod::None, .. })) if client_id == DOCUMENT
        ));
        // A document URL the server does not take: registration.
        assert!(matches!(
            choose(None, None, cimd, &metadata(true, false)),
            Ok(Registration::Dynamic { endpoint }) if endpoint == "https://as/register"
        ));
        let refused = choose(None, None, None, &metadata(false, true)).unwrap_err();
        assert!(
            refused.to_string().contains("--oauth-client-metadata-url"),
            "{refused}"
        );
        let refused = choose(None, None, cimd, &metadata(false, false)).unwrap_err();
        assert!(
            refused.to_string().contains("--oauth-client-id"),
            "{refused}"
        );
        assert!(
            !refused.to_string().contains("--oauth-client-metadata-url"),
            "{refused}"
        );
    }
}
