//! WHATWG server-sent events codec (being written).
