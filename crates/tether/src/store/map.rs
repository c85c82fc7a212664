//! The hash map of every backend's hot look-ups.

use std::collections::HashMap;

/// The maps of the backends, looked up on every append and read. Keys are ids the server
/// generated (a client can only look up, never insert, one of its choosing), so the
/// default hasher's protection against chosen collisions buys nothing for its cost; foldhash
/// keeps a per-map random seed all the same.
pub(crate) type FastMap<K, V> = HashMap<K, V, foldhash::fast::RandomState>;
