//! Lists that are read a page at a time: how many items a page may hold.

use crate::error::{Error, FieldErrors};

/// Items in one page when the caller names no `limit`.
pub const DEFAULT_LIMIT: u32 = 100;
/// Most items in one page.
pub const MAX_LIMIT: u32 = 500;

/// The page's size: `limit` when it is from 1 to [`MAX_LIMIT`], [`DEFAULT_LIMIT`] when
/// absent, else a 422 naming `limit`.
pub fn limit(asked: Option<u32>) -> Result<usize, Error> {
    let limit = asked.unwrap_or(DEFAULT_LIMIT);
    if !(1..=MAX_LIMIT).contains(&limit) {
        return Err(Error::unprocessable(
            "invalid page",
            FieldErrors::from([("limit".to_owned(), format!("must be from 1 to {MAX_LIMIT}"))]),
        ));
    }
    Ok(limit as usize)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_page_holds_one_to_the_most_items() {
        assert_eq!(limit(None).ok(), Some(DEFAULT_LIMIT as usize));
        assert_eq!(limit(Some(1)).ok(), Some(1));
        assert_eq!(limit(Some(MAX_LIMIT)).ok(), Some(MAX_LIMIT as usize));
        for wrong in [0, MAX_LIMIT + 1, u32::MAX] {
            assert!(
                matches!(limit(Some(wrong)), Err(Error::Unprocessable { .. })),
                "{wrong}"
            );
        }
    }
}
