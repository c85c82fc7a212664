//! [`FifoMap`]: a map bounded by count that forgets its oldest insertions first. It serves
//! where something must be remembered for a while but memory must stay bounded whatever
//! clients do: the memory store's tombstones of removed streams, a session's recent requests.
//! The bound is its users' to choose.

use std::collections::{HashMap, VecDeque};
use std::hash::Hash;

/// At most `max` entries; inserting a new key beyond that forgets the oldest inserted.
pub(crate) struct FifoMap<K, V> {
    entries: HashMap<K, V>,
    order: VecDeque<K>,
    max: usize,
}

impl<K: Eq + Hash + Clone, V> FifoMap<K, V> {
    /// An empty map keeping at most `max` entries (0 keeps none).
    pub(crate) fn new(max: usize) -> Self {
        Self {
            entries: HashMap::new(),
            order: VecDeque::new(),
            max,
        }
    }

    /// Inserts `key`, or replaces its value (keeping its place in the order).
    pub(crate) fn insert(&mut self, key: K, value: V) {
        if self.max == 0 {
            return;
        }
        if self.entries.insert(key.clone(), value).is_none() {
            self.order.push_back(key);
        }
        while self.order.len() > self.max {
            if let Some(oldest) = self.order.pop_front() {
                self.entries.remove(&oldest);
            }
        }
    }

    pub(crate) fn get(&self, key: &K) -> Option<&V> {
        self.entries.get(key)
    }
}

#[cfg(test)]
mod tests {
    use super::FifoMap;

    #[test]
    fn keeps_the_newest_insertions_up_to_its_bound() {
        let mut map = FifoMap::new(3);
        for key in 0..5 {
            map.insert(key, key * 10);
        }
        assert_eq!(
            (0..5).map(|key| map.get(&key).copied()).collect::<Vec<_>>(),
            [None, None, Some(20), Some(30), Some(40)]
        );
        // Replacing a value does not make the key newer: it is still the next to go.
        map.insert(2, 21);
        map.insert(5, 50);
        assert_eq!(map.get(&2), None);
        assert_eq!(map.get(&3), Some(&30));

        let mut none = FifoMap::new(0);
        none.insert(1, 1);
        assert_eq!(none.get(&1), None);
    }
}
