//! What every OAuth exchange shares on the wire: `application/x-www-form-urlencoded` bodies
//! (RFC 6749 Appendix B, also used for HTTP Basic client credentials, §2.3.1), bounded reads
//! of an authorization server's answers, and its error answers (§5.2). The server's token
//! introspection uses the same encoding, and it and the server's key fetches the same
//! bounded read.

use crate::client::error::AuthError;

/// The most of an authorization server's answer that is read: its documents and token
/// answers are a few KiB.
pub(crate) const MAX_ANSWER_BYTES: usize = 256 * 1024;

/// `application/x-www-form-urlencoded` encoding of one value.
pub(crate) fn form_encode(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for byte in value.bytes() {
        match byte {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'*' => {
                out.push(char::from(byte));
            }
            b' ' => out.push('+'),
            _ => out.push_str(&format!("%{byte:02X}")),
        }
    }
    out
}

/// A form body of `pairs`, in order.
pub(crate) fn form_body(pairs: &[(&str, &str)]) -> String {
    pairs
        .iter()
        .map(|(name, value)| format!("{}={}", form_encode(name), form_encode(value)))
        .collect::<Vec<_>>()
        .join("&")
}

/// The body of `response`, refused past `limit` bytes.
pub(crate) async fn read_limited(
    mut response: reqwest::Response,
    limit: usize,
) -> Result<Vec<u8>, AuthError> {
    let url = response.url().to_string();
    let mut body = Vec::new();
    while let Some(chunk) = response
        .chunk()
        .await
        .map_err(|e| AuthError::unreachable(&url, e))?
    {
        if body.len() + chunk.len() > limit {
            return Err(AuthError::BadMetadata {
                url,
                reason: format!("the answer is larger than {limit} bytes"),
            });
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// An error answer of the token or registration endpoint: its OAuth `error` and
/// `error_description`, or the start of the body when it is not an OAuth error.
pub(crate) fn error_answer(body: &[u8]) -> (String, Option<String>) {
    #[derive(serde::Deserialize)]
    struct OAuthErrorAnswer {
        error: String,
        #[serde(default)]
        error_description: Option<String>,
    }
    match serde_json::from_slice::<OAuthErrorAnswer>(body) {
        Ok(answer) => (answer.error, answer.error_description),
        Err(_) => {
            let text = String::from_utf8_lossy(&body[..body.len().min(512)]).into_owned();
            (text, None)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn form_encoding_is_rfc_6749_appendix_b() {
        assert_eq!(form_encode("a b+c/d=é"), "a+b%2Bc%2Fd%3D%C3%A9");
        assert_eq!(form_encode("A-z_0.9*~"), "A-z_0.9*%7E");
        assert_eq!(
            form_body(&[("grant_type", "refresh_token"), ("scope", "a b")]),
            "grant_type=refresh_token&scope=a+b"
        );
    }

    #[test]
    fn error_answers_give_the_oauth_error_or_the_body() {
        assert_eq!(
            error_answer(br#"{"error":"invalid_grant","error_description":"used"}"#),
            ("invalid_grant".to_owned(), Some("used".to_owned()))
        );
        assert_eq!(error_answer(b"<html>"), ("<html>".to_owned(), None));
    }
}
