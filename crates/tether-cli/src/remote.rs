//! What the subcommands that talk to a remote server (`call`, `connect`) read from their
//! flags the same way: extra headers and the bearer token file; and the secret files `serve`
//! reads. One place, so all accept and refuse exactly the same values. (`bench` is in the
//! library and reads its token file itself.)

use std::fs;
use std::path::Path;
use std::sync::Arc;

use tether::client::{AuthProvider, StaticToken};

use crate::UsageError;

/// Parses `--header 'Name: value'`.
pub(crate) fn parse_header(header: &str) -> Result<(String, String), UsageError> {
    let Some((name, value)) = header.split_once(':') else {
        return Err(UsageError(format!(
            "--header {header:?}: expected 'Name: value'"
        )));
    };
    Ok((name.trim().to_owned(), value.trim().to_owned()))
}

/// Parses every `--header`.
pub(crate) fn parse_headers(headers: &[String]) -> Result<Vec<(String, String)>, UsageError> {
    headers.iter().map(|header| parse_header(header)).collect()
}

/// The secret in the file `path` that `flag` names: its contents without surrounding
/// whitespace, which must not be empty.
pub(crate) fn read_secret_file(flag: &str, path: &Path) -> Result<String, UsageError> {
    let text = fs::read_to_string(path)
        .map_err(|e| UsageError(format!("{flag} {}: {e}", path.display())))?;
    let secret = text.trim();
    if secret.is_empty() {
        return Err(UsageError(format!("{flag} {} is empty", path.display())));
    }
    Ok(secret.to_owned())
}

/// The bearer token in `path` (surrounding whitespace removed), as the client's auth hook.
pub(crate) fn bearer_auth(path: &Path) -> Result<Arc<dyn AuthProvider>, UsageError> {
    let token = fs::read_to_string(path)
        .map_err(|e| UsageError(format!("--bearer-token-file {}: {e}", path.display())))?;
    Ok(Arc::new(StaticToken(token.trim().to_owned())))
}
