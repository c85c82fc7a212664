//! Multi round-trip requests (SEP-2322): how a handler's questions to the client travel in the
//! 2026-07-28 era, where the server never sends a request of its own.
//!
//! A handler asks through its [`RequestContext`](super::context::RequestContext) exactly as in
//! a legacy session (`ask`, `ask_all`, `request`). In the modern era each question is looked up
//! in the request's [`InputRounds`]: answered (the client sent `inputResponses` for its key, or
//! an earlier round's answer came back inside `requestState`) it returns at once; unanswered it
//! is recorded, and the request ends with an `input_required` result listing every question of
//! this run and a sealed `requestState`. The client retries with the answers; the handler runs
//! again from the start and its questions now return, so a handler must be safe to re-run up
//! to its questions (docs/ARCHITECTURE.md says so for handler authors).
//!
//! `requestState` is the answers so far, the principal, a digest of the request and an expiry,
//! sealed with ChaCha20-Poly1305 under the store's sealing key
//! ([`SessionStore::sealing_key`](crate::store::SessionStore::sealing_key)): every node of a
//! shared store and the same node after a restart open it; a client can neither read it nor
//! change it, and a state sealed for another principal, another request or past its expiry is
//! refused. This module owns the rounds and the seal; validating the envelope is
//! `tether_proto::modern`'s and running the handler is dispatch's.

use std::sync::Mutex;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use ring::aead::{self, Aad, LessSafeKey, Nonce, UnboundKey};
use ring::rand::{SecureRandom as _, SystemRandom};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};
use tether_proto::jsonrpc::ErrorObject;
use tether_proto::modern::RESULT_INPUT_REQUIRED;
use tokio_util::sync::CancellationToken;

use crate::lock;
use crate::store::StoreError;
use crate::store::tasks::TaskChange;
use tether_proto::ids::TaskId;

/// `params` field: the client's answers, keyed like the questions.
pub(crate) const INPUT_RESPONSES: &str = "inputResponses";
/// `params` field: the sealed state of the previous round, echoed.
pub(crate) const REQUEST_STATE: &str = "requestState";

/// Version of the sealed layout; a state of another version is refused like a tampered one.
const STATE_VERSION: u8 = 1;
/// Longest `requestState` accepted: far above what answers to a few questions take, far below
/// the body limit, so that opening one is never a large allocation.
const MAX_STATE_LEN: usize = 256 * 1024;

/// The capability a client must declare before the server may ask it `method`, if any.
pub(crate) fn capability_for(method: &str) -> Option<&'static str> {
    match method {
        "elicitation/create" => Some("elicitation"),
        "sampling/createMessage" => Some("sampling"),
        "roots/list" => Some("roots"),
        _ => None,
    }
}

/// Whether `answer` has the shape of an answer to `method` (an `ElicitResult`,
/// `CreateMessageResult` or `ListRootsResult`); other methods' answers only need to be
/// objects.
fn answer_fits(method: &str, answer: &Value) -> bool {
    let Some(object) = answer.as_object() else {
        return false;
    };
    match method {
        "elicitation/create" => object.get("action").is_some_and(Value::is_string),
        "sampling/createMessage" => object.contains_key("content") && object.contains_key("role"),
        "roots/list" => object.get("roots").is_some_and(Value::is_array),
        _ => true,
    }
}

/// What asking a question came to.
#[derive(Debug)]
pub(crate) enum Asked {
    /// The client's answer.
    Answered(Value),
    /// Not answered yet: recorded for the `input_required` result.
    Pending,
}

/// Why a question could not be asked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum AskError {
    /// The request did not declare this capability.
    MissingCapability(&'static str),
    /// The answer under this key does not answer the question.
    InvalidAnswer(String),
}

/// One modern request's questions and answers.
#[derive(Debug)]
pub(crate) struct InputRounds {
    /// Every answer the client has given this request: the sealed ones and this round's.
    answers: Map<String, Value>,
    capabilities: Map<String, Value>,
    state: Mutex<RoundState>,
    /// Cancelled once the run has to end: a question is unanswered, or an answer is invalid.
    interrupted: CancellationToken,
}

#[derive(Debug, Default)]
struct RoundState {
    /// The unanswered questions of this run, by key (`{method, params}`).
    pending: Map<String, Value>,
    /// The keys whose answers this run used, which the next round's state keeps.
    used: Vec<String>,
    /// A question answered with something that is not an answer.
    invalid: Option<String>,
    /// Generated keys handed out so far ([`InputRounds::next_key`]).
    generated: usize,
}

/// How a run ended early, for dispatch to answer.
#[derive(Debug)]
pub(crate) enum Interrupt {
    /// Questions are unanswered: the `input_required` result, less its `requestState`.
    InputRequired {
        /// `inputRequests`.
        questions: Map<String, Value>,
        /// The answers the next round must keep.
        answers: Map<String, Value>,
    },
    /// An answer did not fit its question: -32602.
    InvalidAnswer(String),
}

impl InputRounds {
    pub(crate) fn new(answers: Map<String, Value>, capabilities: Map<String, Value>) -> Self {
        Self {
            answers,
            capabilities,
            state: Mutex::new(RoundState::default()),
            interrupted: CancellationToken::new(),
        }
    }

    /// Whether the request declared `capability`.
    pub(crate) fn declares(&self, capability: &str) -> bool {
        self.capabilities
            .get(capability)
            .is_some_and(|value| !value.is_null() && value != &Value::Bool(false))
    }

    /// The answer the request brought for `key` (in `inputResponses` or its `requestState`).
    pub(crate) fn answered(&self, key: &str) -> Option<Value> {
        self.answers.get(key).cloned()
    }

    /// A key for a question asked without one: the same for the same question of every run,
    /// since a re-run asks its questions in the same order.
    pub(crate) fn next_key(&self, method: &str) -> String {
        let mut state = lock(&self.state);
        state.generated += 1;
        format!("{method}#{}", state.generated)
    }

    /// Asks `method` under `key`.
    pub(crate) fn ask(&self, key: &str, method: &str, params: &Value) -> Result<Asked, AskError> {
        if let Some(capability) = capability_for(method)
            && !self.declares(capability)
        {
            return Err(AskError::MissingCapability(capability));
        }
        let mut state = lock(&self.state);
        if let Some(answer) = self.answers.get(key) {
            if !answer_fits(method, answer) {
                state.invalid = Some(key.to_owned());
                self.interrupted.cancel();
                return Err(AskError::InvalidAnswer(key.to_owned()));
            }
            state.used.push(key.to_owned());
            return Ok(Asked::Answered(answer.clone()));
        }
        let mut question = Map::new();
        question.insert("method".into(), Value::from(method));
        if !params.is_null() {
            question.insert("params".into(), params.clone());
        }
        state
            .pending
            .insert(key.to_owned(), Value::Object(question));
        Ok(Asked::Pending)
    }

    /// Ends the run: called after the questions of one `ask_all` are recorded, so that
    /// questions asked together go out together.
    pub(crate) fn interrupt(&self) {
        self.interrupted.cancel();
    }

    /// Completes when the run has to end.
    pub(crate) async fn interrupted(&self) {
        self.interrupted.cancelled().await;
    }

    /// How the run ended early (after [`interrupted`](Self::interrupted) completed).
    pub(crate) fn interrupt_outcome(&self) -> Interrupt {
        let state = lock(&self.state);
        if let Some(key) = &state.invalid {
            return Interrupt::InvalidAnswer(key.clone());
        }
        let answers = state
            .used
            .iter()
            .filter_map(|key| Some((key.clone(), self.answers.get(key)?.clone())))
            .collect();
        Interrupt::InputRequired {
            questions: state.pending.clone(),
            answers,
        }
    }
}

/// The task a running handler belongs to: its questions go through the store.
pub(crate) struct TaskLink {
    pub(crate) tasks: std::sync::Arc<dyn crate::store::TaskStore>,
    pub(crate) id: TaskId,
}

impl std::fmt::Debug for TaskLink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TaskLink")
            .field("id", &self.id)
            .finish_non_exhaustive()
    }
}

impl TaskLink {
    /// Asks `questions` (`(key, {method, params})`) and waits for every answer, or for
    /// `cancel`: the task is `input_required` meanwhile.
    pub(crate) async fn ask(
        &self,
        questions: Vec<(String, Value)>,
        cancel: &CancellationToken,
    ) -> Result<Vec<Value>, StoreError> {
        let keys: Vec<String> = questions.iter().map(|(key, _)| key.clone()).collect();
        let ask: Map<String, Value> = questions.into_iter().collect();
        let mut record = self
            .tasks
            .change(&self.id, TaskChange::ask(ask))
            .await?
            .ok_or(StoreError::UnknownStream)?;
        loop {
            if keys
                .iter()
                .all(|key| record.input_responses.contains_key(key))
            {
                let answers = keys
                    .iter()
                    .map(|key| record.input_responses[key].clone())
                    .collect();
                self.tasks.change(&self.id, TaskChange::take(keys)).await?;
                return Ok(answers);
            }
            if record.status.is_terminal() {
                return Err(StoreError::Completed);
            }
            tokio::select! {
                () = cancel.cancelled() => return Err(StoreError::Completed),
                waited = self.tasks.wait_for_change(&self.id, record.version) => waited?,
            }
            record = match self.tasks.get(&self.id, &record.principal).await? {
                Some(record) => record,
                None => return Err(StoreError::UnknownStream),
            };
        }
    }
}

/// What a request's `inputResponses` and `requestState` came to, before the handler runs.
#[derive(Debug)]
pub(crate) struct Answers {
    /// Every answer, the sealed ones first, this round's over them.
    pub(crate) answers: Map<String, Value>,
}

/// Why a request's answers were refused before it ran: -32602 either way.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum AnswersRefusal {
    /// `inputResponses` is not an object of objects.
    #[error("inputResponses must be an object whose values are objects")]
    MalformedResponses,
    /// `requestState` is not one this server sealed for this principal and request, or it
    /// expired.
    #[error("requestState integrity check failed")]
    BadState,
}

impl AnswersRefusal {
    pub(crate) fn error_object(&self) -> ErrorObject {
        ErrorObject::invalid_params(self.to_string())
    }
}

/// The sealed part of `requestState`.
#[derive(Debug, Serialize, Deserialize)]
struct SealedState {
    v: u8,
    /// Expiry, milliseconds since the Unix epoch.
    exp: u64,
    /// The principal it was sealed for.
    p: String,
    /// The request it was sealed for ([`request_digest`]).
    r: String,
    /// The answers so far.
    a: Map<String, Value>,
}

/// Seals and opens `requestState` (see the module docs).
pub(crate) struct Sealer {
    key: LessSafeKey,
    random: SystemRandom,
    ttl: Duration,
}

impl std::fmt::Debug for Sealer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sealer")
            .field("ttl", &self.ttl)
            .finish_non_exhaustive()
    }
}

impl Sealer {
    /// A sealer with the store's `key`; states live for `ttl`.
    pub(crate) fn new(key: &[u8; 32], ttl: Duration) -> Self {
        let key = UnboundKey::new(&aead::CHACHA20_POLY1305, key)
            .expect("a 32-byte key fits ChaCha20-Poly1305");
        Self {
            key: LessSafeKey::new(key),
            random: SystemRandom::new(),
            ttl,
        }
    }

    /// The `input_required` result for `interrupt`'s questions, with the state sealed for
    /// `principal` and the request digested as `digest`.
    pub(crate) fn input_required(
        &self,
        questions: Map<String, Value>,
        answers: Map<String, Value>,
        principal: &str,
        digest: &str,
    ) -> Value {
        let state = SealedState {
            v: STATE_VERSION,
            exp: unix_ms(SystemTime::now() + self.ttl),
            p: principal.to_owned(),
            r: digest.to_owned(),
            a: answers,
        };
        json!({
            "resultType": RESULT_INPUT_REQUIRED,
            "inputRequests": questions,
            "requestState": self.seal(&state),
        })
    }

    fn seal(&self, state: &SealedState) -> String {
        let mut nonce = [0u8; aead::NONCE_LEN];
        self.random
            .fill(&mut nonce)
            .expect("the operating system's CSPRNG is available");
        let mut sealed = serde_json::to_vec(state).expect("a state serializes");
        self.key
            .seal_in_place_append_tag(
                Nonce::assume_unique_for_key(nonce),
                Aad::empty(),
                &mut sealed,
            )
            .expect("ChaCha20-Poly1305 seals any length we produce");
        let mut out = nonce.to_vec();
        out.extend_from_slice(&sealed);
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(out)
    }

    fn open(&self, token: &str, principal: &str, digest: &str) -> Result<SealedState, ()> {
        if token.len() > MAX_STATE_LEN {
            return Err(());
        }
        let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(token)
            .map_err(|_| ())?;
        if bytes.len() < aead::NONCE_LEN {
            return Err(());
        }
        let (nonce, sealed) = bytes.split_at(aead::NONCE_LEN);
        let nonce = Nonce::try_assume_unique_for_key(nonce).map_err(|_| ())?;
        let mut sealed = sealed.to_vec();
        let plain = self
            .key
            .open_in_place(nonce, Aad::empty(), &mut sealed)
            .map_err(|_| ())?;
        let state: SealedState = serde_json::from_slice(plain).map_err(|_| ())?;
        let fresh = state.exp > unix_ms(SystemTime::now());
        if state.v != STATE_VERSION || !fresh || state.p != principal || state.r != digest {
            return Err(());
        }
        Ok(state)
    }

    /// The answers a request brings: those sealed in its `requestState` (which must be
    /// intact, unexpired and this principal's for this request), then its `inputResponses`.
    pub(crate) fn answers(
        &self,
        params: Option<&Value>,
        principal: &str,
        digest: &str,
    ) -> Result<Answers, AnswersRefusal> {
        let mut answers = Map::new();
        match params.and_then(|p| p.get(REQUEST_STATE)) {
            None => {}
            Some(Value::String(token)) => {
                let state = self
                    .open(token, principal, digest)
                    .map_err(|()| AnswersRefusal::BadState)?;
                answers = state.a;
            }
            Some(_) => return Err(AnswersRefusal::BadState),
        }
        match params.and_then(|p| p.get(INPUT_RESPONSES)) {
            None => {}
            Some(Value::Object(responses)) => {
                if !responses.values().all(Value::is_object) {
                    return Err(AnswersRefusal::MalformedResponses);
                }
                answers.extend(responses.clone());
            }
            Some(_) => return Err(AnswersRefusal::MalformedResponses),
        }
        Ok(Answers { answers })
    }
}

/// Milliseconds since the Unix epoch.
fn unix_ms(time: SystemTime) -> u64 {
    time.duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// The identity of a request across its rounds: its method and its params without `_meta`,
/// `inputResponses` and `requestState` (which change between rounds) and without top-level
/// nulls (`"arguments": null` is no arguments), keys sorted, hashed with SHA-256. A state
/// sealed for one tool call cannot be replayed into another.
pub(crate) fn request_digest(method: &str, params: Option<&Value>) -> String {
    let mut canonical = Vec::new();
    canonical.extend_from_slice(method.as_bytes());
    canonical.push(0);
    if let Some(Value::Object(params)) = params {
        let mut salient = params.clone();
        for field in ["_meta", INPUT_RESPONSES, REQUEST_STATE] {
            salient.remove(field);
        }
        salient.retain(|_, value| !value.is_null());
        write_canonical(&mut canonical, &Value::Object(salient));
    }
    let digest = ring::digest::digest(&ring::digest::SHA256, &canonical);
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(digest.as_ref())
}

/// `value` as JSON with every object's keys in sorted order: the same bytes however the
/// client ordered them.
fn write_canonical(out: &mut Vec<u8>, value: &Value) {
    match value {
        Value::Object(object) => {
            let mut keys: Vec<&String> = object.keys().collect();
            keys.sort();
            out.push(b'{');
            for (i, key) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                serde_json::to_writer(&mut *out, key).expect("a string serializes");
                out.push(b':');
                write_canonical(out, &object[key]);
            }
            out.push(b'}');
        }
        Value::Array(items) => {
            out.push(b'[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_canonical(out, item);
            }
            out.push(b']');
        }
        other => serde_json::to_writer(&mut *out, other).expect("a JSON value serializes"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sealer() -> Sealer {
        Sealer::new(&[7; 32], Duration::from_secs(60))
    }

    fn state_of(result: &Value) -> String {
        result["requestState"].as_str().unwrap().to_owned()
    }

    #[test]
    fn a_sealed_state_opens_only_for_its_principal_and_request_unaltered() {
        let sealer = sealer();
        let digest = request_digest("tools/call", Some(&json!({"name": "t"})));
        let mut answers = Map::new();
        answers.insert("k".into(), json!({"action": "accept"}));
        let result = sealer.input_required(Map::new(), answers.clone(), "alice", &digest);
        let token = state_of(&result);
        let params = json!({"name": "t", "requestState": token});
        let opened = sealer.answers(Some(&params), "alice", &digest).unwrap();
        assert_eq!(opened.answers, answers);

        assert_eq!(
            sealer.answers(Some(&params), "bob", &digest).unwrap_err(),
            AnswersRefusal::BadState,
            "another principal's state"
        );
        let other = request_digest("tools/call", Some(&json!({"name": "u"})));
        assert!(sealer.answers(Some(&params), "alice", &other).is_err());
        let tampered = json!({"requestState": format!("{token}-TAMPERED")});
        assert!(sealer.answers(Some(&tampered), "alice", &digest).is_err());
        let mut flipped = token.into_bytes();
        flipped[20] = if flipped[20] == b'A' { b'B' } else { b'A' };
        let flipped = json!({"requestState": String::from_utf8(flipped).unwrap()});
        assert!(sealer.answers(Some(&flipped), "alice", &digest).is_err());
        let another_key = Sealer::new(&[8; 32], Duration::from_secs(60));
        assert!(
            another_key
                .answers(Some(&params), "alice", &digest)
                .is_err()
        );
    }

    #[test]
    fn an_expired_state_is_refused() {
        let sealer = Sealer::new(&[7; 32], Duration::ZERO);
        let result = sealer.input_required(Map::new(), Map::new(), "alice", "d");
        let params = json!({"requestState": state_of(&result)});
        assert_eq!(
            sealer.answers(Some(&params), "alice", "d").unwrap_err(),
            AnswersRefusal::BadState
        );
    }

    #[test]
    fn every_seal_differs_so_rounds_can_be_told_apart() {
        let sealer = sealer();
        let a = sealer.input_required(Map::new(), Map::new(), "p", "d");
        let b = sealer.input_required(Map::new(), Map::new(), "p", "d");
        assert_ne!(state_of(&a), state_of(&b));
    }

    #[test]
    fn malformed_input_responses_are_refused() {
        let sealer = sealer();
        for responses in [
            json!(null),
            json!(3),
            json!({"k": 12345}),
            json!({"k": "x"}),
        ] {
            let params = json!({"inputResponses": responses});
            assert_eq!(
                sealer.answers(Some(&params), "p", "d").unwrap_err(),
                AnswersRefusal::MalformedResponses,
                "{responses}"
            );
        }
    }

    #[test]
    fn the_digest_ignores_key_order_and_the_round_fields() {
        let a = json!({"name": "t", "arguments": {"x": 1, "y": [1, {"b": 2, "a": 1}]}});
        let b = json!({"arguments": {"y": [1, {"a": 1, "b": 2}], "x": 1}, "name": "t",
                       "_meta": {"k": 1}, "inputResponses": {}, "requestState": "s",
                       "cursor": null});
        assert_eq!(
            request_digest("tools/call", Some(&a)),
            request_digest("tools/call", Some(&b))
        );
        assert_ne!(
            request_digest("tools/call", Some(&a)),
            request_digest("prompts/get", Some(&a))
        );
    }

    #[test]
    fn questions_need_their_capability_and_answers_their_shape() {
        let mut caps = Map::new();
        caps.insert("sampling".into(), json!({}));
        let mut answers = Map::new();
        answers.insert("s".into(), json!({"role": "assistant", "content": {}}));
        answers.insert("bad".into(), json!({"role": "assistant"}));
        let rounds = InputRounds::new(answers, caps);
        assert_eq!(
            rounds
                .ask("e", "elicitation/create", &json!({}))
                .unwrap_err(),
            AskError::MissingCapability("elicitation")
        );
        assert!(matches!(
            rounds.ask("s", "sampling/createMessage", &json!({})),
            Ok(Asked::Answered(_))
        ));
        assert!(matches!(
            rounds.ask("t", "sampling/createMessage", &json!({"maxTokens": 1})),
            Ok(Asked::Pending)
        ));
        let Interrupt::InputRequired { questions, answers } = rounds.interrupt_outcome() else {
            panic!("questions pending");
        };
        assert_eq!(
            questions["t"],
            json!({"method": "sampling/createMessage", "params": {"maxTokens": 1}})
        );
        assert_eq!(answers.keys().collect::<Vec<_>>(), ["s"]);
        assert!(
            rounds
                .ask("bad", "sampling/createMessage", &json!({}))
                .is_err()
        );
        assert!(matches!(
            rounds.interrupt_outcome(),
            Interrupt::InvalidAnswer(key) if key == "bad"
        ));
    }
}
