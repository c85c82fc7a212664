//! The HTTP stack a client is built on: rustls with the *ring* provider, the platform's roots
//! plus [`ClientConfig::extra_root_certificates`](super::ClientConfig), timeouts and
//! proxies from the environment.

use super::config::ClientConfig;
use super::error::Error;

/// Parses [`ClientConfig::extra_root_certificates`](super::ClientConfig::extra_root_certificates): PEM bundles and DER certificates.
pub(super) fn root_certificates(entries: &[Vec<u8>]) -> Result<Vec<reqwest::Certificate>, Error> {
    let mut roots = Vec::new();
    for (index, entry) in entries.iter().enumerate() {
        let bad = |e: &dyn std::fmt::Display| {
            Error::Config(format!("extra_root_certificates[{index}]: {e}"))
        };
        if entry.trim_ascii_start().starts_with(b"-----BEGIN") {
            let bundle = reqwest::Certificate::from_pem_bundle(entry).map_err(|e| bad(&e))?;
            if bundle.is_empty() {
                return Err(bad(&"no CERTIFICATE block in the PEM"));
            }
            roots.extend(bundle);
        } else {
            roots.push(reqwest::Certificate::from_der(entry).map_err(|e| bad(&e))?);
        }
    }
    Ok(roots)
}

/// The HTTP client: the platform's roots plus the extra ones. A system without a CA bundle
/// (a minimal container) has no platform roots, which fails the build; the client then
/// trusts only the extra roots, so that plain `http://` still works and an `https://`
/// server the extra roots do not cover is refused with [`Error::Tls`](super::Error::Tls) (unknown issuer).
pub(super) fn http_client(config: &ClientConfig) -> Result<reqwest::Client, Error> {
    let roots = root_certificates(&config.extra_root_certificates)?;
    ensure_crypto_provider();
    let builder = || {
        reqwest::Client::builder()
            .connect_timeout(config.connect_timeout)
            .tcp_nodelay(true)
    };
    let platform = match builder().tls_certs_merge(roots.clone()).build() {
        Ok(http) => return Ok(http),
        Err(error) => error,
    };
    let http = builder()
        .tls_certs_only(roots)
        .build()
        .map_err(|_| Error::Config(format!("http client: {}", crate::error_chain(&platform))))?;
    tracing::warn!(
        error = %crate::error_chain(&platform),
        "no platform root certificates; trusting only ClientConfig::extra_root_certificates"
    );
    Ok(http)
}

pub(crate) fn ensure_crypto_provider() {
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        // Fails only if another thread installed one meanwhile, which is as good.
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
}
