//! The dispatched [`Event`] value and the [`Item`]s the decoder yields.
//!
//! This module owns the shape of what a reader sees after "Interpreting an event stream"
//! (WHATWG HTML, server-sent events): an event's type, data, the last event ID at dispatch,
//! and the non-event items (comments, `retry`, an ID-only block). It does not parse bytes
//! (see `decode`) or write them (see `encode`).

use std::borrow::Cow;

/// What the decoder yields, in stream order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Item {
    /// A block ended by a blank line whose data buffer was non-empty.
    Event(Event),
    /// A line starting with `:`; the text after the colon, with one leading space removed
    /// (as for field values). WHATWG ignores comments; they are surfaced because servers
    /// send them as keep-alives and a client may count them as liveness.
    Comment(String),
    /// A valid `retry` field, in milliseconds. Yielded when the field is read, not at the
    /// blank line: WHATWG sets the reconnection time while processing the field.
    Retry(u64),
    /// A blank line ended a block without data (for example `id: 7\n\n`) and the committed
    /// last event ID changed to this value. No event is dispatched for such a block. When
    /// an event *is* dispatched, its new ID travels in [`Event::last_event_id`] instead.
    LastEventId(String),
}

/// One dispatched server-sent event.
///
/// The type is stored raw (the `event` field as sent, empty when absent); [`event_type`]
/// applies the WHATWG default of `message`. Equality compares the raw type.
///
/// [`event_type`]: Event::event_type
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Event {
    // `Cow` so that `message`, which MCP servers put on every event, costs no allocation.
    event_type: Option<Cow<'static, str>>,
    data: String,
    pub(crate) last_event_id: String,
    retry: Option<u64>,
}

impl Event {
    /// An event with this data, no explicit type, an empty last event ID and no `retry`.
    #[must_use]
    pub fn new(data: impl Into<String>) -> Self {
        Self {
            event_type: None,
            data: data.into(),
            last_event_id: String::new(),
            retry: None,
        }
    }

    pub(crate) fn from_parts(
        event_type: Option<Cow<'static, str>>,
        data: String,
        last_event_id: String,
        retry: Option<u64>,
    ) -> Self {
        Self {
            event_type,
            data,
            last_event_id,
            retry,
        }
    }

    /// Sets the raw event type; the empty string means "no type" (`message`).
    #[must_use]
    pub fn with_event_type(mut self, event_type: &str) -> Self {
        self.event_type = (!event_type.is_empty()).then(|| Cow::Owned(event_type.to_owned()));
        self
    }

    /// Sets the last event ID seen at dispatch.
    #[must_use]
    pub fn with_last_event_id(mut self, id: &str) -> Self {
        self.last_event_id = id.to_owned();
        self
    }

    /// Records that the event's block carried a valid `retry` field.
    #[must_use]
    pub fn with_retry(mut self, retry_ms: u64) -> Self {
        self.retry = Some(retry_ms);
        self
    }

    /// The event type, `message` when the block had no `event` field or an empty one
    /// (WHATWG dispatch steps 4 and 6).
    #[must_use]
    pub fn event_type(&self) -> &str {
        self.event_type.as_deref().unwrap_or("message")
    }

    /// The `event` field as sent; empty when absent or empty.
    #[must_use]
    pub fn raw_event_type(&self) -> &str {
        self.event_type.as_deref().unwrap_or("")
    }

    /// The data lines joined with LF, without the trailing LF. Line breaks inside the data
    /// were CR, LF or CRLF on the wire; here they are all LF.
    #[must_use]
    pub fn data(&self) -> &str {
        &self.data
    }

    /// Takes the data without copying it.
    #[must_use]
    pub fn into_data(self) -> String {
        self.data
    }

    /// The last event ID string at dispatch: this block's `id`, or the last one committed
    /// before it, which persists across events (WHATWG dispatch step 1). Empty when no ID
    /// was ever set or an empty `id` reset it.
    #[must_use]
    pub fn last_event_id(&self) -> &str {
        &self.last_event_id
    }

    /// The last valid `retry` value (milliseconds) in this event's block, if any. The
    /// decoder has already yielded it as [`Item::Retry`] before the event.
    #[must_use]
    pub fn retry(&self) -> Option<u64> {
        self.retry
    }
}
