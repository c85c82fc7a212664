//! Checking one JWT access token against keys already loaded: pure, no I/O, so the hostile
//! cases (algorithm `none`, an HMAC algorithm with a public key, another issuer or audience,
//! expiry, `nbf`, a missing `exp`) are tested without an authorization server.
//!
//! What is checked, in order: the header parses and names an asymmetric algorithm; `typ` is
//! absent, `JWT` or `at+jwt` (RFC 9068 says `at+jwt`; real servers send `JWT` or nothing);
//! `iss` (read before the signature only to choose the issuer) is one of those configured,
//! byte for byte; the key named by `kid` is in that issuer's set and allows the algorithm;
//! the signature; then `iss`, `aud` containing the resource, `exp` (required), `nbf`, with
//! the leeway. The principal is `iss` and `sub`; scopes come from `scope` (space-separated)
//! or `scp` (an array); the client id from `client_id`, else `azp`.

use std::collections::HashSet;
use std::sync::Arc;

use jsonwebtoken::jwk::{Jwk, JwkSet, KeyAlgorithm};
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde::Deserialize;

use crate::server::auth::Credentials;

/// The algorithms tether accepts: asymmetric ones only, never `none` or HMAC.
const ACCEPTED: [Algorithm; 9] = [
    Algorithm::RS256,
    Algorithm::RS384,
    Algorithm::RS512,
    Algorithm::PS256,
    Algorithm::PS384,
    Algorithm::PS512,
    Algorithm::ES256,
    Algorithm::ES384,
    Algorithm::EdDSA,
];

/// Tokens longer than this are refused before anything is decoded, hashed or sent anywhere
/// (`super::OAuthResource`'s `authenticate`).
pub(crate) const MAX_TOKEN_BYTES: usize = 16 * 1024;

/// Why a token was refused; the label is counted and logged, never sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Rejection {
    /// Not three base64url parts, a header or payload that is not JSON, or too long.
    Malformed,
    /// `none`, an HMAC algorithm, or one the key does not allow.
    Algorithm,
    /// A `typ` other than `JWT` or `at+jwt`.
    Type,
    /// An `iss` that is not a configured issuer.
    Issuer,
    /// A `kid` the issuer's key set does not hold (after at most one refetch).
    UnknownKey,
    /// The signature does not verify.
    Signature,
    /// `aud` does not name the resource.
    Audience,
    /// Past `exp` (with the leeway).
    Expired,
    /// Before `nbf` (with the leeway).
    NotYetValid,
    /// `exp` missing, or both `sub` and the client id.
    MissingClaim,
    /// Not a JWT, and the introspection endpoint says it is not active.
    Inactive,
    /// A `token_type` other than `Bearer` in an introspection answer.
    TokenType,
}

impl Rejection {
    /// The label of `tether_auth_failures_total{reason}` and of the log line.
    pub(crate) const fn as_str(self) -> &'static str {
        match self {
            Self::Malformed => "malformed",
            Self::Algorithm => "algorithm",
            Self::Type => "type",
            Self::Issuer => "issuer",
            Self::UnknownKey => "unknown_key",
            Self::Signature => "bad_signature",
            Self::Audience => "audience",
            Self::Expired => "expired",
            Self::NotYetValid => "not_yet_valid",
            Self::MissingClaim => "missing_claim",
            Self::Inactive => "inactive",
            Self::TokenType => "token_type",
        }
    }
}

/// What the header and the unverified payload say: enough to choose the issuer and key.
#[derive(Debug)]
pub(crate) struct Unverified {
    pub(crate) algorithm: Algorithm,
    pub(crate) kid: Option<String>,
    pub(crate) issuer: String,
}

#[derive(Deserialize)]
struct IssuerOnly {
    iss: Option<String>,
}

/// Reads the header and the payload's `iss` without trusting either.
pub(crate) fn inspect(token: &str) -> Result<Unverified, Rejection> {
    if token.split('.').count() != 3 {
        return Err(Rejection::Malformed);
    }
    // An unknown `alg` (`none` included) fails to parse: jsonwebtoken has no such algorithm.
    let header = jsonwebtoken::decode_header(token).map_err(|error| match error.kind() {
        jsonwebtoken::errors::ErrorKind::InvalidAlgorithmName => Rejection::Algorithm,
        _ => Rejection::Malformed,
    })?;
    if !ACCEPTED.contains(&header.alg) {
        return Err(Rejection::Algorithm);
    }
    match header
        .typ
        .as_deref()
        .map(str::to_ascii_lowercase)
        .as_deref()
    {
        None | Some("jwt" | "at+jwt" | "application/at+jwt") => {}
        Some(_) => return Err(Rejection::Type),
    }
    let claims: IssuerOnly =
        jsonwebtoken::dangerous::insecure_decode_claims(token).map_err(|_| Rejection::Malformed)?;
    Ok(Unverified {
        algorithm: header.alg,
        kid: header.kid,
        issuer: claims.iss.ok_or(Rejection::MissingClaim)?,
    })
}

/// The key of `keys` that `unverified` names and that allows its algorithm.
pub(crate) fn key_for<'k>(keys: &'k JwkSet, unverified: &Unverified) -> Result<&'k Jwk, Rejection> {
    let key = match &unverified.kid {
        Some(kid) => keys.find(kid),
        // Without a `kid` only a set of one key is unambiguous.
        None if keys.keys.len() == 1 => keys.keys.first(),
        None => None,
    }
    .ok_or(Rejection::UnknownKey)?;
    if let Some(allowed) = key.common.key_algorithm
        && !same_algorithm(allowed, unverified.algorithm)
    {
        return Err(Rejection::Algorithm);
    }
    Ok(key)
}

fn same_algorithm(key: KeyAlgorithm, token: Algorithm) -> bool {
    matches!(
        (key, token),
        (KeyAlgorithm::RS256, Algorithm::RS256)
            | (KeyAlgorithm::RS384, Algorithm::RS384)
            | (KeyAlgorithm::RS512, Algorithm::RS512)
            | (KeyAlgorithm::PS256, Algorithm::PS256)
            | (KeyAlgorithm::PS384, Algorithm::PS384)
            | (KeyAlgorithm::PS512, Algorithm::PS512)
            | (KeyAlgorithm::ES256, Algorithm::ES256)
            | (KeyAlgorithm::ES384, Algorithm::ES384)
            | (KeyAlgorithm::EdDSA, Algorithm::EdDSA)
    )
}

#[derive(Deserialize)]
struct Claims {
    iss: String,
    // Optional here so that a token without it is `MissingClaim` (the validation requires
    // it), not a payload that fails to parse.
    exp: Option<u64>,
    sub: Option<String>,
    scope: Option<String>,
    scp: Option<Vec<String>>,
    client_id: Option<String>,
    azp: Option<String>,
}

/// Verifies `token` with `key` for `resource`, and says who it is for and when it expires.
pub(crate) fn verify(
    token: &str,
    unverified: &Unverified,
    key: &Jwk,
    resource: &str,
    leeway_secs: u64,
) -> Result<(Credentials, u64), Rejection> {
    let decoding = DecodingKey::from_jwk(key).map_err(|_| Rejection::UnknownKey)?;
    let mut validation = Validation::new(unverified.algorithm);
    validation.leeway = leeway_secs;
    validation.validate_nbf = true;
    validation.set_issuer(&[unverified.issuer.as_str()]);
    validation.set_audience(&[resource]);
    validation.required_spec_claims = HashSet::from(["exp".to_owned(), "iss".to_owned()]);
    let data = jsonwebtoken::decode::<Claims>(token, &decoding, &validation).map_err(|error| {
        use jsonwebtoken::errors::ErrorKind;
        match error.kind() {
            ErrorKind::InvalidSignature => Rejection::Signature,
            ErrorKind::InvalidAlgorithm | ErrorKind::InvalidAlgorithmName => Rejection::Algorithm,
            ErrorKind::ExpiredSignature => Rejection::Expired,
            ErrorKind::ImmatureSignature => Rejection::NotYetValid,
            ErrorKind::InvalidAudience => Rejection::Audience,
            ErrorKind::InvalidIssuer => Rejection::Issuer,
            ErrorKind::MissingRequiredClaim(_) => Rejection::MissingClaim,
            _ => Rejection::Malformed,
        }
    })?;
    let claims = data.claims;
    let scopes = match (claims.scope, claims.scp) {
        (Some(scope), _) => scope_list(&scope),
        (None, Some(scp)) => scp,
        (None, None) => Vec::new(),
    };
    let credentials = credentials(
        &claims.iss,
        claims.sub,
        claims.client_id.or(claims.azp),
        scopes,
    )?;
    Ok((credentials, claims.exp.ok_or(Rejection::MissingClaim)?))
}

/// The scopes of a space-separated `scope` claim or introspection field.
pub(crate) fn scope_list(scope: &str) -> Vec<String> {
    scope.split_ascii_whitespace().map(str::to_owned).collect()
}

/// Who a token checked by any means is for: `iss` and `sub`, or, for a token no resource
/// owner took part in (the client credentials grant, which many servers issue without
/// `sub`), `iss` and the client id, the subject RFC 9068 §2.2 names for it.
pub(crate) fn credentials(
    issuer: &str,
    subject: Option<String>,
    client_id: Option<String>,
    scopes: Vec<String>,
) -> Result<Credentials, Rejection> {
    let subject = subject
        .filter(|sub| !sub.is_empty())
        .or_else(|| client_id.clone().filter(|id| !id.is_empty()))
        .ok_or(Rejection::MissingClaim)?;
    Ok(Credentials {
        // An issuer is a URL without spaces, so `iss sub` is unambiguous.
        principal: Arc::from(format!("{issuer} {subject}")),
        scopes: Some(Arc::from(scopes)),
        client_id: client_id.map(Arc::from),
    })
}
