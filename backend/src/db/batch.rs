//! A read that ends at a count or at about a size, whichever comes first: a page of
//! messages, a batch of events. The queries send one row past the end (see their
//! `before_previous`), which is how a batch knows that more follow.

/// Rows taken in order until `limit` of them or about `max_bytes` of their size: at
/// least one, however large.
pub struct SizedBatch<T> {
    items: Vec<T>,
    bytes: usize,
    limit: usize,
    max_bytes: usize,
}

impl<T> SizedBatch<T> {
    pub fn new(limit: usize, max_bytes: usize) -> Self {
        SizedBatch {
            items: Vec::new(),
            bytes: 0,
            limit,
            max_bytes,
        }
    }

    /// Whether the batch is full, so a row read now is one that follows it.
    pub fn is_full(&self) -> bool {
        self.items.len() >= self.limit || (!self.items.is_empty() && self.bytes >= self.max_bytes)
    }

    /// Takes `item`, `size` bytes of it (a size the database gave; a negative one counts
    /// as the largest there is).
    pub fn take(&mut self, item: T, size: i32) {
        let size = usize::try_from(size).unwrap_or(usize::MAX);
        self.bytes = self.bytes.saturating_add(size);
        self.items.push(item);
    }

    /// The rows taken, and whether more follow.
    pub fn finish(self, more: bool) -> (Vec<T>, bool) {
        (self.items, more)
    }
}
