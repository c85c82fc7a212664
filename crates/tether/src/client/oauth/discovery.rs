//! Finding a protected server's authorization server, in the order MCP authorization gives:
//! the Protected Resource Metadata (RFC 9728) from the challenge's `resource_metadata`, else
//! the path-suffixed, then the root well-known URI; then the authorization server's metadata
//! by RFC 8414, then OpenID discovery, with the path-insertion variants. The candidate URLs,
//! the checks on each document (its `issuer` equal to the one the URL was built from, PKCE
//! `S256` offered, the metadata's `resource` covering the server's URL) are pure; the fetch
//! is a thin loop over them.

use reqwest::Url;
use serde::{Deserialize, Serialize};

use crate::client::error::AuthError;

/// The well-known suffix of Protected Resource Metadata (RFC 9728 §3).
const PROTECTED_RESOURCE: &str = "/.well-known/oauth-protected-resource";
/// RFC 8414 §3.
const AUTHORIZATION_SERVER: &str = "/.well-known/oauth-authorization-server";
/// OpenID Connect Discovery 1.0 §4.
const OPENID_CONFIGURATION: &str = "/.well-known/openid-configuration";

/// A server's Protected Resource Metadata (RFC 9728 §2), the fields a client uses.
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct ResourceMetadata {
    /// The resource's identifier: the URI tokens must be issued for.
    #[serde(default)]
    pub(crate) resource: Option<String>,
    /// The authorization servers whose tokens the resource accepts, as their issuers.
    #[serde(default)]
    pub(crate) authorization_servers: Vec<String>,
    /// Scopes the resource knows.
    #[serde(default)]
    pub(crate) scopes_supported: Option<Vec<String>>,
}

/// An authorization server's metadata (RFC 8414 §2), the fields a client uses. Kept in the
/// token cache beside the tokens, so that a new process refreshes without discovery.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct ServerMetadata {
    /// The issuer, equal byte for byte to the one the metadata URL was built from.
    pub(crate) issuer: String,
    /// Where the user agent is sent.
    pub(crate) authorization_endpoint: String,
    /// Where codes and refresh tokens are exchanged.
    pub(crate) token_endpoint: String,
    /// Dynamic Client Registration (RFC 7591), if offered.
    #[serde(default)]
    pub(crate) registration_endpoint: Option<String>,
    /// Scopes the server knows.
    #[serde(default)]
    pub(crate) scopes_supported: Option<Vec<String>>,
    /// PKCE methods; MCP requires `S256` to be listed.
    #[serde(default)]
    pub(crate) code_challenge_methods_supported: Option<Vec<String>>,
    /// `client_secret_basic`, `client_secret_post`, `none`, …; absent means
    /// `client_secret_basic` (RFC 8414 §2).
    #[serde(default)]
    pub(crate) token_endpoint_auth_methods_supported: Option<Vec<String>>,
    /// Whether a `client_id` may be the URL of a Client ID Metadata Document.
    #[serde(default)]
    pub(crate) client_id_metadata_document_supported: bool,
    /// RFC 9207: the authorization response carries `iss`, which the client then checks.
    #[serde(default)]
    pub(crate) authorization_response_iss_parameter_supported: bool,
}

impl ServerMetadata {
    /// MCP authorization: a client MUST use PKCE with `S256` and refuse a server whose
    /// metadata does not list it (absent included).
    pub(crate) fn require_s256(&self) -> Result<(), AuthError> {
        let offered = self
            .code_challenge_methods_supported
            .as_deref()
            .is_some_and(|methods| methods.iter().any(|m| m == "S256"));
        if offered {
            Ok(())
        } else {
            Err(AuthError::NoS256 {
                issuer: self.issuer.clone(),
            })
        }
    }
}

/// Where the Protected Resource Metadata may be, in order: the challenge's
/// `resource_metadata`, the path-suffixed well-known URI, the root one.
pub(crate) fn resource_metadata_urls(server: &Url, from_challenge: Option<&str>) -> Vec<Url> {
    let mut urls = Vec::new();
    if let Some(url) = from_challenge.and_then(|u| Url::parse(u).ok())
        && matches!(url.scheme(), "http" | "https")
    {
        urls.push(url);
    }
    let path = server.path().trim_end_matches('/');
    for suffix in [path, ""] {
        let mut url = server.clone();
        url.set_query(None);
        url.set_fragment(None);
        url.set_path(&format!("{PROTECTED_RESOURCE}{suffix}"));
        if !urls.contains(&url) {
            urls.push(url);
        }
    }
    urls
}

/// Where an issuer's metadata may be (MCP authorization, "Authorization Server Metadata
/// Discovery"): with a path, RFC 8414's path insertion, OpenID's path insertion, then
/// OpenID's path appending; without one, RFC 8414 then OpenID.
pub(crate) fn server_metadata_urls(issuer: &str) -> Result<Vec<Url>, AuthError> {
    let base = Url::parse(issuer).map_err(|_| AuthError::BadMetadata {
        url: issuer.to_owned(),
        reason: "an authorization server's issuer is not a URL".to_owned(),
    })?;
    let path = base.path().trim_end_matches('/').to_owned();
    let at = |path: String| {
        let mut url = base.clone();
        url.set_query(None);
        url.set_fragment(None);
        url.set_path(&path);
        url
    };
    Ok(if path.is_empty() {
        vec![
            at(AUTHORIZATION_SERVER.to_owned()),
            at(OPENID_CONFIGURATION.to_owned()),
        ]
    } else {
        vec![
            at(format!("{AUTHORIZATION_SERVER}{path}")),
            at(format!("{OPENID_CONFIGURATION}{path}")),
            at(format!("{path}{OPENID_CONFIGURATION}")),
        ]
    })
}

/// The resource a token is asked for (RFC 8707): the metadata's `resource` when it covers
/// `server` (same origin, and its path the server's or a parent of it, segment by segment),
/// else an error; without metadata `resource`, the server's canonical URI (no fragment, no
/// query, no trailing slash).
pub(crate) fn resource_for(server: &Url, metadata: &ResourceMetadata) -> Result<String, AuthError> {
    let Some(resource) = metadata.resource.as_deref() else {
        return Ok(canonical_uri(server));
    };
    let covers = Url::parse(resource).is_ok_and(|declared| {
        declared.origin() == server.origin() && {
            let declared = declared.path().trim_end_matches('/');
            let requested = server.path().trim_end_matches('/');
            requested == declared
                || requested
                    .strip_prefix(declared)
                    .is_some_and(|rest| rest.starts_with('/'))
        }
    });
    if covers {
        Ok(resource.to_owned())
    } else {
        Err(AuthError::ResourceMismatch {
            resource: resource.to_owned(),
            server: server.to_string(),
        })
    }
}

/// RFC 8707 / MCP: lower-case scheme and host (as [`Url`] keeps them), no fragment or query,
/// no trailing slash.
pub(crate) fn canonical_uri(server: &Url) -> String {
    let mut url = server.clone();
    url.set_fragment(None);
    url.set_query(None);
    url.as_str().trim_end_matches('/').to_owned()
}

/// The first authorization server a resource lists. MCP leaves the choice to the client;
/// the first is what every SDK takes.
pub(crate) fn first_issuer(metadata: &ResourceMetadata, url: &Url) -> Result<String, AuthError> {
    metadata
        .authorization_servers
        .first()
        .cloned()
        .ok_or_else(|| AuthError::BadMetadata {
            url: url.to_string(),
            reason: "its authorization_servers is empty".to_owned(),
        })
}

/// Checks a fetched authorization server document: it must name the issuer it was looked up
/// for, exactly (RFC 8414 §3.3), and offer PKCE `S256`.
pub(crate) fn check_server_metadata(
    issuer: &str,
    metadata: &ServerMetadata,
) -> Result<(), AuthError> {
    if metadata.issuer != issuer {
        return Err(AuthError::IssuerMismatch {
            expected: issuer.to_owned(),
            found: metadata.issuer.clone(),
        });
    }
    metadata.require_s256()
}

/// Fetches the first of `urls` that answers 200 with a JSON document of type `T`. A 4xx,
/// or a 200 that is not such a document, moves on to the next URL; a network failure is
/// the server being unreachable.
pub(crate) async fn fetch_first<T: serde::de::DeserializeOwned>(
    http: &reqwest::Client,
    urls: &[Url],
) -> Result<Option<(Url, T)>, AuthError> {
    for url in urls {
        let response = http
            .get(url.clone())
            .header(reqwest::header::ACCEPT, "application/json")
            .send()
            .await
            .map_err(|e| AuthError::unreachable(url.as_str(), e))?;
        if !response.status().is_success() {
            continue;
        }
        let body = super::wire::read_limited(response, super::wire::MAX_ANSWER_BYTES).await?;
        if let Ok(document) = serde_json::from_slice::<T>(&body) {
            return Ok(Some((url.clone(), document)));
        }
    }
    Ok(None)
}

/// The resource's metadata, from the first URL of [`resource_metadata_urls`] that has it.
pub(crate) async fn fetch_resource_metadata(
    http: &reqwest::Client,
    server: &Url,
    from_challenge: Option<&str>,
) -> Result<(Url, ResourceMetadata), AuthError> {
    let urls = resource_metadata_urls(server, from_challenge);
    fetch_first(http, &urls)
        .await?
        .ok_or_else(|| AuthError::NoResourceMetadata {
            tried: urls.iter().map(Url::to_string).collect(),
        })
}

/// The issuer's metadata, by [`server_metadata_urls`], checked by [`check_server_metadata`].
/// A document that names another issuer is refused, not skipped: it is what a mix-up looks
/// like.
pub(crate) async fn fetch_server_metadata(
    http: &reqwest::Client,
    issuer: &str,
) -> Result<ServerMetadata, AuthError> {
    let urls = server_metadata_urls(issuer)?;
    let (_, metadata) = fetch_first::<ServerMetadata>(http, &urls)
        .await?
        .ok_or_else(|| AuthError::NoServerMetadata {
            issuer: issuer.to_owned(),
            tried: urls.iter().map(Url::to_string).collect(),
        })?;
    check_server_metadata(issuer, &metadata)?;
    Ok(metadata)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn url(s: &str) -> Url {
        Url::parse(s).unwrap()
    }

    fn strings(urls: Vec<Url>) -> Vec<String> {
        urls.into_iter().map(String::from).collect()
    }

    #[test]
    fn resource_metadata_is_looked_for_in_the_order_mcp_gives() {
        assert_eq!(
            strings(resource_metadata_urls(
                &url("https://mcp.example.com/public/mcp?x=1"),
                Some("https://mcp.example.com/meta.json")
            )),
            [
                "https://mcp.example.com/meta.json",
                "https://mcp.example.com/.well-known/oauth-protected-resource/public/mcp",
                "https://mcp.example.com/.well-known/oauth-protected-resource",
            ]
        );
        // No path: the root URI once; an unusable challenge URL is skipped.
        assert_eq!(
            strings(resource_metadata_urls(
                &url("https://mcp.example.com"),
                Some("ftp://x/y")
            )),
            ["https://mcp.example.com/.well-known/oauth-protected-resource"]
        );
    }

    #[test]
    fn server_metadata_urls_insert_and_append_the_issuers_path() {
        assert_eq!(
            strings(server_metadata_urls("https://auth.example.com/tenant1").unwrap()),
            [
                "https://auth.example.com/.well-known/oauth-authorization-server/tenant1",
                "https://auth.example.com/.well-known/openid-configuration/tenant1",
                "https://auth.example.com/tenant1/.well-known/openid-configuration",
            ]
        );
        assert_eq!(
            strings(server_metadata_urls("https://auth.example.com").unwrap()),
            [
                "https://auth.example.com/.well-known/oauth-authorization-server",
                "https://auth.example.com/.well-known/openid-configuration",
            ]
        );
        assert!(server_metadata_urls("not a url").is_err());
    }

    fn metadata(resource: Option<&str>) -> ResourceMetadata {
        ResourceMetadata {
            resource: resource.map(str::to_owned),
            authorization_servers: vec!["https://as".to_owned()],
            scopes_supported: None,
        }
    }

    #[test]
    fn the_resource_must_cover_the_servers_url() {
        let server = url("https://mcp.example.com/api/mcp");
        for good in [
            "https://mcp.example.com/api/mcp",
            "https://mcp.example.com/api/mcp/",
            "https://mcp.example.com/api",
            "https://mcp.example.com",
        ] {
            assert_eq!(resource_for(&server, &metadata(Some(good))).unwrap(), good);
        }
        for bad in [
            "https://evil.example.com/api/mcp",
            "http://mcp.example.com/api/mcp",
            "https://mcp.example.com:8443/api/mcp",
            "https://mcp.example.com/ap",
            "https://mcp.example.com/api/mcp/other",
            "not a url",
        ] {
            assert!(
                matches!(
                    resource_for(&server, &metadata(Some(bad))),
                    Err(AuthError::ResourceMismatch { .. })
                ),
                "{bad}"
            );
        }
        assert_eq!(
            resource_for(&url("HTTPS://MCP.Example.com/mcp/#frag"), &metadata(None)).unwrap(),
            "https://mcp.example.com/mcp"
        );
    }

    fn server(issuer: &str, methods: Option<&[&str]>) -> ServerMetadata {
        serde_json::from_value(serde_json::json!({
            "issuer": issuer,
            "authorization_endpoint": "https://as/authorize",
            "token_endpoint": "https://as/token",
            "code_challenge_methods_supported": methods,
        }))
        .unwrap()
    }

    #[test]
    fn an_authorization_server_must_name_its_issuer_exactly_and_offer_s256() {
        assert!(
            check_server_metadata("https://as", &server("https://as", Some(&["S256"]))).is_ok()
        );
        assert!(matches!(
            check_server_metadata("https://as", &server("https://as/", Some(&["S256"]))),
            Err(AuthError::IssuerMismatch { .. })
        ));
        for methods in [None, Some(&["plain"][..]), Some(&[][..])] {
            assert!(matches!(
                check_server_metadata("https://as", &server("https://as", methods)),
                Err(AuthError::NoS256 { .. })
            ));
        }
    }
}
