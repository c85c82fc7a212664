//! The `Bearer` challenge of a `WWW-Authenticate` header (RFC 6750 §3, RFC 7235 §2.1), parsed
//! without I/O: what a 401 or 403 tells the client about where to find the server's
//! Protected Resource Metadata (`resource_metadata`, RFC 9728 §5.1), which scopes the
//! operation needs and why the token was refused.

/// What a server's `Bearer` challenge says. Unknown parameters are ignored.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BearerChallenge {
    /// `error`: `invalid_token`, `insufficient_scope`, `invalid_request`, or absent when no
    /// token was sent.
    pub error: Option<String>,
    /// `scope`: the scopes the operation needs, space-separated.
    pub scope: Option<String>,
    /// `resource_metadata`: the URL of the Protected Resource Metadata document.
    pub resource_metadata: Option<String>,
    /// `error_description`, for messages.
    pub error_description: Option<String>,
}

impl BearerChallenge {
    /// The `Bearer` challenge among `values` (every `WWW-Authenticate` header of one
    /// response), or `None` when none of them is a `Bearer` challenge.
    pub fn find<'a>(values: impl IntoIterator<Item = &'a str>) -> Option<Self> {
        values.into_iter().find_map(parse_bearer)
    }

    /// Whether this is a step-up request: the token is good but lacks scope.
    #[must_use]
    pub fn is_insufficient_scope(&self) -> bool {
        self.error.as_deref() == Some("insufficient_scope")
    }

    /// The challenged scopes, split.
    pub fn scopes(&self) -> impl Iterator<Item = &str> {
        self.scope.as_deref().unwrap_or("").split_ascii_whitespace()
    }
}

/// One header value: challenges are `scheme [token68 | param, …]`, several to a value. The
/// `Bearer` one (the scheme is case-insensitive, RFC 7235 §2.1) is parsed into its params.
fn parse_bearer(value: &str) -> Option<BearerChallenge> {
    let mut rest = value;
    let mut in_bearer = None::<BearerChallenge>;
    loop {
        rest = rest.trim_start_matches([' ', '\t', ',']);
        if rest.is_empty() {
            return in_bearer;
        }
        let token_end = rest.find(|c: char| !is_token_char(c)).unwrap_or(rest.len());
        let (token, after) = rest.split_at(token_end);
        if token.is_empty() {
            // Not a token where one must be: the header is malformed from here on.
            return in_bearer;
        }
        let after_ws = after.trim_start_matches([' ', '\t']);
        if let Some(value_start) = after_ws.strip_prefix('=') {
            // A `name=value` parameter of the current challenge.
            let (param_value, remainder) = parse_param_value(value_start);
            if let Some(challenge) = in_bearer.as_mut() {
                let slot = match token.to_ascii_lowercase().as_str() {
                    "error" => Some(&mut challenge.error),
                    "scope" => Some(&mut challenge.scope),
                    "resource_metadata" => Some(&mut challenge.resource_metadata),
                    "error_description" => Some(&mut challenge.error_description),
                    _ => None,
                };
                if let Some(slot) = slot
                    && slot.is_none()
                {
                    *slot = Some(param_value);
                }
            }
            rest = remainder;
        } else {
            // A new scheme. A Bearer challenge already read ends here.
            if in_bearer.is_some() {
                return in_bearer;
            }
            if token.eq_ignore_ascii_case("bearer") {
                in_bearer = Some(BearerChallenge::default());
            }
            rest = after;
        }
    }
}

/// A parameter's value: a quoted string (with `\` escapes) or a token. Returns the value and
/// what follows it.
fn parse_param_value(input: &str) -> (String, &str) {
    let input = input.trim_start_matches([' ', '\t']);
    if let Some(quoted) = input.strip_prefix('"') {
        let mut value = String::new();
        let mut chars = quoted.char_indices();
        while let Some((index, c)) = chars.next() {
            match c {
                '\\' => {
                    if let Some((_, escaped)) = chars.next() {
                        value.push(escaped);
                    }
                }
                '"' => return (value, &quoted[index + 1..]),
                c => value.push(c),
            }
        }
        // An unterminated quote: take what there is.
        (value, "")
    } else {
        let end = input.find([',', ' ', '\t']).unwrap_or(input.len());
        (input[..end].to_owned(), &input[end..])
    }
}

/// RFC 9110 §5.6.2 `tchar`.
fn is_token_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || "!#$%&'*+-.^_`|~".contains(c)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_parameters_a_protected_mcp_server_sends() {
        let challenge = BearerChallenge::find([
            r#"Bearer error="insufficient_scope", scope="files:read files:write", resource_metadata="https://mcp.example.com/.well-known/oauth-protected-resource/mcp""#,
        ])
        .unwrap();
        assert_eq!(challenge.error.as_deref(), Some("insufficient_scope"));
        assert!(challenge.is_insufficient_scope());
        assert_eq!(
            challenge.scopes().collect::<Vec<_>>(),
            ["files:read", "files:write"]
        );
        assert_eq!(
            challenge.resource_metadata.as_deref(),
            Some("https://mcp.example.com/.well-known/oauth-protected-resource/mcp")
        );
    }

    #[test]
    fn finds_bearer_among_other_schemes_in_any_case_and_with_escapes() {
        let challenge = BearerChallenge::find([
            r#"Basic realm="x", bearer realm="a \"b\"", error=invalid_token, DPoP algs="ES256""#,
        ])
        .unwrap();
        assert_eq!(challenge.error.as_deref(), Some("invalid_token"));
        assert_eq!(challenge.resource_metadata, None);
        // Parameters of the DPoP challenge that follows are not Bearer's.
        assert_eq!(challenge.scope, None);
    }

    #[test]
    fn a_bare_bearer_has_no_parameters_and_other_schemes_are_none() {
        assert_eq!(
            BearerChallenge::find(["Bearer"]),
            Some(BearerChallenge::default())
        );
        assert_eq!(BearerChallenge::find([r#"Basic realm="x""#]), None);
        assert_eq!(BearerChallenge::find(Vec::<&str>::new()), None);
        // The first header without Bearer, the second with it.
        assert!(BearerChallenge::find(["Basic", "Bearer scope=a"]).is_some());
    }

    #[test]
    fn malformed_values_keep_what_was_read_before_the_damage() {
        let scope = |value: &str| BearerChallenge::find([value]).map(|c| c.scope);
        // An unterminated quote: the rest is the value.
        assert_eq!(scope("Bearer scope=\"a b"), Some(Some("a b".to_owned())));
        assert_eq!(scope("Bearer scope="), Some(Some(String::new())));
        // `name = value` with spaces is a parameter (RFC 7235's BWS), not a challenge.
        assert_eq!(scope("Bearer =x"), None);
        assert_eq!(scope("Bearer ,,, ,"), Some(None));
        // No token where one must be: the Bearer challenge as read so far.
        let glued = BearerChallenge::find(["Bearer error=\"a\"\"b\", scope=x"]).unwrap();
        assert_eq!(glued.error.as_deref(), Some("a"));
        assert_eq!(glued.scope, None, "nothing after the damage is trusted");
        assert_eq!(BearerChallenge::find(["\""]), None);
    }
}
