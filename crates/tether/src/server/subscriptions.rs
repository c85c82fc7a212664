//! `subscriptions/listen` (2026-07-28): the long-lived POST stream that replaced the GET
//! stream, and the node's registry of open ones.
//!
//! A listen request names what it wants in `params.notifications` (`toolsListChanged`,
//! `promptsListChanged`, `resourcesListChanged`, `resourceSubscriptions`); the server agrees to
//! the part its capabilities cover and says so in the acknowledgement, the stream's first
//! message. A handler's [`notify_subscribers`](super::context::RequestContext::notify_subscribers)
//! reaches [`Subscriptions::publish`], which hands a copy to every open listener whose filter
//! admits it, without waiting (a listener that does not keep up loses messages, as a client
//! that is away would; nothing on a listen stream is replayed). Each listener's driver stores
//! its messages in its stream, tagged with its subscription id, before the writer sends them,
//! like every event; on the server's graceful shutdown it ends the stream with the completion
//! result, so the client can tell a close from a cut. The registry is this node's: on a shared
//! store, a change published on one node reaches the listeners of that node.
//!
//! `taskIds` (the tasks extension) asks for `notifications/tasks`, a full snapshot of each
//! named task whenever it changes. Those are not published: the listen endpoint keeps the ids
//! the principal owns, and watches each in the task store (so on any node, whoever runs the
//! task), handing the snapshots to [`drive`] through a channel of their own.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use serde_json::{Map, Value, json};
use tether_proto::ids::{StreamId, TaskId};
use tether_proto::jsonrpc::{ErrorObject, Message, Notification, RequestId, Response};
use tether_proto::modern::{
    META_SERVER_INFO, META_SUBSCRIPTION_ID, RESULT_COMPLETE, SUBSCRIPTIONS_ACKNOWLEDGED,
};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::session::SessionRuntime;
use crate::lock;

/// Messages a listener may fall behind by before it loses them.
const LISTENER_QUEUE: usize = 256;

/// What a listen stream carries.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Filter {
    tools: bool,
    prompts: bool,
    resources: bool,
    /// URIs whose `notifications/resources/updated` (and their sub-resources') are wanted.
    resource_uris: Vec<String>,
    /// Tasks whose `notifications/tasks` are wanted (well-formed ids; which of them the
    /// principal owns is the listen endpoint's to check).
    pub(crate) task_ids: Vec<TaskId>,
}

/// Most `taskIds` one listen request may name: each is a watch on the task store.
pub(crate) const MAX_LISTEN_TASKS: usize = 64;

/// Why a listen request's filter was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum FilterError {
    /// Missing, or a member of the wrong type: -32602.
    Invalid(String),
    /// `taskIds` without the tasks extension declared: -32021.
    TasksUndeclared,
}

impl FilterError {
    pub(crate) fn error_object(&self) -> ErrorObject {
        match self {
            Self::Invalid(what) => ErrorObject::invalid_params(format!("notifications{what}")),
            Self::TasksUndeclared => tether_proto::modern::tasks_extension_required(),
        }
    }
}

impl Filter {
    /// `params.notifications` of a listen request.
    ///
    /// # Errors
    ///
    /// [`FilterError`]: it is missing or a member has the wrong type, or it names `taskIds`
    /// without the tasks extension declared.
    pub(crate) fn parse(params: Option<&Value>, declares_tasks: bool) -> Result<Self, FilterError> {
        let invalid = |what: &str| FilterError::Invalid(what.to_owned());
        let object = params
            .and_then(|p| p.get("notifications"))
            .ok_or_else(|| invalid(" is required"))?
            .as_object()
            .ok_or_else(|| invalid(" must be an object"))?;
        let flag = |name: &str| match object.get(name) {
            None | Some(Value::Null) => Ok(false),
            Some(Value::Bool(value)) => Ok(*value),
            Some(_) => Err(invalid(&format!(".{name} must be a boolean"))),
        };
        let resource_uris = match object.get("resourceSubscriptions") {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Array(uris)) => uris
                .iter()
                .map(|uri| uri.as_str().map(str::to_owned))
                .collect::<Option<Vec<_>>>()
                .ok_or_else(|| invalid(".resourceSubscriptions must be an array of URIs"))?,
            Some(_) => return Err(invalid(".resourceSubscriptions must be an array of URIs")),
        };
        if object.contains_key("taskIds") && !declares_tasks {
            return Err(FilterError::TasksUndeclared);
        }
        let task_ids = match object.get("taskIds") {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Array(ids)) if ids.len() <= MAX_LISTEN_TASKS => {
                let ids = ids
                    .iter()
                    .map(|id| id.as_str())
                    .collect::<Option<Vec<_>>>()
                    .ok_or_else(|| invalid(".taskIds must be an array of task ids"))?;
                // An id that cannot be a task's names no task: not accepted, not an error
                // (the ack says which were).
                let mut parsed: Vec<TaskId> =
                    ids.iter().filter_map(|id| TaskId::parse(id).ok()).collect();
                parsed.dedup();
                parsed
            }
            Some(Value::Array(_)) => {
                return Err(invalid(&format!(
                    ".taskIds may name at most {MAX_LISTEN_TASKS} tasks"
                )));
            }
            Some(_) => return Err(invalid(".taskIds must be an array of task ids")),
        };
        Ok(Self {
            tools: flag("toolsListChanged")?,
            prompts: flag("promptsListChanged")?,
            resources: flag("resourcesListChanged")?,
            resource_uris,
            task_ids,
        })
    }

    /// The part of this filter that a server with `capabilities` honours.
    pub(crate) fn honoured(&self, capabilities: &Value) -> Self {
        let has = |path: [&str; 2]| {
            capabilities
                .get(path[0])
                .and_then(|c| c.get(path[1]))
                .and_then(Value::as_bool)
                .unwrap_or(false)
        };
        Self {
            tools: self.tools && has(["tools", "listChanged"]),
            prompts: self.prompts && has(["prompts", "listChanged"]),
            resources: self.resources && has(["resources", "listChanged"]),
            resource_uris: if has(["resources", "subscribe"]) {
                self.resource_uris.clone()
            } else {
                Vec::new()
            },
            task_ids: self.task_ids.clone(),
        }
    }

    /// The filter as the acknowledgement states it.
    pub(crate) fn to_json(&self) -> Value {
        let mut out = Map::new();
        for (name, on) in [
            ("toolsListChanged", self.tools),
            ("promptsListChanged", self.prompts),
            ("resourcesListChanged", self.resources),
        ] {
            if on {
                out.insert(name.into(), Value::Bool(true));
            }
        }
        if !self.resource_uris.is_empty() {
            out.insert("resourceSubscriptions".into(), json!(self.resource_uris));
        }
        if !self.task_ids.is_empty() {
            out.insert("taskIds".into(), json!(self.task_ids));
        }
        Value::Object(out)
    }

    /// Whether a notification `method` with `params` belongs on a stream with this filter.
    fn admits(&self, method: &str, params: &Value) -> bool {
        match method {
            "notifications/tools/list_changed" => self.tools,
            "notifications/prompts/list_changed" => self.prompts,
            "notifications/resources/list_changed" => self.resources,
            "notifications/resources/updated" => params
                .get("uri")
                .and_then(Value::as_str)
                .is_some_and(|uri| {
                    self.resource_uris
                        .iter()
                        .any(|subscribed| is_within(uri, subscribed))
                }),
            _ => false,
        }
    }
}

/// Whether `uri` is `subscribed` or a sub-resource of it.
fn is_within(uri: &str, subscribed: &str) -> bool {
    uri.strip_prefix(subscribed)
        .is_some_and(|rest| rest.is_empty() || subscribed.ends_with('/') || rest.starts_with('/'))
}

/// The listen streams open on this node.
#[derive(Debug, Default)]
pub(crate) struct Subscriptions {
    listeners: std::sync::Mutex<HashMap<u64, Listener>>,
    next: AtomicU64,
}

#[derive(Debug)]
struct Listener {
    filter: Filter,
    tx: mpsc::Sender<Vec<u8>>,
}

/// Removes its listener from the registry when dropped.
pub(crate) struct Registration {
    subscriptions: Arc<Subscriptions>,
    key: u64,
}

impl Drop for Registration {
    fn drop(&mut self) {
        lock(&self.subscriptions.listeners).remove(&self.key);
    }
}

impl Subscriptions {
    /// Hands `method` with `params` to every listener whose filter admits it, tagged with
    /// each one's subscription id; never waits.
    pub(crate) fn publish(&self, method: &str, params: &Value) {
        let listeners = lock(&self.listeners);
        for listener in listeners.values() {
            if !listener.filter.admits(method, params) {
                continue;
            }
            let message = Notification::new(method, Some(params.clone()));
            if listener
                .tx
                .try_send(Message::Notification(message).to_vec())
                .is_err()
            {
                tracing::debug!(method, "listener behind or gone: notification dropped");
            }
        }
    }

    fn register(self: &Arc<Self>, filter: Filter) -> (Registration, mpsc::Receiver<Vec<u8>>) {
        let (tx, rx) = mpsc::channel(LISTENER_QUEUE);
        let key = self.next.fetch_add(1, Ordering::Relaxed);
        lock(&self.listeners).insert(key, Listener { filter, tx });
        (
            Registration {
                subscriptions: Arc::clone(self),
                key,
            },
            rx,
        )
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        lock(&self.listeners).len()
    }
}

/// `message` (a serialized notification) with `_meta[subscriptionId]` = `id` in its params.
fn tagged(message: &[u8], id: &RequestId) -> Option<Vec<u8>> {
    let mut value: Value = serde_json::from_slice(message).ok()?;
    let params = value
        .as_object_mut()?
        .entry("params")
        .or_insert_with(|| Value::Object(Map::new()));
    let meta = params
        .as_object_mut()?
        .entry("_meta")
        .or_insert_with(|| Value::Object(Map::new()));
    meta.as_object_mut()?
        .insert(META_SUBSCRIPTION_ID.into(), json!(id));
    serde_json::to_vec(&value).ok()
}

/// Serves one listen stream: stores the acknowledgement, then every admitted notification and
/// every task snapshot `tasks` yields, until the client goes away (the runtime closes with
/// its connection) or the server shuts down, when it stores the completion result and
/// completes the stream. `done` is cancelled once nothing more will be stored.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn drive(
    subscriptions: Arc<Subscriptions>,
    runtime: Arc<SessionRuntime>,
    stream: StreamId,
    id: RequestId,
    filter: Filter,
    server_info: Value,
    mut tasks: mpsc::Receiver<Vec<u8>>,
    shutdown: CancellationToken,
    done: CancellationToken,
) {
    let _done = done.drop_guard();
    let (_registration, mut rx) = subscriptions.register(filter.clone());
    let ack = json!({
        "jsonrpc": "2.0",
        "method": SUBSCRIPTIONS_ACKNOWLEDGED,
        "params": {"notifications": filter.to_json()},
    });
    let ack = tagged(&serde_json::to_vec(&ack).expect("JSON"), &id).expect("a notification");
    if runtime.append_bytes(stream, &ack).await.is_err() {
        return;
    }
    loop {
        tokio::select! {
            () = runtime.closed().cancelled() => return,
            () = shutdown.cancelled() => break,
            message = rx.recv() => {
                let Some(message) = message else { return };
                let Some(message) = tagged(&message, &id) else { continue };
                if let Err(error) = runtime.append_bytes(stream, &message).await {
                    tracing::debug!(error = %crate::error_chain(&error), "listen stream cannot continue");
                    return;
                }
            }
            Some(message) = tasks.recv() => {
                let Some(message) = tagged(&message, &id) else { continue };
                if let Err(error) = runtime.append_bytes(stream, &message).await {
                    tracing::debug!(error = %crate::error_chain(&error), "listen stream cannot continue");
                    return;
                }
            }
        }
    }
    let result = json!({
        "resultType": RESULT_COMPLETE,
        "_meta": {META_SUBSCRIPTION_ID: id, META_SERVER_INFO: server_info},
    });
    let response = Response::success(id, result);
    if runtime
        .append(stream, &Message::Response(response))
        .await
        .is_ok()
    {
        let _ = runtime.events().complete(stream).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn filter(notifications: Value) -> Result<Filter, Box<ErrorObject>> {
        Filter::parse(Some(&json!({"notifications": notifications})), false)
            .map_err(|error| Box::new(error.error_object()))
    }

    #[test]
    fn filters_parse_and_bad_ones_are_invalid_params() {
        let parsed =
            filter(json!({"toolsListChanged": true, "resourceSubscriptions": ["a://x"]})).unwrap();
        assert!(parsed.tools && !parsed.prompts);
        assert_eq!(parsed.resource_uris, ["a://x"]);
        for bad in [
            json!("all"),
            json!({"toolsListChanged": "yes"}),
            json!({"resourceSubscriptions": "a://x"}),
            json!({"resourceSubscriptions": [1]}),
        ] {
            assert_eq!(filter(bad.clone()).unwrap_err().code, -32602, "{bad}");
        }
        assert_eq!(
            Filter::parse(Some(&json!({})), false)
                .unwrap_err()
                .error_object()
                .code,
            -32602
        );
        let ids = Filter::parse(
            Some(&json!({"notifications": {"taskIds": ["not-a-task", TaskId::generate()]}})),
            true,
        )
        .unwrap();
        assert_eq!(ids.task_ids.len(), 1, "an impossible id names no task");
        for bad in [
            json!({"taskIds": "t"}),
            json!({"taskIds": [1]}),
            json!({"taskIds": vec!["t"; MAX_LISTEN_TASKS + 1]}),
        ] {
            let refused = Filter::parse(Some(&json!({"notifications": bad})), true).unwrap_err();
            assert_eq!(refused.error_object().code, -32602);
        }
        let tasks = filter(json!({"taskIds": ["t"]})).unwrap_err();
        assert_eq!(tasks.code, -32021);
        assert_eq!(
            tasks.data.unwrap()["requiredCapabilities"]["extensions"]
                [tether_proto::modern::TASKS_EXTENSION],
            json!({})
        );
    }

    #[test]
    fn the_server_honours_what_its_capabilities_cover() {
        let wanted = filter(json!({"toolsListChanged": true, "promptsListChanged": true,
            "resourceSubscriptions": ["a://x"]}))
        .unwrap();
        let honoured = wanted.honoured(&json!({"tools": {"listChanged": true}, "prompts": {}}));
        assert_eq!(honoured.to_json(), json!({"toolsListChanged": true}));
    }

    #[test]
    fn resource_updates_match_the_uri_and_its_sub_resources() {
        let f = filter(json!({"resourceSubscriptions": ["file:///p"]})).unwrap();
        let updated = |uri: &str| f.admits("notifications/resources/updated", &json!({"uri": uri}));
        assert!(updated("file:///p"));
        assert!(updated("file:///p/a.txt"));
        assert!(!updated("file:///pa"));
        assert!(!f.admits("notifications/tools/list_changed", &json!({})));
    }

    #[tokio::test]
    async fn publishing_reaches_admitting_listeners_without_waiting() {
        let subscriptions = Arc::new(Subscriptions::default());
        let (tools, mut tools_rx) =
            subscriptions.register(filter(json!({"toolsListChanged": true})).unwrap());
        let (_prompts, mut prompts_rx) =
            subscriptions.register(filter(json!({"promptsListChanged": true})).unwrap());
        // Far more than a queue holds: publishing never blocks on a listener nobody reads.
        for _ in 0..(LISTENER_QUEUE * 4) {
            subscriptions.publish("notifications/tools/list_changed", &json!({}));
        }
        assert!(tools_rx.recv().await.is_some());
        assert!(prompts_rx.try_recv().is_err(), "the filter keeps it off");
        drop(tools);
        assert_eq!(subscriptions.len(), 1, "a dropped registration leaves");
    }

    #[test]
    fn tagging_adds_the_subscription_id_to_params_meta() {
        let message = br#"{"jsonrpc":"2.0","method":"notifications/tools/list_changed"}"#;
        let tagged: Value =
            serde_json::from_slice(&tagged(message, &RequestId::from(7_i64)).unwrap()).unwrap();
        assert_eq!(tagged["params"]["_meta"][META_SUBSCRIPTION_ID], 7);
    }
}
