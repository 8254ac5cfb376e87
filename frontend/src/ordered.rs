//! Ordered maps and sets built by inserting.
//!
//! `collect()` into a `BTreeMap` or `BTreeSet` sorts its input first, and each element
//! type brings its own copy of the standard library's stable sort into the bundle (about
//! 3 KB of wasm each). The web chat's maps are a handful of entries, where inserting one
//! by one costs nothing.

use std::collections::{BTreeMap, BTreeSet};

/// A map of `entries`; a later entry wins over an earlier one with the same key, as
/// with `collect()`.
pub fn map_of<K: Ord, V>(entries: impl IntoIterator<Item = (K, V)>) -> BTreeMap<K, V> {
    let mut map = BTreeMap::new();
    map.extend(entries);
    map
}

/// A set of `items`.
pub fn set_of<T: Ord>(items: impl IntoIterator<Item = T>) -> BTreeSet<T> {
    let mut set = BTreeSet::new();
    set.extend(items);
    set
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_map_keeps_the_last_value_of_a_key_and_its_keys_in_order() {
        let map = map_of([("b", 1), ("a", 2), ("b", 3)]);
        assert_eq!(map.into_iter().collect::<Vec<_>>(), [("a", 2), ("b", 3)]);
    }

    #[test]
    fn a_set_holds_each_item_once_in_order() {
        let set = set_of(["c", "a", "c", "b"]);
        assert_eq!(set.into_iter().collect::<Vec<_>>(), ["a", "b", "c"]);
    }
}
