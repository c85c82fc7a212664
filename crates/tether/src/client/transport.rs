//! The HTTP layer of the client: one `reqwest::Client`, the endpoint URL, the session (id,
//! negotiated version, generation) and the headers every request carries. It sends POST, GET
//! and DELETE and hands back raw responses; it does not decode SSE, reconnect, or decide what
//! a status means beyond 401 (ask the auth hook again, once).
//!
//! Headers: every POST carries `Accept: application/json, text/event-stream` and
//! `Content-Type: application/json` (T19, T20); every request carries `Mcp-Session-Id` once
//! the server gave one and `MCP-Protocol-Version` once a version was negotiated, GET and
//! DELETE included (T86); `initialize` carries no version header (docs/PROTOCOL.md#open-9).

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use reqwest::header::{ACCEPT, AUTHORIZATION, CONTENT_TYPE, HeaderMap, HeaderValue};
use reqwest::{RequestBuilder, Response};
use tether_proto::headers::{
    self, CLIENT_GET_ACCEPT, CLIENT_POST_ACCEPT, client_last_event_id, spelled,
};
use tether_proto::version::ProtocolVersion;

use super::auth::{AuthProvider, AuthRefusal, MAX_AUTH_RETRIES};
use super::config::MAX_ERROR_BODY;
use super::error::{AuthError, Error};
use crate::telemetry;

/// The session as the transport knows it.
#[derive(Debug, Clone, Default)]
pub(crate) struct Session {
    /// `Mcp-Session-Id`, if the server issued one.
    pub(crate) id: Option<String>,
    /// The negotiated version, once initialized.
    pub(crate) version: Option<ProtocolVersion>,
    /// Bumped whenever the session is replaced, so that concurrent discoveries of one expiry
    /// re-initialize once.
    pub(crate) generation: u64,
    /// Whether `initialize` completed for this generation.
    pub(crate) initialized: bool,
    /// The server answers a request sent again (same id, same content) with the stream
    /// already answering it, from its start, instead of running it twice: a tether server (it
    /// names its node in `Tether-Node`) that answered `initialize` with an event stream, as it
    /// answers every request. Only then is a request whose POST was lost before any event id
    /// sent again.
    pub(crate) reattaches: bool,
}

/// A non-success answer, read in full (bounded) so that the caller can classify it.
#[derive(Debug)]
pub(crate) struct Failed {
    pub(crate) status: u16,
    pub(crate) retry_after: Option<Duration>,
    pub(crate) body: String,
}

impl Failed {
    pub(crate) async fn read(response: Response) -> Self {
        let status = response.status().as_u16();
        let retry_after = response
            .headers()
            .get(reqwest::header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(tether_proto::backoff::parse_retry_after);
        let body = match response.bytes().await {
            Ok(bytes) => {
                let end = bytes.len().min(MAX_ERROR_BODY);
                String::from_utf8_lossy(&bytes[..end]).into_owned()
            }
            Err(_) => String::new(),
        };
        Self {
            status,
            retry_after,
            body,
        }
    }

    /// The JSON-RPC error object in the body, if any.
    pub(crate) fn rpc_error(&self) -> Option<serde_json::Value> {
        let value: serde_json::Value = serde_json::from_str(&self.body).ok()?;
        value.get("error").cloned()
    }

    /// docs/CONTRACTS.md#last-event-id-row: 400 with -32000 and `data.reason` for an unusable
    /// `Last-Event-ID`.
    pub(crate) fn events_unavailable_reason(&self) -> Option<String> {
        let error = self.rpc_error()?;
        (self.status == 400 && error.get("code")?.as_i64()? == -32000)
            .then(|| {
                error
                    .get("data")?
                    .get("reason")?
                    .as_str()
                    .map(str::to_owned)
            })
            .flatten()
    }

    pub(crate) fn into_error(self) -> Error {
        if let Some(reason) = self.events_unavailable_reason() {
            return Error::EventsUnavailable { reason };
        }
        match self.status {
            401 => Error::Unauthorized,
            404 => Error::SessionExpired,
            status => Error::Status {
                status,
                body: self.body,
            },
        }
    }
}

/// The HTTP side of one client.
pub(crate) struct Transport {
    http: reqwest::Client,
    url: reqwest::Url,
    headers: HeaderMap,
    auth: Option<Arc<dyn AuthProvider>>,
    session: Mutex<Session>,
    request_timeout: Duration,
}

impl Transport {
    pub(crate) fn new(
        http: reqwest::Client,
        url: reqwest::Url,
        headers: HeaderMap,
        auth: Option<Arc<dyn AuthProvider>>,
        request_timeout: Duration,
    ) -> Self {
        Self {
            http,
            url,
            headers,
            auth,
            session: Mutex::new(Session::default()),
            request_timeout,
        }
    }

    pub(crate) fn url(&self) -> &reqwest::Url {
        &self.url
    }

    pub(crate) fn request_timeout(&self) -> Duration {
        self.request_timeout
    }

    pub(crate) fn session(&self) -> Session {
        self.session
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    pub(crate) fn update_session(&self, f: impl FnOnce(&mut Session)) {
        f(&mut self.session.lock().unwrap_or_else(PoisonError::into_inner));
    }

    /// Sends a request built by `build` for the current session, with the bearer token; when
    /// the server refuses the credentials (401, or 403 `insufficient_scope`) hands the refusal
    /// to the auth hook and, if it gives another token, sends the request again, at most
    /// [`MAX_AUTH_RETRIES`] times. Waits for the response head at most the request timeout.
    /// Returns the response whatever its status, with the session it was sent for.
    async fn send(
        &self,
        build: impl Fn(&Session) -> RequestBuilder,
    ) -> Result<(Response, Session), Error> {
        let mut token = match &self.auth {
            Some(auth) => auth.token().await.map_err(auth_failure)?,
            None => None,
        };
        let mut attempt = 0;
        loop {
            let session = self.session();
            let mut request = build(&session).headers(self.headers.clone());
            if let Some(id) = &session.id {
                request = request.header(spelled::MCP_SESSION_ID, id);
            }
            if let Some(version) = session.version {
                request = request.header(spelled::MCP_PROTOCOL_VERSION, version.as_str());
            }
            if let Some(token) = &token {
                request = request.header(AUTHORIZATION, format!("Bearer {token}"));
            }
            // The span this is sent for (a request's, whose driver resumes it) continues on
            // the server: a resume's span joins the caller's trace.
            for (name, value) in telemetry::context_headers(&tracing::Span::current()) {
                request = request.header(name, value);
            }
            let response = tokio::time::timeout(self.request_timeout, request.send())
                .await
                .map_err(|_| Error::Timeout)?
                .map_err(Error::network)?;
            let Some(auth) = &self.auth else {
                return Ok((response, session));
            };
            let Some(refusal) = refusal(&response, token.take(), attempt) else {
                return Ok((response, session));
            };
            if attempt >= MAX_AUTH_RETRIES {
                return Ok((response, session));
            }
            match auth.refused(&refusal).await.map_err(auth_failure)? {
                Some(fresh) => {
                    token = Some(fresh);
                    attempt += 1;
                }
                None => return Ok((response, session)),
            }
        }
    }

    /// POSTs one JSON-RPC message (T18). Before initialization completes the session has no
    /// version, so `initialize` carries no `MCP-Protocol-Version`.
    pub(crate) async fn post(&self, body: Vec<u8>) -> Result<(Response, Session), Error> {
        self.send(|_| {
            self.http
                .post(self.url.clone())
                .header(ACCEPT, CLIENT_POST_ACCEPT)
                .header(CONTENT_TYPE, headers::APPLICATION_JSON)
                .body(body.clone())
        })
        .await
    }

    /// POSTs one 2026-07-28 request: no session, `MCP-Protocol-Version: 2026-07-28` and the
    /// SEP-2243 headers `Mcp-Method` and (when the method names a target) `Mcp-Name`.
    pub(crate) async fn post_modern(
        &self,
        body: Vec<u8>,
        method: &str,
        name: Option<&str>,
        params: &[(String, String)],
    ) -> Result<Response, Error> {
        let version = ProtocolVersion::MODERN.as_str();
        let (response, _) = self
            .send(|_| {
                let mut request = self
                    .http
                    .post(self.url.clone())
                    .header(ACCEPT, CLIENT_POST_ACCEPT)
                    .header(CONTENT_TYPE, headers::APPLICATION_JSON)
                    .header(spelled::MCP_PROTOCOL_VERSION, version)
                    .header(tether_proto::modern::MCP_METHOD, method)
                    .body(body.clone());
                if let Some(name) = name {
                    request = request.header(tether_proto::modern::MCP_NAME, name);
                }
                for (header, value) in params {
                    request = request.header(header, value);
                }
                request
            })
            .await?;
        Ok(response)
    }

    /// GET the standalone stream, or resume a stream with `Last-Event-ID` (T80, T86, T87).
    pub(crate) async fn get(
        &self,
        last_event_id: Option<&str>,
    ) -> Result<(Response, Session), Error> {
        let last = last_event_id.and_then(client_last_event_id);
        self.send(|_| {
            let mut request = self
                .http
                .get(self.url.clone())
                .header(ACCEPT, CLIENT_GET_ACCEPT);
            if let Some(last) = last {
                // Opaque ids go back exactly as received; non-ASCII as their UTF-8 bytes.
                if let Ok(value) = HeaderValue::from_bytes(last.as_bytes()) {
                    request = request.header(spelled::LAST_EVENT_ID, value);
                }
            }
            request
        })
        .await
    }

    /// DELETE the session.
    pub(crate) async fn delete(&self) -> Result<(Response, Session), Error> {
        self.send(|_| self.http.delete(self.url.clone())).await
    }
}

/// The refusal in `response`, if it refuses the credentials: a 401, or a 403 whose Bearer
/// challenge says `insufficient_scope` (any other 403 is about something else).
fn refusal(response: &Response, token: Option<String>, attempt: u32) -> Option<AuthRefusal> {
    let status = response.status().as_u16();
    let www_authenticate: Vec<String> = response
        .headers()
        .get_all(reqwest::header::WWW_AUTHENTICATE)
        .iter()
        .filter_map(|value| value.to_str().ok().map(str::to_owned))
        .collect();
    let refused = match status {
        401 => true,
        403 => super::oauth::BearerChallenge::find(www_authenticate.iter().map(String::as_str))
            .is_some_and(|challenge| challenge.is_insufficient_scope()),
        _ => false,
    };
    refused.then_some(AuthRefusal {
        status,
        www_authenticate,
        token,
        attempt,
    })
}

/// An auth hook's failure as the client's error. An authorization server that cannot be
/// reached is a network failure: the request is retried within the reconnect budget, so a
/// refresh that meets a brief outage does not end a stream.
fn auth_failure(error: AuthError) -> Error {
    match error {
        error @ AuthError::Unreachable { .. } => Error::Network(Box::new(error)),
        error => Error::Auth(error),
    }
}
