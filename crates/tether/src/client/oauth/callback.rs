//! The loopback redirect listener of one sign-in (RFC 8252 §7.3): bound to 127.0.0.1 only, on
//! a free port unless one is configured, it takes requests until one reaches `/callback`,
//! answers the browser with a short page saying how the sign-in went, and closes, so a
//! second callback finds nothing listening. Other paths (a browser's `/favicon.ico`) get
//! 404 and the wait goes on; the whole wait is bounded.

use std::net::{Ipv4Addr, SocketAddr};
use std::time::Duration;

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};

use crate::client::error::AuthError;

/// The redirect path, pinned (docs/CONTRACTS.md#oauth-client).
pub(crate) const CALLBACK_PATH: &str = "/callback";
/// A request head larger than this is not a browser's redirect.
const MAX_REQUEST_HEAD: usize = 16 * 1024;
/// How long one connection may take to send its request head.
const HEAD_TIMEOUT: Duration = Duration::from_secs(10);

/// A bound listener waiting for its one callback.
#[derive(Debug)]
pub(crate) struct CallbackListener {
    listener: TcpListener,
    address: SocketAddr,
}

impl CallbackListener {
    /// Binds 127.0.0.1:`port` (0: a free port).
    pub(crate) async fn bind(port: u16) -> Result<Self, AuthError> {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, port))
            .await
            .map_err(|e| AuthError::Callback(format!("cannot listen on 127.0.0.1:{port}: {e}")))?;
        let address = listener
            .local_addr()
            .map_err(|e| AuthError::Callback(e.to_string()))?;
        Ok(Self { listener, address })
    }

    /// `http://127.0.0.1:<port>/callback`.
    pub(crate) fn redirect_uri(&self) -> String {
        format!("http://{}{CALLBACK_PATH}", self.address)
    }

    /// Waits at most `timeout` for the callback; `judge` reads its query and says whether the
    /// sign-in succeeded, which the browser is told. The listener is closed when this returns.
    pub(crate) async fn wait<T>(
        self,
        timeout: Duration,
        judge: impl Fn(&[(String, String)]) -> Result<T, AuthError>,
    ) -> Result<T, AuthError> {
        let wait = async {
            loop {
                let (stream, _) = self
                    .listener
                    .accept()
                    .await
                    .map_err(|e| AuthError::Callback(e.to_string()))?;
                if let Some(outcome) = serve_one(stream, &judge).await {
                    return outcome;
                }
            }
        };
        tokio::time::timeout(timeout, wait)
            .await
            .map_err(|_| AuthError::CallbackTimeout {
                seconds: timeout.as_secs(),
            })?
    }
}

/// One connection: `None` when it was not the callback (another path, a broken request).
async fn serve_one<T>(
    mut stream: TcpStream,
    judge: &impl Fn(&[(String, String)]) -> Result<T, AuthError>,
) -> Option<Result<T, AuthError>> {
    let head = tokio::time::timeout(HEAD_TIMEOUT, read_head(&mut stream))
        .await
        .ok()??;
    let Some(target) = request_target(&head) else {
        let _ = respond(&mut stream, "400 Bad Request", "Not a sign-in callback.").await;
        return None;
    };
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    if path != CALLBACK_PATH {
        let _ = respond(&mut stream, "404 Not Found", "Not a sign-in callback.").await;
        return None;
    }
    let pairs: Vec<(String, String)> = reqwest::Url::parse(&format!("http://callback/?{query}"))
        .map(|url| url.query_pairs().into_owned().collect())
        .unwrap_or_default();
    let outcome = judge(&pairs);
    let _ = match &outcome {
        Ok(_) => {
            respond(
                &mut stream,
                "200 OK",
                "Signed in. You can close this tab and return to tether.",
            )
            .await
        }
        Err(error) => {
            respond(
                &mut stream,
                "400 Bad Request",
                &format!("Sign-in failed: {error}"),
            )
            .await
        }
    };
    Some(outcome)
}

async fn read_head(stream: &mut TcpStream) -> Option<String> {
    let mut head = Vec::new();
    let mut buffer = [0u8; 2048];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        let read = stream.read(&mut buffer).await.ok()?;
        if read == 0 || head.len() + read > MAX_REQUEST_HEAD {
            return None;
        }
        head.extend_from_slice(&buffer[..read]);
    }
    String::from_utf8(head).ok()
}

/// The target of `GET <target> HTTP/1.x`.
fn request_target(head: &str) -> Option<&str> {
    let line = head.lines().next()?;
    let mut parts = line.split(' ');
    let (method, target, version) = (parts.next()?, parts.next()?, parts.next()?);
    (method == "GET" && version.starts_with("HTTP/1.") && target.starts_with('/')).then_some(target)
}

async fn respond(stream: &mut TcpStream, status: &str, text: &str) -> std::io::Result<()> {
    let body = format!(
        "<!doctype html><meta charset=utf-8><title>tether</title><p>{}</p>\n",
        html_escape(text)
    );
    let response = format!(
        "HTTP/1.1 {status}\r\ncontent-type: text/html; charset=utf-8\r\ncontent-length: {}\r\ncache-control: no-store\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(response.as_bytes()).await?;
    stream.shutdown().await
}

fn html_escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn get(address: SocketAddr, target: &str) -> std::io::Result<String> {
        let mut stream = TcpStream::connect(address).await?;
        stream
            .write_all(format!("GET {target} HTTP/1.1\r\nhost: x\r\n\r\n").as_bytes())
            .await?;
        let mut answer = String::new();
        stream.read_to_string(&mut answer).await?;
        Ok(answer)
    }

    #[tokio::test]
    async fn takes_the_first_callback_answers_the_browser_and_closes() {
        let listener = CallbackListener::bind(0).await.unwrap();
        let address = listener.address;
        assert!(address.ip().is_loopback());
        assert_eq!(
            listener.redirect_uri(),
            format!("http://127.0.0.1:{}/callback", address.port())
        );
        let waiting =
            tokio::spawn(listener.wait(Duration::from_secs(10), |query| Ok(query.to_vec())));
        let favicon = get(address, "/favicon.ico").await.unwrap();
        assert!(favicon.starts_with("HTTP/1.1 404"), "{favicon}");
        let page = get(address, "/callback?code=abc&state=s%20t")
            .await
            .unwrap();
        assert!(page.starts_with("HTTP/1.1 200"), "{page}");
        assert!(page.contains("Signed in"), "{page}");
        let query = waiting.await.unwrap().unwrap();
        assert_eq!(
            query,
            [
                ("code".to_owned(), "abc".to_owned()),
                ("state".to_owned(), "s t".to_owned())
            ]
        );
        // Closed: a second callback finds nothing listening.
        assert!(get(address, "/callback?code=again").await.is_err());
    }

    #[tokio::test]
    async fn a_refused_callback_is_shown_to_the_browser_and_returned() {
        let listener = CallbackListener::bind(0).await.unwrap();
        let address = listener.address;
        let waiting = tokio::spawn(listener.wait(Duration::from_secs(10), |_| {
            Err::<(), _>(AuthError::StateMismatch)
        }));
        let page = get(address, "/callback?code=x&state=<b>").await.unwrap();
        assert!(page.starts_with("HTTP/1.1 400"), "{page}");
        assert!(page.contains("state does not match"), "{page}");
        assert!(matches!(
            waiting.await.unwrap(),
            Err(AuthError::StateMismatch)
        ));
    }

    #[tokio::test(start_paused = true)]
    async fn nobody_signing_in_times_out() {
        let listener = CallbackListener::bind(0).await.unwrap();
        let outcome = listener.wait(Duration::from_secs(300), |_| Ok(())).await;
        assert!(matches!(
            outcome,
            Err(AuthError::CallbackTimeout { seconds: 300 })
        ));
    }
}
